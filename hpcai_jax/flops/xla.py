"""XLA's own count of a compiled program's FLOPs and bytes (docs/design.md, fact 3).

Figures of a sharded program are per device; the global figure is per device × devices. A
missing or negative figure is reported as None with a note, never as a number.
"""

from __future__ import annotations

import dataclasses

import jax


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


def xla_cost(compiled: jax.stages.Compiled, num_devices: int) -> XlaCost:
    """Reads `compiled.cost_analysis()`; num_devices is how many devices the program spans."""
    try:
        analysis = compiled.cost_analysis()
    except Exception as e:  # noqa: BLE001 - some backends raise NotImplementedError or XlaRuntimeError
        return XlaCost(
            None, None, num_devices, f"cost analysis unavailable: {type(e).__name__}: {e}"
        )
    if isinstance(analysis, list | tuple):  # older jax returned one dict per program
        analysis = analysis[0] if analysis else None
    if not analysis:
        return XlaCost(None, None, num_devices, "cost analysis returned nothing on this backend")
    flops, note_f = _figure(analysis, "flops")
    bytes_accessed, note_b = _figure(analysis, "bytes accessed")
    return XlaCost(flops, bytes_accessed, num_devices, "; ".join(n for n in (note_f, note_b) if n))
