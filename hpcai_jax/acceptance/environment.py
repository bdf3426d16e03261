"""The environment items: what runs (Python, jax, jaxlib, the GPU plugin, CUDA, the driver) and
on what (the backend, the devices, their memory), each judged where a wrong value is a known
cause of trouble: a jax outside the range the project supports, a plugin of another version
than jaxlib, an accelerator run that fell back to the CPU backend."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata

import jax
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from hpcai_jax import third_party
from hpcai_jax.acceptance.items import FAIL, PASS, WARN, Item
from hpcai_jax.device_memory import device_memory_bytes
from hpcai_jax.nodecheck import system

GROUP = "environment"
# pyproject.toml's jax requirement (a test keeps the two equal).
SUPPORTED_JAX = ">=0.10.2,<0.13"
PLUGINS = ("jax-cuda13-plugin", "jax-cuda12-plugin", "jax-rocm7-plugin", "jax-rocm6-plugin")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _fact(name: str, value, reference: str = "", verdict: str = PASS, note: str = "") -> Item:
    return Item(GROUP, name, value, "", reference, verdict, note)


def version_items(accelerator: bool) -> list[Item]:
    """Python, jax and jaxlib against the supported range; the GPU plugin against jaxlib."""
    jax_v, jaxlib_v = jax.__version__, _version("jaxlib") or "unknown"
    supported = Version(jax_v) in SpecifierSet(SUPPORTED_JAX)
    items = [
        _fact("python", platform.python_version(), ">=3.11 (pyproject.toml)"),
        _fact(
            "jax",
            jax_v,
            f"jax{SUPPORTED_JAX} (pyproject.toml)",
            PASS if supported else WARN,
            "" if supported else "outside the range this project was written for",
        ),
        _fact(
            "jaxlib",
            jaxlib_v,
            "jax's version",
            PASS if jaxlib_v == jax_v else WARN,
            "" if jaxlib_v == jax_v else "jax and jaxlib differ",
        ),
    ]
    plugins = {p: v for p in PLUGINS if (v := _version(p))}
    if not plugins:
        items.append(
            _fact(
                "gpu plugin",
                "none",
                "jaxlib's version",
                FAIL if accelerator else WARN,
                "no CUDA or ROCm plugin installed: JAX has only its CPU backend",
            )
        )
    for name, v in plugins.items():
        ok = v == jaxlib_v
        items.append(
            _fact(
                "gpu plugin",
                f"{name} {v}",
                "jaxlib's version",
                PASS if ok else FAIL,
                "" if ok else "a plugin of another version than jaxlib fails at start or at run",
            )
        )
    return items


def _nvml() -> dict:
    """The driver's figures through NVML, or {'why': ...}."""
    try:
        import pynvml  # the `cuda` extra (nvidia-ml-py)

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        return {
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
        }
    except ImportError:
        return {"why": "nvidia-ml-py is not installed"}
    except Exception as e:  # noqa: BLE001 - NVML raises its own error types
        return {"why": f"NVML: {type(e).__name__}: {e}"}


def _nvidia_smi(field: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def device_items(accelerator: bool) -> list[Item]:
    """The backend, the devices, their memory, CUDA and the driver."""
    devices = jax.devices()
    backend, kind = jax.default_backend(), devices[0].device_kind
    items = []
    if accelerator and backend == "cpu":
        items.append(
            _fact(
                "backend",
                backend,
                "an accelerator",
                FAIL,
                "JAX started its CPU backend: the accelerator's plugin did not load (see the "
                "warnings above), or JAX_PLATFORMS excludes it",
            )
        )
    else:
        items.append(_fact("backend", backend, "an accelerator" if accelerator else "any"))
    info = system.describe()
    for row in system.device_rows(info):
        items.append(
            Item(
                GROUP,
                "devices",
                f"{len(devices)} x {kind}",
                "",
                "datasheet tables (flops/peaks.py, stream/datasheet.py)",
                row.status,
                row.note,
            )
        )
    memory = device_memory_bytes(devices[0])
    items.append(
        Item(
            GROUP,
            "device memory",
            float(memory) if memory else None,
            "B",
            "",
            PASS if memory else WARN,
            "the allocator's limit (XLA_PYTHON_CLIENT_MEM_FRACTION of the device on GPUs)"
            if memory
            else "the device reports no memory limit",
        )
    )
    items.append(_fact("platform version", devices[0].client.platform_version))
    if backend == "gpu":
        nvml = _nvml()
        driver = nvml.get("driver") or _nvidia_smi("driver_version")
        items.append(
            _fact(
                "driver",
                driver or "unknown",
                "",
                PASS if driver else WARN,
                nvml.get("why", f"CUDA driver API {nvml.get('cuda_driver', '?')}"),
            )
        )
    return items


def import_items() -> list[Item]:
    """Every third-party module the code imports, imported here: a missing required one FAILs
    (the items that need it would WARN or crash), a missing optional one WARNs, naming the
    extra that installs it where one does (pyproject.toml's optional-dependencies)."""
    results = third_party.check(third_party.third_party_modules())
    missing = [r for r in results if not r["ok"] and not r["optional"]]
    optional = [r for r in results if not r["ok"] and r["optional"]]
    note = "; ".join(
        f"{r['module']}: "
        + (f"not installed ({third_party.install_hint(r['extra'])})" if r["extra"] else r["error"])
        for r in missing + optional
    )
    verdict = FAIL if missing else WARN if optional else PASS
    return [
        Item(
            GROUP,
            "third-party imports",
            f"{len(results) - len(missing) - len(optional)} of {len(results)}",
            "",
            "every module hpcai_jax imports (python -m hpcai_jax.third_party)",
            verdict,
            note,
        )
    ]
