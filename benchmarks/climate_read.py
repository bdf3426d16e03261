"""Random reads of climate examples: the authors' gzip HDF5 years vs the converter's memmap.

Builds a small raw data set of the real layout here, converts it, reads the same random batches
from both in turns, then times the training read through the worker pipeline, and ends with the
cores one GPU needs to be fed. What it builds and times, and the figures: `docs/detection.md`,
Measured.

    python benchmarks/climate_read.py [--samples=16] [--heights=768,192] [--batch=4] [--reads=12]
        [--workers=1,2] [--steps=6] [--step_s=1.0] [--gpu_batch=2]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np
from h5py._hl.filters import guess_chunk

from hpcai_jax.data import climate, climate_convert, extremeweather, synthetic_climate
from hpcai_jax.data.climate_train import ClimateTrainReader
from hpcai_jax.data.sampler import BootstrapSampler
from hpcai_jax.data.workers import BlockStream, ReadBlock


def _cpu_s() -> float:
    """CPU seconds used so far by this process and its children that have been waited for
    (the workers, once the stream is closed)."""
    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _measure_stream(source, batch: int, steps: int, workers: int) -> tuple[float, float]:
    """(samples/s, samples per CPU-second) of training steps of one member's block through the
    worker pipeline (flips on). samples/s: `steps` steps after the first (start-up) is out;
    per CPU-second: every step, over all CPU time of this process and its workers from before
    they start until they have been joined (getrusage of the waited-for children: a worker that
    finished its share early still counts; start-up included: a lower bound per core)."""
    sampler = BootstrapSampler("with_replacement", len(source), batch, seed=0)
    reader = ClimateTrainReader(source, flip=True)
    block = ((0, 1), (0, batch))
    stream = BlockStream(ReadBlock(reader, sampler, (block,)), steps + 1, workers)
    cpu = _cpu_s()
    try:
        stream.step(0)
        start = time.perf_counter()
        for step in range(1, steps + 1):
            stream.step(step)
        rate = steps * batch / (time.perf_counter() - start)
    finally:
        stream.close()
    return rate, (steps + 1) * batch / (_cpu_s() - cpu)


def year_chunks(n: int) -> tuple[int, ...]:
    """h5py's automatic chunking of a whole year, (1460, 16, 768, 1152) float32: (46, 1, 48,
    72), 46 samples per chunk (the first axis cut to n for a shorter file)."""
    chunks = guess_chunk((1460, climate.NUM_CHANNELS, *climate.FULL_SHAPE), None, 4)
    return (min(n, chunks[0]), *chunks[1:])


def _write_year(path: Path, start: int, n: int, seed: int) -> tuple[tuple[int, ...], float]:
    """A raw year of n full-resolution examples, chunked as h5py chunks a whole year; returns
    (HDF5 chunk shape, seconds writing)."""
    rng = np.random.default_rng(seed)
    h, w = climate.FULL_SHAPE
    seconds = 0.0
    with h5py.File(path, "w") as f:
        images = f.create_dataset(
            "images",
            (n, climate.NUM_CHANNELS, h, w),
            np.float32,
            chunks=year_chunks(n),
            compression="gzip",
        )
        raw_boxes = np.full((n, climate.MAX_BOXES, 5), -1, np.int32)
        for i in range(n):
            example = synthetic_climate.generate(start + i, 1, h, seed)
            fields = example["image"][0].astype(np.float32) / climate.STORAGE_SCALE
            fields *= 1 + rng.standard_normal(fields.shape, np.float32) * np.float32(1e-4)
            t = time.perf_counter()
            images[i] = fields.transpose(2, 0, 1)
            seconds += time.perf_counter() - t
            valid = example["classes"][0] >= 0
            raw_boxes[i, valid, :4] = example["boxes"][0][valid].round()
            raw_boxes[i, valid, 4] = example["classes"][0][valid]
        f.create_dataset("boxes", data=raw_boxes)
        return images.chunks, seconds


def _quiet(line: str) -> None:
    del line


def _one_sample_copy(root: Path, copy: Path) -> None:
    """The raw years of root again, each in one-sample chunks (1, 16, 768, 1152)."""
    for split in ("train", "test"):
        (copy / split).mkdir(parents=True)
        for path in (root / split).glob("climo_*.h5"):
            with h5py.File(path) as f, h5py.File(copy / split / path.name, "w") as g:
                images = f["images"]
                g.create_dataset(
                    "images", data=images[...], chunks=(1, *images.shape[1:]), compression="gzip"
                )
                g.create_dataset("boxes", data=f["boxes"][...])


def _measure_converter(root: Path, height: int, worker_counts, samples: int) -> dict:
    """The converter on the year-chunked files and on one-sample-chunk copies, with each worker
    count (samples/s, both splits); outputs compared byte for byte; then a conversion
    interrupted half-way, resumed, and a finished one skipped."""
    one = root.parent / f"{root.name}_one_sample_chunks"
    _one_sample_copy(root, one)
    print(f"\nconverter at height {height} ({samples + 2} samples, both splits):")
    figures, outputs = {}, []
    for name, raw in (("year chunks", root), ("one-sample chunks", one)):
        for workers in worker_counts:
            out_dir = root.parent / f"conv_{len(outputs)}"
            t = time.perf_counter()
            outputs.append(climate_convert.convert(raw, out_dir, height, workers, log=_quiet))
            rate = (samples + 2) / (time.perf_counter() - t)
            figures[f"{name}, {workers} workers"] = rate
            print(f"{name:<18} {workers} workers: {rate:6.2f} samples/s")
    first = (outputs[0] / "train" / "images.npy").read_bytes()
    same = all((o / "train" / "images.npy").read_bytes() == first for o in outputs[1:])
    print(f"outputs byte-identical: {same}")
    assert same
    convert_unit, calls = climate_convert.convert_unit, []

    def interrupted(unit, *args):
        if len(calls) >= max(1, (samples + 2) // 2 // climate_convert.UNIT_SAMPLES):
            raise KeyboardInterrupt
        calls.append(unit)
        return convert_unit(unit, *args)

    out_dir = root.parent / "conv_resumed"
    climate_convert.convert_unit = interrupted
    try:
        climate_convert.convert(one, out_dir, height, 1, log=_quiet)
    except KeyboardInterrupt:
        print(f"interrupted after {len(calls)} units")
    finally:
        climate_convert.convert_unit = convert_unit
    for what in ("resumed", "finished, skipped"):
        t = time.perf_counter()
        lines = []
        climate_convert.convert(one, out_dir, height, 1, log=lines.append)
        seconds = time.perf_counter() - t
        said = [line for line in lines if "resuming" in line or "already" in line]
        print(f"{what}: {seconds:.2f} s; {said[0]}")
        figures[f"{what}_s"] = seconds
    assert (out_dir / f"converted_{height}" / "train" / "images.npy").read_bytes() == first
    shutil.rmtree(one)
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=16, help="full-resolution training examples")
    p.add_argument("--heights", default="768,192", help="converted heights to compare")
    p.add_argument("--batch", type=int, default=4, help="examples per random read")
    p.add_argument("--reads", type=int, default=12, help="timed reads per contender and height")
    p.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    p.add_argument("--workers", default="1,2", help="worker counts of the training read")
    p.add_argument("--steps", type=int, default=6, help="timed steps per worker count")
    p.add_argument("--step_s", type=float, default=1.0, help="one GPU's training step, seconds")
    p.add_argument("--gpu_batch", type=int, default=2, help="samples per GPU per step")
    args = p.parse_args()
    worker_counts = [int(w) for w in args.workers.split(",")]
    heights = [int(h) for h in args.heights.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        root = Path(work) / "raw"
        (root / "train").mkdir(parents=True)
        (root / "test").mkdir()
        t = time.perf_counter()
        chunks, write_s = _write_year(root / "train" / "climo_1979.h5", 0, args.samples, 0)
        _write_year(root / "test" / "climo_1984.h5", 1 << 20, 2, 1)
        raw_bytes = (root / "train" / "climo_1979.h5").stat().st_size
        full_bytes = args.samples * climate.NUM_CHANNELS * np.prod(climate.FULL_SHAPE) * 4
        print(
            f"raw year: {args.samples} examples, {raw_bytes / 1e6:.0f} MB gzip "
            f"({full_bytes / raw_bytes:.2f}x), HDF5 chunks {chunks}; built in "
            f"{time.perf_counter() - t:.1f} s ({full_bytes / 1e6 / write_s:.0f} MB/s compressing)"
        )
        summary = {"converter": _measure_converter(root, heights[-1], worker_counts, args.samples)}
        rng = np.random.default_rng(0)
        for height in heights:
            t = time.perf_counter()
            out = climate_convert.convert(root, root / "out", height, log=_quiet)
            convert_s = time.perf_counter() - t
            stats = ((0.0,) * 16, (1.0,) * 16)
            raw = extremeweather.RawClimateSource(
                extremeweather.raw_files(root, "train"), height, stats=stats
            )
            converted = extremeweather.ConvertedClimateSource(out / "train")
            batches = [rng.integers(0, args.samples, args.batch) for _ in range(args.reads + 1)]
            times = {"raw": [], "converted": []}
            for i, rows in enumerate(batches):
                order = ("raw", "converted") if i % 2 else ("converted", "raw")
                for name in order:
                    source = raw if name == "raw" else converted
                    t = time.perf_counter()
                    source.read(rows)
                    if i:  # the first batch warms up
                        times[name].append(time.perf_counter() - t)
            assert all(
                np.array_equal(raw.read(rows)[k], converted.read(rows)[k])
                for k in ("image", "boxes", "classes")
            )
            example_mb = np.prod(raw.spec.image_shape) * 2 / 1e6
            print(
                f"\nheight {height}: converted {args.samples + 2} examples in {convert_s:.1f} s "
                f"({example_mb:.1f} MB per float16 example)"
            )
            print(f"{'source':<10} {'samples/s':>10} {'MB/s':>8}   (median of {args.reads} reads)")
            rates = {}
            for name, seconds in times.items():
                rates[name] = args.batch / statistics.median(seconds)
                print(f"{name:<10} {rates[name]:>10.1f} {rates[name] * example_mb:>8.0f}")
            ratio = rates["converted"] / rates["raw"]
            print(f"ratio converted/raw: {ratio:.1f}")
            summary[height] = {
                "raw_samples_s": rates["raw"],
                "converted_samples_s": rates["converted"],
                "ratio": ratio,
            }
            print(
                f"\ntraining read (worker pipeline, flips on), {args.steps} steps of "
                f"{args.batch} after start-up:"
            )
            print(f"{'source':<10} {'workers':>7} {'samples/s':>10} {'per CPU-s':>10}")
            for name, source in (("raw", raw), ("converted", converted)):
                for workers in worker_counts:
                    rate, per_cpu = _measure_stream(source, args.batch, args.steps, workers)
                    print(f"{name:<10} {workers:>7} {rate:>10.1f} {per_cpu:>10.1f}")
                    summary[height][f"{name}_{workers}w_samples_s"] = rate
                    summary[height][f"{name}_{workers}w_per_cpu_s"] = per_cpu
        need = args.gpu_batch / args.step_s
        print(
            f"\none GPU at {args.gpu_batch} samples per {args.step_s:g} s step needs "
            f"{need:.1f} samples/s:"
        )
        for height, figures in summary.items():
            if height == "converter":
                continue
            for name in ("raw", "converted"):
                per_core = max(figures[f"{name}_{w}w_per_cpu_s"] for w in worker_counts)
                cores = need / per_core
                figures[f"{name}_cores_per_gpu"] = cores
                print(
                    f"height {height}, {name:<9}: {per_core:7.1f} samples per CPU-second → "
                    f"{cores:6.2f} cores per GPU"
                )
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
