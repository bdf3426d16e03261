"""The ExtremeWeather converter for real years (≈ 62 GB each): raw HDF5 years → the memory-mapped
layout of `extremeweather.ConvertedClimateSource`, in parallel, chunk-aligned and resumable.

Random reads from the gzip years decompress whole HDF5 chunks, far too slowly to feed an
accelerator, so real years are converted once. How the converter reads, splits the work, resumes
and stores (float16 in `climate.UNITS`), and what it was measured to do: `docs/detection.md`,
Data and Measured.
"""

from __future__ import annotations

import dataclasses
import json
import math
import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from hpcai_jax.data.climate import (
    CHANNELS,
    FULL_SHAPE,
    NUM_CHANNELS,
    STORAGE_SCALE,
    UNITS,
    box_fields,
    channel_stats,
    check_image_size,
    downscale_planes,
    scale_boxes,
)
from hpcai_jax.data.extremeweather import (
    _HOW_TO_GET,
    SPLITS,
    _check_stats,
    _open_year,
    converted_dir,
    raw_files,
    refuse_sample,
)
from hpcai_jax.errors import Parser, UsageError

UNIT_SAMPLES = 4  # samples per unit when a chunk holds fewer (one-sample chunks: 4 at a time)
SLAB_BYTES = 256 << 20  # float32 bytes a worker holds from the file at once (a slab of chunks)
_DONE_LOG = "done_units.txt"
_PLAN = "plan.json"


@dataclasses.dataclass(frozen=True)
class Unit:
    """Samples [start, stop) of one file, written to rows [row, row + stop - start) of the
    split's images; each read is `rows_per_slab` rows (a multiple of the chunk rows and of the
    downscaling factor) of `channels_per_slab` channels."""

    split: str
    path: str
    start: int
    stop: int
    row: int
    channels_per_slab: int
    rows_per_slab: int


@dataclasses.dataclass(frozen=True)
class FileLayout:
    path: Path
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...] | None
    compression: str | None

    def describe(self) -> str:
        chunks = "contiguous" if self.chunks is None else f"chunks {list(self.chunks)}"
        per_chunk = self.chunks[0] if self.chunks else 1
        return (
            f"{self.path}: images {self.dtype} {list(self.shape)}, {chunks} "
            f"({per_chunk} sample{'s' * (per_chunk != 1)} per chunk), "
            f"compression {self.compression or 'none'}"
        )


def plan_units(layout: FileLayout, split: str, first_row: int, factor: int) -> list[Unit]:
    """A file's units: whole chunks along the samples (UNIT_SAMPLES or one chunk's samples,
    whichever is more), read in slabs of whole chunks along channels and rows within
    SLAB_BYTES where the chunking allows."""
    n, channels, height, width = layout.shape
    c0, c1, c2, _ = layout.chunks or (1, channels, height, width)
    per_unit = c0 * max(1, math.ceil(UNIT_SAMPLES / c0))
    row_step = c2 * factor // math.gcd(c2, factor)  # whole chunks, whole output rows
    units = []
    for start in range(0, n, per_unit):
        stop = min(n, start + per_unit)
        row_bytes = (stop - start) * c1 * width * 4
        rows = max(row_step, SLAB_BYTES // row_bytes // row_step * row_step)
        units.append(
            Unit(split, str(layout.path), start, stop, first_row + start, c1, min(rows, height))
        )
    return units


def convert_unit(unit: Unit, directory: str, factor: int) -> int:
    """Reads, downscales and writes one unit into DIRECTORY/<split>/images.npy; returns its
    sample count. Runs in a worker process: opens its own file handles."""
    import h5py

    out = np.load(Path(directory) / unit.split / "images.npy", mmap_mode="r+")
    n = unit.stop - unit.start
    with h5py.File(unit.path, "r") as f:
        images = f["images"]
        channels, height = images.shape[1], images.shape[2]
        for c0 in range(0, channels, unit.channels_per_slab):
            c1 = min(channels, c0 + unit.channels_per_slab)
            for r0 in range(0, height, unit.rows_per_slab):
                r1 = min(height, r0 + unit.rows_per_slab)
                raw = images[unit.start : unit.stop, c0:c1, r0:r1, :]  # whole chunks
                small = downscale_planes(raw, factor)  # [n, c, rows/f, w/f]
                with np.errstate(over="ignore"):  # an overflow is inf, refused below
                    scaled = small * STORAGE_SCALE[c0:c1, None, None]
                    slab = scaled.astype(np.float16).transpose(0, 2, 3, 1)
                _check_slab(Path(unit.path), unit.start, c0, raw, slab)
                rows = slice(unit.row, unit.row + n)
                out[rows, r0 // factor : r1 // factor, :, c0:c1] = slab
    out.flush()
    return n


def _check_slab(path: Path, first: int, c0: int, raw: np.ndarray, slab: np.ndarray) -> None:
    """The reader's finite check on a slab of channels c0.. (raw [n, c, r, W], slab
    [n, r/f, W/f, c]): the message names the file's sample and the dataset's channel."""
    if np.isfinite(slab).all():
        return
    k, _, _, c = (int(i[0]) for i in np.nonzero(~np.isfinite(slab)))
    refuse_sample(path, first + k, c0 + c, raw[k, c])


def _layouts(paths: list[Path], grid: tuple[int, int]) -> tuple[list[FileLayout], list]:
    """Each file's layout (checked as the reader checks it) and its raw box rows."""
    import h5py

    layouts, boxes = [], []
    for path in paths:
        f, images, raw_boxes = _open_year(h5py, path, grid)
        with f:
            layouts.append(
                FileLayout(
                    path, tuple(images.shape), str(images.dtype), images.chunks, images.compression
                )
            )
            boxes.append(raw_boxes)
    return layouts, boxes


def _fingerprint(paths: dict[str, list[Path]], height: int, grid) -> dict:
    """What a partial conversion was started from: resumable only if this is unchanged."""
    files = {
        split: [[str(p), p.stat().st_size, p.stat().st_mtime_ns] for p in ps]
        for split, ps in paths.items()
    }
    return {"height": height, "grid": list(grid), "files": files}


def _start(partial: Path, fingerprint: dict, log: Callable[[str], None]) -> set[int]:
    """The finished units of a partial conversion of the same files (its directory created or
    emptied otherwise)."""
    plan = partial / _PLAN
    if partial.exists():
        try:
            same = json.loads(plan.read_text()) == fingerprint
        except (OSError, ValueError):
            same = False
        if same:
            done_log = partial / _DONE_LOG
            done = (
                {int(line) for line in done_log.read_text().split()} if done_log.exists() else set()
            )
            log(f"resuming {partial}: {len(done)} units done before")
            return done
        log(f"{partial}: made from other raw files or settings; starting over")
        shutil.rmtree(partial)
    partial.mkdir(parents=True)
    plan.write_text(json.dumps(fingerprint, indent=1) + "\n")
    return set()


def _prepare_split(directory: Path, n: int, image_shape, boxes, classes) -> None:
    """The split's images.npy (allocated once, filled by the units), boxes and classes."""
    directory.mkdir(exist_ok=True)
    images = directory / "images.npy"
    if not images.exists():
        tmp = directory / "images.npy.new"
        np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(n, *image_shape))
        os.rename(tmp, images)
    np.save(directory / "boxes.npy", boxes)
    np.save(directory / "classes.npy", classes)


def _run_units(units, todo, directory, factor, workers, on_done) -> None:
    """Converts units `todo` (indices), in `workers` processes (1: here), calling on_done(i, n)
    in this process as each finishes."""
    if workers <= 1:
        for i in todo:
            on_done(i, convert_unit(units[i], str(directory), factor))
        return
    context = multiprocessing.get_context("spawn")  # no forked copies of a JAX process
    with context.Pool(workers) as pool:
        jobs = [(i, (units[i], str(directory), factor)) for i in todo]
        results = pool.imap_unordered(_indexed, jobs)
        for i, n in results:
            on_done(i, n)


def _indexed(job):
    i, args = job
    return i, convert_unit(*args)


def convert(
    raw_dir: str | Path,
    out_dir: str | Path,
    height: int,
    workers: int = 1,
    grid: tuple[int, int] = FULL_SHAPE,
    log: Callable[[str], None] = print,
) -> Path:
    """Converts raw_dir/{train,test}/climo_*.h5 into out_dir/converted_<height>/ (module doc)
    with `workers` processes; returns the directory. Already converted: returns it at once.

    The mean and std in both splits' stats.json are the training split's, over every training
    pixel of the converted (downscaled, float16) images.
    """
    factor = check_image_size(height, grid)
    raw_dir, out_dir = Path(raw_dir), Path(out_dir)
    if workers < 1:
        raise UsageError(f"--workers={workers}: expected >= 1")
    if not raw_dir.is_dir():
        raise UsageError(f"--raw_dir={raw_dir}: directory not found; {_HOW_TO_GET}")
    final = converted_dir(out_dir, height)
    if all((final / split / "stats.json").is_file() for split in SPLITS):
        log(f"{final}: already converted; delete it to convert again")
        return final
    if final.exists():
        raise UsageError(f"--out_dir={out_dir}: {final.name} exists but is incomplete; delete it")
    paths = {split: raw_files(raw_dir, split) for split in SPLITS}
    image_shape = (height, grid[1] // factor, NUM_CHANNELS)
    units, splits = _plan(paths, grid, factor, log)
    partial = out_dir / f".{final.name}.partial"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        done = _start(partial, _fingerprint(paths, height, grid), log)
        for split, (n, boxes, classes) in splits.items():
            _prepare_split(partial / split, n, image_shape, boxes, classes)
    except OSError as e:
        raise UsageError(f"--out_dir={out_dir}: cannot write there ({e})") from None
    _convert_units(units, done, partial, factor, workers, log)
    _write_stats(partial, raw_dir, image_shape, {s: (splits[s][0], paths[s]) for s in SPLITS})
    for name in (_PLAN, _DONE_LOG):
        (partial / name).unlink()
    os.rename(partial, final)
    return final


def _write_stats(partial: Path, raw_dir: Path, image_shape, splits: dict) -> None:
    """Each split's stats.json, its examples and sources (`splits`: split → (examples, raw
    files)) with the training split's mean and std, which both splits normalise with."""
    mean, std = channel_stats(np.load(partial / "train" / "images.npy", mmap_mode="r"))
    _check_stats(f"--raw_dir={raw_dir}: training statistics", mean, std)
    for split, (examples, paths) in splits.items():
        meta = {
            "height": image_shape[0],
            "width": image_shape[1],
            "channels": list(CHANNELS),
            "units": list(UNITS),
            "mean": list(mean),
            "std": list(std),
            "stats_from": "train",
            "examples": examples,
            "sources": [{"file": str(p), "bytes": p.stat().st_size} for p in paths],
        }
        (partial / split / "stats.json").write_text(json.dumps(meta, indent=1) + "\n")


def _plan(paths: dict[str, list[Path]], grid, factor: int, log: Callable[[str], None]):
    """Every split's files read for their layouts and boxes: (the units of all splits in order,
    each split's (samples, boxes at the output size, classes))."""
    units, splits = [], {}
    for split in SPLITS:
        layouts, raw_boxes = _layouts(paths[split], grid)
        for layout in layouts:
            log(layout.describe())
        boxes, classes = box_fields(np.concatenate(raw_boxes))
        first = np.cumsum([0] + [layout.shape[0] for layout in layouts])
        for layout, row in zip(layouts, first[:-1], strict=True):
            units += plan_units(layout, split, int(row), factor)
        splits[split] = (int(first[-1]), scale_boxes(boxes, factor), classes)
    return units, splits


def _convert_units(units: list[Unit], done: set[int], partial: Path, factor, workers, log) -> None:
    """Converts the units not `done` yet, logging each one to the done log as it finishes (what
    a resumed conversion skips) and the progress with its rate and ETA."""
    todo = [i for i in range(len(units)) if i not in done]
    total = sum(u.stop - u.start for u in units)
    progress = {"samples": sum(units[i].stop - units[i].start for i in done), "new": 0}
    start = time.perf_counter()
    with open(partial / _DONE_LOG, "a") as done_log:

        def on_done(i: int, n: int) -> None:
            done_log.write(f"{i}\n")
            done_log.flush()
            os.fsync(done_log.fileno())
            progress["samples"] += n
            progress["new"] += n
            rate = progress["new"] / (time.perf_counter() - start)
            eta = (total - progress["samples"]) / rate
            log(
                f"{progress['samples']}/{total} samples ({units[i].split}), "
                f"{rate:.2f} samples/s, ETA {eta:.0f} s"
            )

        _run_units(units, todo, partial, factor, workers, on_done)


PROG = "hpcai_jax.data.climate_convert"


def main(argv: list[str] | None = None) -> int:
    """`python -m hpcai_jax.data.climate_convert --raw_dir=D --image_size=192 [--out_dir=O]
    [--workers=K]`."""
    p = Parser(prog=f"python -m {PROG}", description=" ".join(__doc__.split("\n\n")[0].split()))
    p.add_argument("--raw_dir", required=True, help="directory with train/ and test/ climo_*.h5")
    p.add_argument(
        "--out_dir",
        help="where converted_<H>/ goes, to be trained on with --data_dir=OUT_DIR (default: "
        "RAW_DIR_converted beside --raw_dir; ≈ 41 GB per year at --image_size=768)",
    )
    p.add_argument("--image_size", type=int, default=192, help="image height, a divisor of 768")
    p.add_argument("--workers", type=int, default=1, help="converting processes")
    try:
        args = p.parse_args(sys.argv[1:] if argv is None else argv)
        raw_dir = Path(args.raw_dir)
        out_dir = args.out_dir or raw_dir.absolute().parent / f"{raw_dir.absolute().name}_converted"
        out = convert(raw_dir, out_dir, args.image_size, args.workers)
    except UsageError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return e.exit_code
    print(f"converted: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
