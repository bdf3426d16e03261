"""Runs `python -m hpcai_jax.main` with the flags given and writes, as JSON to the file named
first, the package traced and its modules whose code ran on any thread (the main thread, the prefetch
thread, every other) from the entry point to the trainer's first update: the return of its
first `Trainer.step`. Then it ends the process at once (os._exit): the path stops there.

A module counts when one of its functions runs outside an import: what an import executes (a
module's top level, its class bodies, what they call) is declaration, not the run's path. The
reading of tests/test_step_path.py (docs/design.md, "The path from `main()`").

    python tests/trace_path.py OUT.json --flagfile=configs/quickstart.flags [--flag=value ...]
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
from pathlib import Path

import hpcai_jax  # noqa: E402  (the package this interpreter imports: its files are traced)

PACKAGE = str(Path(hpcai_jax.__file__).resolve().parent) + os.sep
TRAINER = PACKAGE + os.path.join("run", "trainer.py")
ENTRY = PACKAGE + "main.py"  # run as __main__: its top level is the run itself


def _importing(frame) -> bool:
    """Whether the frame runs inside an import of one of the package's modules."""
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        if code.co_name == "<module>" and path.startswith(PACKAGE) and path != ENTRY:
            return True
        frame = frame.f_back
    return False


def _thread_targets() -> set[str]:
    """The package's modules whose functions the live threads were started to run: on the
    path whether or not the thread has been scheduled yet (the watchdog's, started just
    before the first step)."""
    found = set()
    for thread in threading.enumerate():
        target = getattr(getattr(thread, "_target", None), "__func__", None) or getattr(
            thread, "_target", None
        )
        path = getattr(getattr(target, "__code__", None), "co_filename", "")
        if path.startswith(PACKAGE):
            found.add("hpcai_jax/" + path.removeprefix(PACKAGE).replace(os.sep, "/"))
    return found


def main() -> None:
    out, flags = sys.argv[1], sys.argv[2:]
    seen: set[str] = set()
    lock = threading.Lock()

    def profile(frame, event, arg):
        code = frame.f_code
        path = code.co_filename
        if not path.startswith(PACKAGE):
            return
        if event == "call" and code.co_name != "<module>" and not _importing(frame):
            with lock:
                seen.add("hpcai_jax/" + path.removeprefix(PACKAGE).replace(os.sep, "/"))
        elif event == "return" and path == TRAINER and code.co_name == "step":
            sys.setprofile(None)
            threading.setprofile(None)
            with lock:
                seen.update(_thread_targets())  # a thread started but not yet scheduled
                traced = {"package": PACKAGE, "modules": sorted(seen)}
                Path(out).write_text(json.dumps(traced, indent=1) + "\n")
            os._exit(0)

    threading.setprofile(profile)
    sys.setprofile(profile)
    sys.argv = ["hpcai_jax.main", *flags]
    runpy.run_module("hpcai_jax.main", run_name="__main__", alter_sys=True)
    sys.exit("the run ended before its first step")


if __name__ == "__main__":
    main()
