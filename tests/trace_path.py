"""Runs `python -m hpcai_jax.main` with the flags given and writes, as JSON to the file named
first, the package traced, the lines of the function bodies entered in each of its files on
any thread (tests/body_trace.py) from the entry point to the trainer's first update, the return
of its first `Trainer.step`, and how many `RunSetup`s the run built. Then it ends the process
at once (os._exit): the path stops there. With --stub_probes (before the flags) the start-up
measurements are stubbed: the step is compiled and nothing else measured, the path a run
needs to train.

    python tests/trace_path.py OUT.json [--stub_probes] --flagfile=configs/quickstart.flags
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import types
from pathlib import Path

from body_trace import PACKAGE, BodyTrace

TRAINER = PACKAGE + os.path.join("run", "trainer.py")
ENTRY = PACKAGE + "main.py"  # run as __main__: its top level is the run itself


def _thread_targets() -> list:
    """The code of the package's functions the live threads were started to run: on the path
    whether or not the thread has been scheduled yet (the watchdog's, started just before the
    first step)."""
    found = []
    for thread in threading.enumerate():
        target = getattr(thread, "_target", None)
        code = getattr(getattr(target, "__func__", target), "__code__", None)
        if code is not None and code.co_filename.startswith(PACKAGE):
            found.append(code)
    return found


def _stub_probes() -> None:
    """The trainer's start-up measurements, the probes of hpcai_jax/run/probes.py, replaced in
    their registry by one that counts nothing: the step is compiled and nothing else measured."""
    from hpcai_jax.run import probes

    unmeasured = types.SimpleNamespace(train_step_flops=0.0, train_step_flops_source="stub")
    probes.PROBES = (probes.Probe("stub", "nothing", lambda m: unmeasured, _take_flops),)


def _take_flops(m, flops, source: str) -> None:
    m.flops = flops


def _count_setups(built: list) -> None:
    from hpcai_jax.engine.setup import RunSetup

    init = RunSetup.__init__

    def counted(self, *args, **kwargs):
        built.append(1)
        init(self, *args, **kwargs)

    RunSetup.__init__ = counted


class _StopAtFirstStep(BodyTrace):
    """The body trace, ended (and written) at the return of the first `Trainer.step`."""

    def __init__(self, out: str, built: list):
        super().__init__(ENTRY)
        self.out, self.built = out, built

    def __call__(self, frame, event, arg):
        super().__call__(frame, event, arg)
        code = frame.f_code
        if code.co_name == "step" and code.co_filename == TRAINER:
            return self._at_return
        return None

    def _at_return(self, frame, event, arg):
        if event != "return":
            return self._at_return
        self.stop()
        self.codes.update(_thread_targets())  # a thread started but not yet scheduled
        traced = {"package": PACKAGE, "files": self.files(), "run_setups": len(self.built)}
        Path(self.out).write_text(json.dumps(traced, indent=1) + "\n")
        os._exit(0)


def main() -> None:
    out, flags = sys.argv[1], sys.argv[2:]
    if flags[:1] == ["--stub_probes"]:
        flags = flags[1:]
        _stub_probes()
    built: list = []
    _count_setups(built)
    _StopAtFirstStep(out, built).start()
    sys.argv = ["hpcai_jax.main", *flags]
    runpy.run_module("hpcai_jax.main", run_name="__main__", alter_sys=True)
    sys.exit("the run ended before its first step")


if __name__ == "__main__":
    main()
