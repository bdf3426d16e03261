"""A jax.profiler trace of a window of training steps, and the map from the step's HLO
instructions to its named phases (docs/observe.md).

XLA:CPU names a trace's device events by HLO instruction (`fusion.12`), not by the named scope
the instruction came from; the scopes are in the compiled HLO's metadata. So the trace's
directory also gets `phases.json` (instruction → phase), read from the compiled step, with which
a reader (hpcai_jax/report/timeline.py) groups the device events. A trace that cannot be started
or written logs one warning line and the run goes on; the record says what was lost.
"""

from __future__ import annotations

import json
import os
import re

import jax
from absl import logging

from hpcai_jax.axes import DATA, MODEL
from hpcai_jax.data.pipeline import INPUT_WAIT
from hpcai_jax.engine.step import (
    FORWARD_BACKWARD_SCOPE,
    METRICS_SCOPE,
    UPDATE_SCOPE,
    allreduce_scope,
)

# Host-side phases: TraceAnnotations of the training loop (run/observe.py's step, the
# prefetcher's wait in data/pipeline.py, run/evaluation.py).
STEP_ANNOTATION = "train_step"
EVALUATION = "evaluation"

# Device-side phases, in the order they are looked for in an instruction's scope path.
DEVICE_PHASES = (
    allreduce_scope(DATA),
    allreduce_scope(MODEL),
    UPDATE_SCOPE,
    METRICS_SCOPE,
    FORWARD_BACKWARD_SCOPE,
)

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=.*?metadata=\{op_name=\"([^\"]*)\"")
_MODULE = re.compile(r"^HloModule\s+([\w.\-]+)")


def phase_map(hlo_text: str) -> dict:
    """{"module": the HLO module's name, "phases": {instruction: phase}} for every instruction
    whose scope path names one of DEVICE_PHASES, and the host's and device's phase names."""
    module, phases = None, {}
    for line in hlo_text.splitlines():
        if module is None and (m := _MODULE.match(line)):
            module = m.group(1)
        if (m := _INSTRUCTION.match(line)) is None:
            continue
        parts = m.group(2).split("/")
        for phase in DEVICE_PHASES:
            if phase in parts:
                phases[m.group(1)] = phase
                break
    # The names a reader draws (report/timeline.py, which must not import JAX to know them).
    return {
        "module": module,
        "phases": phases,
        "host": [STEP_ANNOTATION, INPUT_WAIT, EVALUATION],
        "device": list(DEVICE_PHASES),
    }


class Trace:
    """One window's trace: `start` before its first step, `stop` after its last completed."""

    def __init__(self, directory: str):
        self.directory = directory
        self.active = False
        self.lost: str | None = None
        self.files: list[str] = []

    def start(self, hlo_text: str) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
            with open(os.path.join(self.directory, "phases.json"), "w") as f:
                json.dump(phase_map(hlo_text), f)
            jax.profiler.start_trace(self.directory, create_perfetto_trace=True)
        except Exception as e:  # a profile must never end the run it looks at
            self._fail(f"could not start a profiler trace in {self.directory}: {e}")
            return
        self.active = True

    def stop(self) -> None:
        if not self.active:
            return
        self.active = False
        try:
            jax.profiler.stop_trace()
        except Exception as e:
            self._fail(f"could not write the profiler trace in {self.directory}: {e}")
        self.files = sorted(
            os.path.relpath(os.path.join(root, name), self.directory)
            for root, _, names in os.walk(self.directory)
            for name in names
        )

    def _fail(self, why: str) -> None:
        logging.warning("%s; the run goes on without it", why)
        self.lost = why

    def perfetto(self) -> str | None:
        """The Perfetto-readable trace (.trace.json.gz) among the files, if the JAX made one."""
        for name in self.files:
            if name.endswith("perfetto_trace.json.gz"):
                return name
        return None
