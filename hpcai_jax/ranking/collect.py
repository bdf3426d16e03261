"""The packages a list is built from (docs/ranking.md, "Input"): each argument a package folder
or a folder of them; each package's digest (what its result IDs come from); and what makes a
package unsafe to read at all (a symbolic link, a special file), refused before `check` opens
it so that nothing outside the package is read or written."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from hpcai_jax.errors import UsageError
from hpcai_jax.submission import SYSTEM

CHUNK = 1 << 20


def _is_package(folder: Path) -> bool:
    return (folder / SYSTEM).exists() or any(folder.glob("*.json")) or (folder / "stream").exists()


def packages(args: list[str]) -> list[Path]:
    """The package folders named by `args`, each once: a folder holding a package's files is
    one; any other folder is a folder of packages (its subfolders, by name). UsageError (one
    line) for an argument that is no folder or holds no package."""
    if not args:
        raise UsageError("PKG_DIR: expected at least one package folder (from `submission pack`)")
    found: list[Path] = []
    for arg in args:
        path = Path(arg)
        if not path.is_dir():
            raise UsageError(
                f"{arg}: not a folder (a package from `submission pack`, or a folder of them)"
            )
        if path.is_symlink() or _is_package(path):  # a link: refused as a package (unsafe)
            found.append(path)
            continue
        inside = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not inside:
            raise UsageError(f"{arg}: holds no package (no system.json, no records, no subfolders)")
        found += inside
    seen: set[Path] = set()
    return [p for p in found if not (p.resolve() in seen or seen.add(p.resolve()))]


def unsafe(root: Path) -> str:
    """Why a package is not read (a symbolic link or a special file inside it, which could make
    `check` read outside the package or block on a FIFO), or empty."""
    if root.is_symlink():
        return f"{root}: a symbolic link (to {os.readlink(root)}), not a package folder: refused"
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs + files):
            path = Path(folder) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                return (
                    f"{path}: a symbolic link inside the package (to {os.readlink(path)}): refused"
                )
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                return f"{path}: not a regular file or folder: refused"
    return ""


def digest(root: Path) -> str:
    """sha256 over every file of the package: its path inside the package and its bytes, in
    order of path. Two copies of one package have one digest wherever they lie."""
    total = hashlib.sha256()
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    for path in files:
        one = hashlib.sha256()
        with open(path, "rb") as f:
            while block := f.read(CHUNK):
                one.update(block)
        total.update(f"{path.relative_to(root).as_posix()}\0{one.hexdigest()}\n".encode())
    return total.hexdigest()
