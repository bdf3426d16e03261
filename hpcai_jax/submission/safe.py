"""A package's boundaries (docs/submission.md, "What check cannot be made to do"): a run id is a
plain file name, a package holds only regular files and folders (no symbolic link, FIFO or
device), what `check` reads is bounded in size and JSON nesting, and `pack`'s writes that find
the disk full end in one line naming the path."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

from hpcai_jax.errors import DiskFull, UsageError, is_full
from hpcai_jax.records.read import MAX_DEPTH, nesting

# A run id names files (<run_id>.json, stream/<run_id>.txt): a plain name, no folder, no hidden
# file (which `check`'s globs would skip), nothing a README row or an MLLOG line could not hold.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=@,-]{0,199}")
MAX_BYTES = 256 << 20  # any one file of a package `check` reads (weights folders aside)


def run_id(value, where) -> str:
    """`value` as a run id; UsageError naming `where` unless it is a plain file name."""
    if not isinstance(value, str) or not NAME.fullmatch(value) or value in (".", ".."):
        raise UsageError(
            f"{where}: run_id {value!r} is not a plain file name (letters, digits and . _ + = @ , "
            "-, not starting with a dot, at most 200): a package names its files by it"
        )
    return value


def scan(root: Path) -> list[str]:
    """Failure lines for what a package must not hold: a symbolic link, anything but a regular
    file or folder, a file over MAX_BYTES (outside the weights folders). Nothing is opened."""
    out = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        here = Path(folder)
        weights = here != root and here.relative_to(root).parts[0].endswith(".weights")
        for name in sorted(dirs + files):
            path = here / name
            where = path.relative_to(root)
            try:
                info = os.lstat(path)
            except OSError as e:
                out.append(f"package: {where}: cannot read it ({e.strerror})")
                continue
            if stat.S_ISLNK(info.st_mode):
                out.append(f"package: {where} is a symbolic link: a package holds its own files")
            elif not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                out.append(f"package: {where} is not a regular file (a FIFO, socket or device)")
            elif stat.S_ISREG(info.st_mode) and info.st_size > MAX_BYTES and not weights:
                out.append(f"package: {where} holds {info.st_size} bytes, over {MAX_BYTES}")
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
    return out


def read_text(path: Path) -> str:
    """A regular file's text (a link followed: `check` refused every link first, `pack` takes
    linked inputs), at most MAX_BYTES; UsageError naming it otherwise (a FIFO is never opened,
    so never waited on)."""
    try:
        info = os.stat(path)
    except OSError as e:
        raise UsageError(f"{path}: cannot read it ({e.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{path}: not a regular file (a FIFO, device or folder)")
    if info.st_size > MAX_BYTES:
        raise UsageError(f"{path}: {info.st_size} bytes, over {MAX_BYTES}")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise UsageError(f"{path}: over {MAX_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


def load_json(path: Path):
    """The JSON in a package file, bounded in size and depth; UsageError naming the file. Its
    values are the caller's to judge (a training record may hold a NaN loss)."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except RecursionError:
        raise UsageError(f"{path}: JSON nested deeper than {MAX_DEPTH}") from None
    except ValueError as e:
        raise UsageError(f"{path}: not JSON ({e})") from None
    if nesting(data) > MAX_DEPTH:
        raise UsageError(f"{path}: JSON nested deeper than {MAX_DEPTH}")
    return data


def written(path: Path, e: BaseException) -> UsageError:
    """The one-line error of a failed write: errors.DiskFull (exit 74, requeued like a run's)
    where the disk or the quota is full; what pack had written is removed by its caller."""
    text = str(e)
    why = getattr(e, "strerror", None) or (text.splitlines()[0] if text else type(e).__name__)
    if is_full(e):
        return DiskFull(f"{path}: no space left to write it ({why}); nothing was packed")
    return UsageError(f"{path}: cannot write it ({why}); nothing was packed")
