"""What a STREAM run measured: one placement's run (`StreamResult`, with the proofs of its
programs: byte weights and buffer reuse) and the mode's whole measurement (`StreamMeasurement`).
`benchmark.py` measures them; `printed.py` renders and `record.py` records them."""

from __future__ import annotations

import dataclasses

import numpy as np

from hpcai_jax.stream import report
from hpcai_jax.stream.cache import SizeCheck
from hpcai_jax.stream.config import StreamConfig
from hpcai_jax.stream.kernels import DOT_EXTRA_BYTES, CompiledKernel
from hpcai_jax.stream.layout import Layout
from hpcai_jax.stream.placement import Placement
from hpcai_jax.stream.sizing import ArraySize
from hpcai_jax.stream.validate import Validation


@dataclasses.dataclass(frozen=True)
class StreamResult:
    config: StreamConfig
    size: ArraySize
    itemsize: int
    placement: Placement
    size_check: SizeCheck
    kernels: tuple[CompiledKernel, ...]
    figures: list[report.KernelFigures]
    times_s: dict[str, np.ndarray]  # raw per-call seconds, first iteration included
    buffer_reused: dict[str, bool | None]
    validation: Validation
    compile_s: float
    init_s: float
    burst: int = 1  # calls per timed sample (runner.py)
    layout: Layout | None = None  # where the arrays sat (layout.py); None where not measured

    @property
    def elements(self) -> int:
        return self.size.elements

    def byte_weight_mismatches(self) -> list[str]:
        """Kernels whose BabelStream byte count disagrees with XLA's "bytes accessed" by more
        than Dot's partial sums per device (`DOT_EXTRA_BYTES`); the others must match exactly."""
        out = []
        for k in self.kernels:
            xla = k.cost.bytes_accessed
            expected = k.spec.arrays_moved * self.elements * self.itemsize
            slack = DOT_EXTRA_BYTES * self.placement.num_devices if k.spec.writes is None else 0
            if xla is not None and abs(xla - expected) > slack:
                out.append(f"{k.spec.name}: BabelStream counts {expected} bytes, XLA {xla:.0f}")
        return out

    def allocation_problems(self) -> list[str]:
        """Kernels that may allocate per call: output not aliased to the donated buffer."""
        out = []
        for k in self.kernels:
            if k.spec.writes is None:
                continue
            if k.allocation.aliased is False or (k.allocation.temp_bytes or 0) > 0:
                out.append(
                    f"{k.spec.name}: XLA aliases {k.allocation.alias_bytes} of "
                    f"{k.allocation.output_bytes} output bytes, temp {k.allocation.temp_bytes}"
                )
            if self.buffer_reused.get(k.spec.key) is False:
                out.append(f"{k.spec.name}: output landed in a new buffer, not the donated one")
        return out


@dataclasses.dataclass(frozen=True)
class StreamMeasurement:
    """What `--mode=stream` measured on this process, and what it gathered from the others."""

    local: tuple[StreamResult, ...]  # this process's runs: one, or one per local device (each)
    devices: list[report.DeviceFigures] | None  # every process's devices (each); else None
    per_process: list[dict[str, float]] | None  # every process's best rates (one); else None

    @property
    def result(self) -> StreamResult:
        """This process's first run: sizes, programs and allocation proofs are the same on every
        device."""
        return self.local[0]

    @property
    def passed(self) -> bool:
        if self.devices is None:
            return self.local[0].validation.passed
        return all(d.passed for d in self.devices)
