"""The path a piece of code takes through the package, counted in function bodies entered: on
every thread, each function of the package whose body runs outside an import counts once, with
the lines of its body (its first line to its last). A file's figure is the lines of the bodies
entered in it, not its length: what a reader follows, not what the file also holds. The
measure of tests/test_step_path.py's goals (issue 67, docs/design.md)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import CodeType, FrameType

import hpcai_jax

PACKAGE = str(Path(hpcai_jax.__file__).resolve().parent) + os.sep


def _importing(frame: FrameType | None, entry: str) -> bool:
    """Whether the frame runs inside an import of one of the package's modules (`entry`, a
    module run as __main__, excepted: its top level is the run itself)."""
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        if code.co_name == "<module>" and path.startswith(PACKAGE) and path != entry:
            return True
        frame = frame.f_back
    return False


def body_lines(code: CodeType) -> range:
    """The lines of a function's body: its first line (decorators included) to its last."""
    last = max((line for *_, line in code.co_lines() if line is not None), default=0)
    return range(code.co_firstlineno, max(last, code.co_firstlineno) + 1)


class BodyTrace:
    """The package's functions entered while it traces, on every thread."""

    def __init__(self, entry: str = ""):
        self.entry = entry
        self.codes: set[CodeType] = set()
        self._lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg) -> None:
        code = frame.f_code
        if event != "call" or code in self.codes or code.co_name == "<module>":
            return None
        if code.co_filename.startswith(PACKAGE) and not _importing(frame, self.entry):
            with self._lock:
                self.codes.add(code)
        return None

    def start(self) -> None:
        threading.settrace(self)
        sys.settrace(self)

    def stop(self) -> None:
        sys.settrace(None)
        threading.settrace(None)

    def files(self) -> dict[str, int]:
        """Package-relative path -> lines of the function bodies entered in it (a line inside
        two entered functions, a closure and its maker, counts once)."""
        lines: dict[str, set[int]] = {}
        for code in list(self.codes):
            path = code.co_filename.removeprefix(PACKAGE).replace(os.sep, "/")
            lines.setdefault("hpcai_jax/" + path, set()).update(body_lines(code))
        return {path: len(found) for path, found in sorted(lines.items())}


@contextmanager
def traced(entry: str = "") -> Iterator[BodyTrace]:
    """Traces the block: `with traced() as seen: ...; seen.files()`."""
    trace = BodyTrace(entry)
    trace.start()
    try:
        yield trace
    finally:
        trace.stop()
