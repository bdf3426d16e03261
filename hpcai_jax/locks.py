"""One run at a time per record and per checkpoint directory: an advisory lock file.

Two runs given the same results directory and run id (or the same checkpoint directory) would
otherwise both pass the start-up checks and then overwrite each other's record, or write the
same checkpoint steps. The lock is `flock` on a hidden file: the kernel drops it when its
process dies however it dies (SIGKILL included), so a requeued job is never locked out by the
job it replaces, and the file is removed on release. Where the file system does not support
`flock` (some network mounts), the lock is skipped with a warning rather than failing the run.
A process that ends at once (a second Ctrl-C: run/interrupt.py) removes its files first
(`release_all`).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import weakref

from absl import logging

_held: weakref.WeakSet[PathLock] = weakref.WeakSet()  # the locks this process holds


class Busy(Exception):
    """Another live process holds the lock; the message says which (pid on host)."""


class PathLock:
    """An exclusive lock on `path` (a file created for it), held until `release` or until the
    object is collected (an error path that never reaches `release`)."""

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                holder = os.read(fd, 200).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                if e.errno in (errno.EAGAIN, errno.EACCES):
                    raise Busy(holder) from None
                logging.warning("%s: no lock (%s); another run could use it too", path, e.strerror)
                with contextlib.suppress(OSError):  # a file without its lock means nothing
                    os.unlink(path)
                return
            # A holder that released between our open and flock unlinked the file we locked:
            # lock the file now at `path` instead.
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode())
        self._fd = fd
        _held.add(self)

    def release(self) -> None:
        """Removes the file, then unlocks; safe to repeat."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _held.discard(self)
        with contextlib.suppress(OSError):  # its directory was removed: nothing to clean
            os.unlink(self.path)
        os.close(fd)

    def __del__(self):
        with contextlib.suppress(Exception):  # at interpreter exit the kernel drops it anyway
            self.release()


def release_all() -> None:
    """Every lock this process holds released, its file removed: before an exit that skips
    the clean-ups (`os._exit`), which would leave the files (the kernel drops the locks)."""
    for lock in list(_held):
        lock.release()
