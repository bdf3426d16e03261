"""Writes a report all at once or not at all: files go to a hidden directory beside --out, then
move into place (a rename of the whole directory when --out is new; file by file, report.md
last, when it exists). A failure leaves no half-written report behind, only the old one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

from hpcai_jax.errors import UsageError


def _fail(out: Path, what: str, e: OSError) -> UsageError:
    return UsageError(f"--out={out}: {what} ({e.strerror or e})")


def check(out: Path) -> None:
    """Fails before any work when --out cannot be a directory this process writes."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out={out}: exists and is not a directory")
    if out.exists() and not os.access(out, os.W_OK):
        raise UsageError(f"--out={out}: directory is not writable")
    parent = next((p for p in out.absolute().parents if p.exists()), Path("/"))
    if not out.exists() and not (parent.is_dir() and os.access(parent, os.W_OK)):
        raise UsageError(f"--out={out}: cannot create it ({parent} is not a writable directory)")


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A fresh directory to write the report into; on leaving without an error its files
    replace those of `out`. Raises UsageError (naming --out) for any file-system failure."""
    check(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        tmp.mkdir()
    except OSError as e:
        raise _fail(out, "cannot create the report directory", e) from None
    try:
        yield tmp
        _publish(tmp, out)
    except OSError as e:
        raise _fail(out, "cannot write the report", e) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _publish(tmp: Path, out: Path) -> None:
    if not out.exists():
        tmp.rename(out)
        return
    files = sorted(tmp.iterdir(), key=lambda p: (p.suffix == ".md", p.name))
    for path in files:
        os.replace(path, out / path.name)


def write_text(path: Path, text: str) -> None:
    """One file, atomically (temp file in the same directory, then rename)."""
    out = path.parent
    check(out)
    tmp = out / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise _fail(out, f"cannot write {path.name}", e) from None
