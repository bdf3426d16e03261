"""XLA's own count of a compiled program's FLOPs and bytes (docs/design.md, fact 3).

Figures of a sharded program are per device; the global figure is per device × devices. A
missing or negative figure is reported as None with a note, never as a number.

On GPUs the optimised program hands convolutions and many matmuls to cuDNN and cuBLAS custom
calls, which XLA's cost analysis counts as nothing (the first H200 run counted 1.7 % of ResNet-50's
FLOPs). Where the compiled program holds such calls and the lowered one is given, the FLOPs are
those of the program before optimisation, whose convolutions and dots are still plain HLO; the
shard_map bodies are per-device shapes there too, so the figure stays per device.
"""

from __future__ import annotations

import dataclasses
import re

import jax

# Custom calls into vendor libraries whose work cost analysis does not see.
_LIBRARY_CALL = re.compile(
    r'custom_call_target="(__cudnn[^"]*|__cublas[^"]*|__hipblas[^"]*|__miopen[^"]*)"'
)


@dataclasses.dataclass(frozen=True)
class XlaCost:
    flops_per_device: float | None
    bytes_accessed_per_device: float | None
    num_devices: int
    note: str = ""

    @property
    def flops(self) -> float | None:
        """Global FLOPs: the per-device figure times the devices the program runs on."""
        return None if self.flops_per_device is None else self.flops_per_device * self.num_devices

    @property
    def bytes_accessed(self) -> float | None:
        if self.bytes_accessed_per_device is None:
            return None
        return self.bytes_accessed_per_device * self.num_devices


def _figure(analysis: dict, key: str) -> tuple[float | None, str]:
    value = analysis.get(key)
    if value is None:
        return None, f"cost analysis has no {key!r} figure on this backend"
    if value < 0:
        return None, f"cost analysis returned {key}={value} (unknown) on this backend"
    return float(value), ""


def library_calls(compiled) -> dict[str, int]:
    """The compiled program's custom calls into cuDNN, cuBLAS (or their ROCm peers), by target."""
    try:
        text = compiled.as_text()
    except Exception:  # noqa: BLE001 - a backend without a text form has none we can see
        return {}
    calls: dict[str, int] = {}
    for target in _LIBRARY_CALL.findall(text or ""):
        calls[target] = calls.get(target, 0) + 1
    return calls


def _analysis(stage) -> tuple[dict | None, str]:
    try:
        analysis = stage.cost_analysis()
    except Exception as e:  # noqa: BLE001 - some backends raise NotImplementedError or XlaRuntimeError
        return None, f"cost analysis unavailable: {type(e).__name__}: {e}"
    if isinstance(analysis, list | tuple):  # older jax returned one dict per program
        analysis = analysis[0] if analysis else None
    if not analysis:
        return None, "cost analysis returned nothing on this backend"
    return analysis, ""


def before_optimisation(lowered) -> tuple[dict | None, str]:
    """Cost analysis of the lowered program. A PJRT plugin backend (the GPU's) has none of its
    own, so the host's CPU backend analyses the same HLO module: the call Lowered.cost_analysis
    makes on the others (a private JAX function; any failure is a note, not a figure)."""
    analysis, note = _analysis(lowered)
    if analysis is not None:
        return analysis, note
    try:
        from jax._src.lib import _jax

        cpu = jax.local_devices(backend="cpu")[0].client
        module = lowered._lowering.hlo().as_hlo_module()
        analysis = _jax.hlo_module_cost_analysis(cpu, module)
    except Exception as e:  # noqa: BLE001 - private API: may move between JAX versions
        return None, f"{note}; the host's analysis of it failed: {type(e).__name__}: {e}"
    return (analysis, "") if analysis else (None, note)


def xla_cost(
    compiled: jax.stages.Compiled, num_devices: int, lowered=None, counted=None, trips: int = 1
) -> XlaCost:
    """Reads `compiled.cost_analysis()`; num_devices is how many devices the program spans.
    `lowered`: the same program before optimisation, whose FLOPs count instead when the compiled
    one calls libraries that cost analysis does not see (GPUs). `counted`: the same program
    with its loops over members written out (engine/step.StepBuild.counted), whose FLOPs count
    instead, before optimisation: cost analysis counts a loop's body once, whatever its trips.
    `trips`: how often that loop runs (the members per device); past one, the compiled
    program's bytes accessed are its body's once, and are reported as unknown."""
    analysis, note = _analysis(compiled)
    if analysis is None:
        return XlaCost(None, None, num_devices, note)
    flops, note_f = _figure(analysis, "flops")
    bytes_accessed, note_b = _figure(analysis, "bytes accessed")
    if counted is not None:
        before, note = before_optimisation(counted)
        flops, note_f = _figure(before, "flops") if before is not None else (None, note)
        note_f = "; ".join(
            n
            for n in (
                "FLOPs of the step with its loops over members written out, before "
                "optimisation: cost analysis counts a loop's body once",
                note_f,
            )
            if n
        )
        if trips > 1:
            # Its bytes are the loop body's once too, and the written-out program's (before
            # fusion) are no measure of the compiled one's: unknown, never scaled by FLOPs.
            bytes_accessed, note_b = (
                None,
                f"bytes accessed unknown: the compiled step runs its {trips} members per device "
                "in a loop, whose body cost analysis counts once",
            )
    elif lowered is not None and (calls := library_calls(compiled)):
        before, note = before_optimisation(lowered)
        flops, note_f = _figure(before, "flops") if before is not None else (None, note)
        listed = ", ".join(f"{n} x {t}" for t, n in sorted(calls.items()))
        note_f = "; ".join(
            n
            for n in (
                f"FLOPs of the program before optimisation: the compiled one calls {listed}, "
                "which cost analysis does not count",
                note_f,
            )
            if n
        )
    return XlaCost(flops, bytes_accessed, num_devices, "; ".join(n for n in (note_f, note_b) if n))
