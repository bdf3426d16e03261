"""Copies prepared tensorflow-datasets sets to node-local storage, once per node, checked and
resumable: `python -m hpcai_jax.data.stage SRC DST`.

Thousands of processes reading ImageNet's shards at random from one shared file system is what
a large job's input waits on; a copy on each node's own disk, made once before training, is
read at that disk's speed. What is copied, the checks, the resumption, the lock and the output
lines: `docs/reliability.md`, Data at scale.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

from hpcai_jax.errors import Parser, UsageError
from hpcai_jax.locks import Busy, PathLock

PROG = "hpcai_jax.data.stage"
MANIFEST = ".hpcai_jax_stage.json"  # DST's one file of its own: what was copied and verified
_LOCK = ".hpcai_jax_stage.lock"  # exists only while a stage runs (locks.PathLock removes it)
_PARTIAL = ".hpcai_jax_partial"  # suffix of a file being copied: never taken for a complete one
_INFO = "dataset_info.json"  # marks a prepared set's version directory; copied last
_CHUNK = 4 << 20
_TRIES = 2  # a copy whose size or checksum differs is made once more before the stage fails
_SAVE_S = 10.0  # the manifest is rewritten at most this often while copying, and at the end
_POLL_S = 0.5  # how often a stage waiting for another one's lock tries again
_WAIT_LINE_S = 60.0
_EXPECTED = (
    "expected a tensorflow-datasets data directory (holding <name>/<version>/dataset_info.json)"
    " or one data set's directory"
)


class CopyFailed(UsageError):
    """A read, write or verification failed during the copy (not bad input): exit code 1."""

    exit_code = 1


class _Stopped(Exception):
    """Another copy failed: this one stops at its next chunk."""


@dataclasses.dataclass(frozen=True)
class SourceFile:
    rel: str  # path relative to SRC (and to DST)
    size: int
    mtime_ns: int


def _building(name: str) -> bool:
    """A directory tfds is writing a set into: incomplete.XXXX_1.0.0 (1.0.0.incompleteXXXX in
    older versions), renamed to its version once complete."""
    return name.startswith("incomplete.") or ".incomplete" in name


def source_files(src: Path) -> list[SourceFile]:
    """Every file under each prepared set's version directory (one holding dataset_info.json,
    not a tfds build in progress), relative to SRC: tfds reads nothing else, so its download
    cache (`downloads/`: ImageNet's archives) is not copied."""

    def unreadable(error: OSError):
        raise UsageError(f"SRC={src}: cannot read {error.filename} ({error.strerror})")

    found = []
    for root, dirs, files in os.walk(src, onerror=unreadable):
        dirs[:] = sorted(d for d in dirs if not _building(d))
        if _INFO not in files:
            continue
        for inner, inner_dirs, inner_files in os.walk(root, onerror=unreadable):
            inner_dirs.sort()
            for name in inner_files:
                path = Path(inner, name)
                try:
                    st = path.stat()
                except OSError as e:
                    unreadable(e)
                found.append(SourceFile(str(path.relative_to(src)), st.st_size, st.st_mtime_ns))
        dirs[:] = []  # all of it is listed
    return found


def check_paths(src: str | Path, dst: str | Path) -> tuple[Path, Path, list[SourceFile]]:
    """SRC and DST as paths, and SRC's files; UsageError naming the path when either is wrong.
    Nothing is created here."""
    source, target = Path(src).expanduser(), Path(dst).expanduser()
    if not source.exists():
        raise UsageError(f"SRC={src}: not found; {_EXPECTED}")
    if not source.is_dir():
        raise UsageError(f"SRC={src}: not a directory; {_EXPECTED}")
    real_src, real_dst = source.resolve(), target.resolve()
    if real_dst == real_src or real_src in real_dst.parents:
        raise UsageError(f"DST={dst}: inside SRC={src}; expected a directory outside it")
    if target.exists() and not target.is_dir():
        raise UsageError(f"DST={dst}: not a directory")
    files = source_files(source)
    if not files:
        raise UsageError(f"SRC={src}: no prepared data set inside (no {_INFO}); {_EXPECTED}")
    return source, target, files


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _duration(s: float) -> str:
    m, s = divmod(int(s + 0.5), 60)
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{s:02d}s"


class _Progress:
    """Bytes and files copied so far, from every copying thread; the rate and ETA line."""

    def __init__(self, dst: Path, files: int, total: int, every_s: float, out):
        self._dst, self._files, self._total, self._out = dst, files, total, out
        self.every_s = every_s
        self._lock = threading.Lock()
        self.bytes = self.done = 0
        self.start = self._last = time.monotonic()
        self.stop = threading.Event()

    def add(self, n: int) -> None:
        with self._lock:
            self.bytes += n

    def file_done(self) -> None:
        with self._lock:
            self.done += 1

    def report(self) -> None:
        """The rate line, when `every_s` has passed since the last one."""
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        rate = self.bytes / max(now - self.start, 1e-9)
        eta = (self._total - self.bytes) / rate if rate > 0 else float("inf")
        self._out(
            f"{self._dst}: {self.done} of {self._files} files, {_size(self.bytes)} of "
            f"{_size(self._total)} ({100 * self.bytes / max(self._total, 1):.0f}%), "
            f"{rate / 1e6:.1f} MB/s, ETA {_duration(eta) if eta < 1e7 else '?'}"
        )


def _drop_cache(fd: int) -> None:
    """So that the read-back below comes from the disk, not from the pages just written."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _copy(source: Path, partial: Path, progress: _Progress) -> tuple[int, str]:
    """Copies source to partial, durably; its size and SHA-256 as read."""
    digest, size = hashlib.sha256(), 0
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(source, "rb", buffering=0) as r, open(partial, "wb") as w:
        while n := r.readinto(buffer):
            if progress.stop.is_set():
                raise _Stopped
            digest.update(view[:n])
            w.write(view[:n])
            size += n
            progress.add(n)
        w.flush()
        os.fsync(w.fileno())
        _drop_cache(w.fileno())
    return size, digest.hexdigest()


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    buffer = bytearray(_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


def _copy_verified(f: SourceFile, src: Path, dst: Path, progress: _Progress) -> dict:
    """Copies one file under a temporary name, reads the copy back, and renames it into place
    when its size and SHA-256 are the source's; its manifest entry."""
    source, target = src / f.rel, dst / f.rel
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + _PARTIAL)
    try:
        for _ in range(_TRIES):
            size, digest = _copy(source, partial, progress)
            if size == f.size and file_sha256(partial) == digest:
                os.replace(partial, target)
                progress.file_done()
                return {
                    "size": size,
                    "sha256": digest,
                    "source_mtime_ns": f.mtime_ns,
                    "mtime_ns": target.stat().st_mtime_ns,
                }
            progress.add(-size)
    except OSError as e:  # a read or write error names no file: say which
        raise CopyFailed(f"copying {source} to {target}: {e.strerror or e}") from None
    finally:
        partial.unlink(missing_ok=True)
    raise CopyFailed(
        f"{target}: the copy differed from {source} ({_TRIES} tries: size {size} of {f.size} "
        "bytes, or its SHA-256): a failing disk, or the source changing while it is copied"
    )


def _staged(f: SourceFile, entry: dict | None, dst: Path) -> bool:
    """Whether the file is in DST as the manifest recorded it, from this version of the source."""
    if not entry or entry.get("size") != f.size or entry.get("source_mtime_ns") != f.mtime_ns:
        return False
    try:
        st = (dst / f.rel).stat()
    except OSError:
        return False
    return st.st_size == f.size and st.st_mtime_ns == entry.get("mtime_ns")


def _load_manifest(dst: Path, out) -> dict[str, dict]:
    path = dst / MANIFEST
    try:
        files = json.loads(path.read_text())["files"]
        if not isinstance(files, dict):
            raise TypeError("files is not a mapping")
        return files
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as e:
        out(f"{path}: unreadable ({type(e).__name__}): every file is copied again")
        return {}


def _save_manifest(dst: Path, src: Path, files: dict[str, dict], complete: bool) -> None:
    """Atomically: a temporary file, fsync, rename, fsync of the directory."""
    path = dst / MANIFEST
    partial = path.with_name(path.name + _PARTIAL)
    body = {"format": 1, "source": str(src.absolute()), "complete": complete, "files": files}
    with open(partial, "w") as f:
        json.dump(body, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    fd = os.open(dst, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _lock(dst: Path, out) -> PathLock:
    """DST's lock: a stage already running there (another task of this node) is waited for."""
    last = None
    while True:
        try:
            return PathLock(str(dst / _LOCK))
        except Busy as holder:
            if last is None or time.monotonic() - last >= _WAIT_LINE_S:
                out(f"{dst}: being staged by {holder}; waiting for it, then checking its copy")
                last = time.monotonic()
            time.sleep(_POLL_S)
        except OSError as e:
            raise UsageError(f"DST={dst}: not writable ({e.strerror})") from None


def _remove_partials(dst: Path) -> int:
    """Files an interrupted stage was copying (its lock is gone, so it is not running)."""
    removed = 0
    for root, _, files in os.walk(dst):
        for name in files:
            if name.endswith(_PARTIAL):
                Path(root, name).unlink(missing_ok=True)
                removed += 1
    return removed


def _check_space(dst: Path, todo: list[SourceFile]) -> None:
    """Enough free space for what is to be copied, less the old copies it replaces."""
    need = sum(f.size for f in todo)
    for f in todo:
        with contextlib.suppress(OSError):  # not there yet
            need -= (dst / f.rel).stat().st_size
    free = shutil.disk_usage(dst).free
    if need > free:
        raise UsageError(
            f"DST={dst}: not enough free space: {len(todo)} files need {_size(need)}, "
            f"{_size(free)} free"
        )


def _copy_all(todo, src, dst, progress, manifest, threads) -> None:
    """Copies `todo` on `threads` threads, recording each verified copy in `manifest` (saved
    every _SAVE_S); on a failure, the others stop and what was verified is saved."""
    saved = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        pending = {pool.submit(_copy_verified, f, src, dst, progress): f for f in todo}
        try:
            while pending:
                done, _ = concurrent.futures.wait(
                    pending,
                    timeout=progress.every_s or None,
                    return_when=concurrent.futures.FIRST_COMPLETED,
                )
                for future in done:
                    manifest[pending.pop(future).rel] = future.result()
                    if not progress.every_s:  # --progress_s=0: a line per file, however many
                        progress.report()  # ended together
                if progress.every_s:
                    progress.report()
                if time.monotonic() - saved >= _SAVE_S:
                    _save_manifest(dst, src, manifest, complete=False)
                    saved = time.monotonic()
        except BaseException:
            progress.stop.set()
            for future in pending:
                future.cancel()
            concurrent.futures.wait(pending)
            _save_manifest(dst, src, manifest, complete=False)
            raise


def stage(
    src: str | Path, dst: str | Path, threads: int = 4, progress_s: float = 5.0, out=print
) -> int:
    """Copies SRC's prepared sets to DST (see the module's docstring); the number of files
    copied. UsageError (exit 2) for a bad SRC or DST, CopyFailed (exit 1) when a copy fails."""
    source, target, files = check_paths(src, dst)
    created = not target.exists()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"DST={dst}: cannot create the directory ({e.strerror})") from None
    lock = _lock(target, out)
    try:
        return _stage_locked(source, target, files, threads, progress_s, out)
    except UsageError:
        lock.release()
        if created:  # refused before copying: leave no trace
            with contextlib.suppress(OSError):
                target.rmdir()
        raise
    finally:
        lock.release()


def _stage_locked(source, target, files, threads, progress_s, out) -> int:
    """The stage, holding DST's lock: what is missing or changed is copied."""
    if removed := _remove_partials(target):
        out(f"{target}: removed {removed} partial file(s) of an interrupted stage")
    manifest = _load_manifest(target, out)
    todo = [f for f in files if not _staged(f, manifest.get(f.rel), target)]
    there = len(files) - len(todo)
    there_bytes = sum(f.size for f in files) - sum(f.size for f in todo)
    if not todo:
        out(
            f"{target}: nothing to copy: all {there} files ({_size(there_bytes)}) of {source} "
            "are already staged and verified; copied 0 files"
        )
        return 0
    _check_space(target, todo)
    progress = _Progress(target, len(todo), sum(f.size for f in todo), progress_s, out)
    # The sets' dataset_info.json last: a stage cut short leaves DST unprepared to tfds.
    data = [f for f in todo if Path(f.rel).name != _INFO]
    info = [f for f in todo if Path(f.rel).name == _INFO]
    try:
        _copy_all(data, source, target, progress, manifest, threads)
        _copy_all(info, source, target, progress, manifest, threads)
    except OSError as e:  # the manifest's or a directory's
        raise CopyFailed(f"{e.filename or target}: {e.strerror or e}") from None
    _save_manifest(target, source, manifest, complete=True)
    seconds = time.monotonic() - progress.start
    out(
        f"{target}: copied {len(todo)} files, {progress.bytes} bytes ({_size(progress.bytes)})"
        f" in {seconds:.1f} s, {progress.bytes / max(seconds, 1e-9) / 1e6:.1f} MB/s; "
        f"{there} files ({_size(there_bytes)}) were already staged"
    )
    return len(todo)


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    """`python -m hpcai_jax.data.stage SRC DST [--threads=K] [--progress_s=S]`."""
    p = Parser(prog=f"python -m {PROG}", description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("src", metavar="SRC", help="a tfds data directory, or one data set's")
    p.add_argument("dst", metavar="DST", help="the node-local copy, to train with --data_dir=DST")
    p.add_argument(
        "--threads",
        type=int,
        default=min(8, _cores()),
        help="files copied at once (default: one per core this process may use, at most 8)",
    )
    p.add_argument(
        "--progress_s", type=float, default=5.0, help="seconds between rate lines (0: per file)"
    )
    try:
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
        if args.threads < 1:
            raise UsageError(f"--threads={args.threads}: expected >= 1")
        if not args.progress_s >= 0:
            raise UsageError(f"--progress_s={args.progress_s}: expected >= 0 seconds")
        stage(args.src, args.dst, args.threads, args.progress_s, lambda s: print(s, flush=True))
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
