"""The input pipeline for JPEG sets: the crop-before-decode transforms against the full-decode
ones, and the thread-pool path against the worker path.

Builds ImageNet-like JPEGs here and times each transform, then whole training reads, in
interleaved rounds so that machine noise hits every path alike; it ends with the cores a device
needs at each --target_images_per_s. What it times and how, and the figures: `docs/input.md`,
What was measured.

    python benchmarks/input_pipeline.py [--images=256] [--workers=0,2] [--rounds=3]
        [--steps=8] [--batch_size=64] [--image_size=224] [--target_images_per_s=3000,6000]
        [--data_dir=DIR]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import statistics
import tempfile
import time

import numpy as np
import tensorflow_datasets as tfds

from hpcai_jax.data import augment, jpeg_region
from hpcai_jax.data.sampler import BootstrapSampler
from hpcai_jax.data.tfds_source import TfdsSource
from hpcai_jax.data.workers import BlockStream, ReadBlock, augment_keys
from hpcai_jax.nodecheck.inputs import cpu_seconds, imagenet_like_jpeg


class JpegBench(tfds.core.GeneratorBasedBuilder):
    """ImageNet-like JPEGs, generated here: nothing is downloaded."""

    VERSION = tfds.core.Version("1.0.0")
    images = 512  # set from --images before building

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.FeaturesDict(
                {
                    "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
                    "label": tfds.features.ClassLabel(num_classes=10),
                }
            ),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(self.images)}

    def _generate_examples(self, n):
        rng = np.random.default_rng(0)
        for i in range(n):
            yield i, {"image": imagenet_like_jpeg(rng, i), "label": i % 10}


def _cpu_by_pid() -> dict[int, float]:
    """CPU seconds used so far by this process and by each of its live children (the
    workers), by pid."""
    out = {}
    for pid in [os.getpid(), *(p.pid for p in multiprocessing.active_children())]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # ended since it was listed
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime+stime
    return out


def _cpu_since(before: dict[int, float]) -> float:
    """CPU seconds since `before` of this process and of the children alive now. A child
    alive then and gone since (an earlier stream's worker, still exiting) drops out; a total
    of then against now would subtract its whole life."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in _cpu_by_pid().items())


def _measure(reader, sampler, batch_size: int, steps: int, workers: int) -> tuple[float, float]:
    """(images/s, images per CPU-second) over `steps` steps, after the first. The stream runs
    `steps` more after the window: the workers enter it with their buffers full (work done
    before it) and must leave it busy filling them again, or the window would count images
    whose CPU it never saw (2 workers had read 1,089 images per CPU-second, more than one
    transform alone yields)."""
    block = ((0, 1), (0, batch_size))
    stream = BlockStream(ReadBlock(reader, sampler, (block,)), 2 * steps + 1, workers)
    try:
        stream.step(0)  # workers started, first step out: not timed
        start, cpu = time.perf_counter(), _cpu_by_pid()
        for step in range(1, steps + 1):
            stream.step(step)
        images = steps * batch_size
        return images / (time.perf_counter() - start), images / _cpu_since(cpu)
    finally:
        stream.close()


def _measure_threads(reader, sampler, batch_size: int, steps: int) -> tuple[float, float]:
    """(images/s, images per CPU-second) with one thread per core decoding in this process."""
    block = ((0, 1), (0, batch_size))
    threads = len(os.sched_getaffinity(0))
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:

        def step_images(step):
            indices = sampler.step_indices(0, step)
            keys = augment_keys(sampler, step, block)[0]  # [rows, 4]: member 0
            rows = pool.map(
                lambda i: reader(indices[i : i + 1], keys[i : i + 1]), range(len(indices))
            )
            return np.concatenate([r["image"] for r in rows])

        step_images(0)  # the pool's threads and the files opened: not timed
        start, cpu = time.perf_counter(), _cpu_by_pid()
        for step in range(1, steps + 1):
            step_images(step)
    images = steps * batch_size
    return images / (time.perf_counter() - start), images / _cpu_since(cpu)


def _without_libjpeg_turbo(transform):
    """`transform` as it runs where libjpeg-turbo 3 is missing: PIL decodes."""

    def run(data, size, i):
        decoder, jpeg_region.decoder = jpeg_region.decoder, lambda: None
        try:
            return transform(data, size, i)
        finally:
            jpeg_region.decoder = decoder

    return run


def _train(data, size, i):
    return augment.train_image(data, 3, size, augment.example_rng(0, 0, 0, i))


def _eval(data, size, i):
    return augment.eval_encoded(data, 3, size)


_CHUNK = 16  # images a transform decodes before the next takes its turn
TRAIN_OLD, TRAIN_NEW = "training, full decode (previous)", "training, region decode"
EVAL_OLD, EVAL_NEW = "eval, full decode (previous)", "eval, region decode"
TRANSFORMS = {
    TRAIN_OLD: lambda data, size, i: augment.train_image_reference(
        augment.decode(data, 3), size, augment.example_rng(0, 0, 0, i)
    ),
    TRAIN_NEW: _train,
    "training, PIL (no libjpeg-turbo 3)": _without_libjpeg_turbo(_train),
    EVAL_OLD: lambda data, size, i: augment.eval_image(augment.decode(data, 3), size),
    EVAL_NEW: _eval,
    "eval, PIL (no libjpeg-turbo 3)": _without_libjpeg_turbo(_eval),
}


def _interleaved(transforms: dict, encoded: list[bytes], size: int) -> dict[str, float]:
    """Images per CPU-second of each transform over every image, the transforms taking turns
    every `_CHUNK` images: whatever else the machine does in the round (it varies by ±20 % over
    seconds on a shared one) falls on all of them alike; each output copied (`cpu_seconds`)."""
    cpu = dict.fromkeys(transforms, 0.0)
    for start in range(0, len(encoded), _CHUNK):
        chunk = encoded[start : start + _CHUNK]
        for name, transform in transforms.items():
            cpu[name] += cpu_seconds(transform, chunk, size, first=start)
    return {name: len(encoded) / max(seconds, 1e-9) for name, seconds in cpu.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--workers", default="0,2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument(
        "--target_images_per_s",
        default="3000,6000",
        help="training rates of one device: the cores each needs are reported",
    )
    parser.add_argument(
        "--data_dir", default="", help="keep the set here, and reuse one built there before"
    )
    args = parser.parse_args()
    JpegBench.images = args.images
    lib = jpeg_region.library()
    print(f"libjpeg-turbo 3: {lib._name if lib is not None else 'missing: PIL decodes'}")
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = args.data_dir or tmp
        builder = JpegBench(data_dir=data_dir, file_format="array_record")
        start = time.perf_counter()
        builder.download_and_prepare()
        print(f"set: {args.images} JPEGs in {data_dir} ({time.perf_counter() - start:.1f} s)")
        source = TfdsSource("jpeg_bench", "train", data_dir, args.image_size)
        sampler = BootstrapSampler("with_replacement", len(source), args.batch_size, seed=0)
        reader = source.train_reader()
        raw = tfds.data_source(
            "jpeg_bench",
            split="train",
            data_dir=data_dir,
            decoders={"image": tfds.decode.SkipDecoding()},
        )
        encoded = [raw[i]["image"] for i in range(len(raw))]
        per_transform: dict[str, list[float]] = {t: [] for t in TRANSFORMS}
        cores = len(os.sched_getaffinity(0))
        paths = {f"thread pool ({cores} threads)": None}
        paths.update({f"{w} workers": w for w in (int(w) for w in args.workers.split(","))})
        rates: dict[str, list[tuple[float, float]]] = {p: [] for p in paths}
        for round_ in range(args.rounds):
            for name, rate in _interleaved(TRANSFORMS, encoded, args.image_size).items():
                per_transform[name].append(rate)
                print(f"round {round_}: {name:36} {rate:6.1f} per CPU-second", flush=True)
            for path, workers in paths.items():
                if workers is None:
                    rate, per_cpu = _measure_threads(reader, sampler, args.batch_size, args.steps)
                else:
                    rate, per_cpu = _measure(reader, sampler, args.batch_size, args.steps, workers)
                rates[path].append((rate, per_cpu))
                print(
                    f"round {round_}: {path:22} {rate:7.1f} images/s, "
                    f"{per_cpu:6.1f} per CPU-second",
                    flush=True,
                )
    wall = {p: statistics.median(r for r, _ in rs) for p, rs in rates.items()}
    per_cpu = {p: statistics.median(c for _, c in rs) for p, rs in rates.items()}
    base = next(iter(paths))
    print(f"\n{cores} cores; decode + random-resized crop + flip to {args.image_size}² (medians)")
    for path in paths:
        print(
            f"{path:22} {wall[path]:7.1f} images/s ({wall[path] / wall[base]:.2f}× thread pool), "
            f"{per_cpu[path]:6.1f} images per CPU-second"
        )
    best = max(per_cpu.values())
    transform = {t: statistics.median(r) for t, r in per_transform.items()}
    print(f"\none transform in this process (medians of {args.rounds} rounds):")
    for name, rate in transform.items():
        print(f"{name:36} {rate:6.1f} images per CPU-second")
    old, new = transform[TRAIN_OLD], transform[TRAIN_NEW]
    for target in (int(t) for t in args.target_images_per_s.split(",")):
        print(
            f"a device training at {target:,} images/s needs ≈ {target / best:.1f} cores through "
            f"the pipeline ({best:.0f} images per CPU-second), ≈ {target / new:.1f} for the "
            f"transform alone (previous path: {target / old:.1f})"
        )
    # Each ratio is the median of the rounds' ratios: a round's two paths ran back to back.
    for label, previous, name in (("eval", EVAL_OLD, EVAL_NEW), ("training", TRAIN_OLD, TRAIN_NEW)):
        ratio = statistics.median(
            n / o for n, o in zip(per_transform[name], per_transform[previous], strict=True)
        )
        print(
            f"{label} path: {transform[name]:.0f} images per CPU-second, "
            f"{ratio:.2f}× the previous path"
        )


if __name__ == "__main__":
    main()
