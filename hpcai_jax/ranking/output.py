"""The list's folder put in place whole (docs/ranking.md, "Outputs"): written in a temporary
folder beside `--out`, then renamed onto it, so a list is never half-written and an existing
one is never half-overwritten; every file named by the list (never by a package), so nothing is
written outside `--out`."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from hpcai_jax.errors import UsageError
from hpcai_jax.file_modes import as_created

MARK = "ranking.json"  # what makes a folder a list --overwrite may replace


def refuse(out: str, overwrite: bool) -> None:
    """UsageError (one line) for an --out that cannot take a new list, before any work."""
    path = Path(out)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise UsageError(f"--out={out}: exists and is not a folder")
    if not path.exists() or not any(path.iterdir()):
        return
    if not overwrite:
        raise UsageError(f"--out={out}: already exists; give --overwrite to replace the list")
    if not (path / MARK).is_file():
        raise UsageError(
            f"--out={out}: not a list (no {MARK}): --overwrite replaces only a list it wrote"
        )


def write(out: str, files: dict[str, str | bytes]) -> Path:
    """Every file (relative path → text or bytes) in a new folder, renamed into `out`."""
    target = Path(out)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        as_created(tmp, directory=True)
    except OSError as e:
        raise UsageError(f"--out={out}: cannot create it ({e.strerror})") from None
    old = None
    try:
        for name, content in sorted(files.items()):
            path = tmp / name
            assert path.resolve().is_relative_to(tmp.resolve()), name  # names are the list's
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_text(content, encoding="utf-8")
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            os.replace(target, old / "list")
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and not target.exists():
            os.replace(old / "list", target)  # the previous list back
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return target
