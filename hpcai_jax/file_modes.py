"""Files made through `tempfile` (600, folders 700) given the mode an ordinary open or mkdir
would have given them under the umask (docs/reliability.md, A run's outputs). Standard library
only: the acceptance's renderer, which must not start JAX, writes through it too."""

from __future__ import annotations

import os
from pathlib import Path


def umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def as_created(fd_or_path: int | str | Path, directory: bool = False) -> None:
    """Gives a file (or folder) made by `tempfile`, which makes them 600 (700), the mode an
    ordinary open (mkdir) would have given it under the umask: 644 (755) under 0022, so that
    colleagues sharing a results directory can read it."""
    mode = (0o777 if directory else 0o666) & ~umask()
    if isinstance(fd_or_path, int):
        os.fchmod(fd_or_path, mode)
    else:
        os.chmod(fd_or_path, mode)
