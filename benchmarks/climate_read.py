"""Random reads of climate examples: the authors' gzip HDF5 years vs the converter's memmap.

Builds a small raw data set of the real layout in a temporary directory (full-resolution
768 × 1152 × 16 float32 fields from the synthetic generator, written back in CAM5 units with
float32 rounding noise in every mantissa, as model output has, so that gzip does not find the
float16 zeros; gzip level 4 and h5py's default chunking, as `create_dataset(...,
compression="gzip")` writes), converts it at each height, and reads the same random batches
(with repeats, like a bootstrap sample) from both, taking turns batch by batch so that a
shared machine's load hits both alike. Both are read from the page cache (the files were just
written): the raw figure is HDF5 decompression plus transposing and downscaling, the converted
one a memmap copy.

    python benchmarks/climate_read.py [--samples=16] [--heights=768,192] [--batch=4] [--reads=12]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from hpcai_jax.data import climate, extremeweather, synthetic_climate


def _write_year(path: Path, start: int, n: int, seed: int) -> tuple[tuple[int, ...], float]:
    """A raw year of n full-resolution examples; returns (HDF5 chunk shape, seconds writing)."""
    rng = np.random.default_rng(seed)
    h, w = climate.FULL_SHAPE
    seconds = 0.0
    with h5py.File(path, "w") as f:
        images = f.create_dataset(
            "images", (n, climate.NUM_CHANNELS, h, w), np.float32, compression="gzip"
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=16, help="full-resolution training examples")
    p.add_argument("--heights", default="768,192", help="converted heights to compare")
    p.add_argument("--batch", type=int, default=4, help="examples per random read")
    p.add_argument("--reads", type=int, default=12, help="timed reads per contender and height")
    p.add_argument("--dir", help="work directory (default: a temporary one, removed)")
    args = p.parse_args()
    heights = [int(h) for h in args.heights.split(",")]
    with tempfile.TemporaryDirectory(dir=args.dir) as work:
        root = Path(work)
        (root / "train").mkdir()
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
        rng = np.random.default_rng(0)
        summary = {}
        for height in heights:
            t = time.perf_counter()
            out = extremeweather.convert(root, root, height, chunk_size=4)
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
        print(json.dumps(summary))


if __name__ == "__main__":
    main()
