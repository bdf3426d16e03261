"""The input pipeline's side of the check: how many training images one core of this host
prepares per second (JPEG decode with the crop chosen before decoding, resize, flip: the
engine's `augment.train_image`), and whether the host's cores keep up with the measured step.

The images are ImageNet-like JPEGs generated here (about 500 × 375, quality 90, smooth colour
with fine texture, so they compress like photographs); benchmarks/input_pipeline.py measures
the whole pipeline, worker processes included, on a tfds set of the same images.
"""

from __future__ import annotations

import io
import time

import numpy as np
from PIL import Image

from hpcai_jax.data import augment
from hpcai_jax.nodecheck.budget import Allotment
from hpcai_jax.nodecheck.rows import Row, judge, not_judged, skipped


def photo_like(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A low-frequency colour field plus fine noise: compresses like a photograph."""
    coarse = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
    smooth = np.asarray(coarse.resize((width, height), Image.Resampling.BICUBIC), np.int16)
    texture = rng.normal(0, 12, (height, width, 1))
    return np.clip(smooth + texture, 0, 255).astype(np.uint8)


def imagenet_like_jpeg(rng: np.random.Generator, index: int) -> bytes:
    """One JPEG of ImageNet's typical frame (500 × 375 ± 10 %, every fourth one portrait)."""
    long, short = (int(s * rng.uniform(0.9, 1.1)) for s in (500, 375))
    h, w = (short, long) if index % 4 else (long, short)
    buf = io.BytesIO()
    Image.fromarray(photo_like(rng, h, w)).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def cpu_seconds(transform, encoded: list[bytes], size: int, first: int = 0) -> float:
    """CPU seconds of this process for transform(data, size, i) over the images, i counting
    from `first`, each image copied as the batch's `np.stack` copies it: a transform that
    returns a view (a reversed one, for a flip) pays for that copy here, as in the pipeline."""
    start = time.process_time()
    for i, data in enumerate(encoded, first):
        transform(data, size, i).copy()
    return time.process_time() - start


def images_per_cpu_s(transform, encoded: list[bytes], size: int) -> float:
    """Images per CPU-second of transform(data, size, i) over every image (`cpu_seconds`)."""
    return len(encoded) / max(cpu_seconds(transform, encoded, size), 1e-9)


def train_transform(data: bytes, size: int, i: int) -> np.ndarray:
    return augment.train_image(data, 3, size, augment.example_rng(0, 0, 0, i))


def input_rows(
    workload: str,
    image_size: int,
    allotment: Allotment,
    step_images_per_s_per_device: float | None,
    cores: int,
    local_devices: int,
) -> list[Row]:
    """Images per core-second against what the step needs: its images/s per device × local
    devices / cores. Below 1 the host starves its devices (WARN: a bottleneck, not a fault)."""
    item = "input images per core-second"
    if workload != "image_classification":
        return [
            not_judged(item, None, "img/s", f"not judged: --workload={workload} decodes no JPEGs")
        ]
    if allotment.left_s() < 0.5:
        return [skipped(item, f"{max(0.0, allotment.left_s()):.1f} s left")]
    rng = np.random.default_rng(0)
    encoded = [imagenet_like_jpeg(rng, i) for i in range(4)]
    rate = images_per_cpu_s(train_transform, encoded, image_size)
    more = int(min(256, rate * allotment.left_s() * 0.3))
    if more > len(encoded):
        encoded += [imagenet_like_jpeg(rng, i) for i in range(len(encoded), more)]
        rate = images_per_cpu_s(train_transform, encoded, image_size)
    needed = (
        step_images_per_s_per_device * local_devices / cores
        if step_images_per_s_per_device
        else None
    )
    note = f"{len(encoded)} JPEGs to {image_size}²"
    if needed:
        note += (
            f"; a device at the measured step rate needs {step_images_per_s_per_device / rate:.2f} "
            f"cores, the host has {cores / local_devices:.2f} per device"
        )
    return [
        judge(
            item,
            rate,
            needed,
            unit="img/s",
            source="step images/s per device x devices / cores" if needed else "",
            pass_at=1.0,
            warn_at=0.0,
            note=note if needed else note + "; no step rate to compare with",
        )
    ]
