"""What every climate data set shares: the ExtremeWeather grid, channels, classes and spec.

ExtremeWeather (Racah et al., NeurIPS 2017) is 16 channels of CAM5 output on a 768 (latitude, y)
× 1152 (longitude, x) grid, 4 fields a day, with up to 15 labelled boxes per field. Images travel
as float16 [H, W, 16], channels last, in physical units, and are normalised on the device with
the spec's per-channel mean and std. Two channels do not fit float16 in their CAM5 units
(pressures in Pa overflow at 65504; precipitation in m/s, ~1e-8, underflows), so images are
stored in the units of `UNITS`: raw values times `STORAGE_SCALE` (hPa and mm/day).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from hpcai_jax.data.source import Fields
from hpcai_jax.errors import UsageError

CHANNELS = (
    "PRECT", "PS", "PSL", "QREFHT", "T200", "T500", "TMQ", "TREFHT",
    "TS", "U850", "UBOT", "V850", "VBOT", "Z1000", "Z200", "ZBOT",
)  # fmt: skip
UNITS = (
    "mm/day", "hPa", "hPa", "kg/kg", "K", "K", "kg/m2", "K",
    "K", "m/s", "m/s", "m/s", "m/s", "m", "m", "m",
)  # fmt: skip
# CAM5 unit → UNITS: m/s of water → mm/day, Pa → hPa; the rest as CAM5 writes them.
STORAGE_SCALE = np.array([8.64e7, 0.01, 0.01] + [1.0] * 13, dtype=np.float32)
CLASSES = ("TD", "TC", "ETC", "AR")
FULL_SHAPE = (768, 1152)
MAX_BOXES = 15
NUM_CHANNELS = len(CHANNELS)


@dataclasses.dataclass(frozen=True)
class ClimateSpec:
    """A detection set: images in `UNITS`, boxes ymin, xmin, ymax, xmax in this image's pixels."""

    name: str
    image_shape: tuple[int, int, int]  # H, W, 16
    mean: tuple[float, ...]  # per channel, in UNITS, from the training split
    std: tuple[float, ...]
    num_classes: int = len(CLASSES)
    max_boxes: int = MAX_BOXES

    @property
    def fields(self) -> Fields:
        return {
            "image": (tuple(self.image_shape), "float16"),
            "boxes": ((self.max_boxes, 4), "float32"),  # padding rows -1
            "classes": ((self.max_boxes,), "int32"),  # 0..3, padding -1
            # The detector's sampling key (data/climate_train.py); zeros outside training.
            "sample_key": ((2,), "uint32"),
        }


def check_image_size(height: int, full_shape: tuple[int, int] = FULL_SHAPE) -> int:
    """The downscaling factor that turns the full grid into `height` rows (--image_size).

    The factor must divide both sides, so the width stays full_width / factor (height × 1.5).
    """
    full_h, full_w = full_shape
    if height <= 0 or full_h % height or full_w % (full_h // height):
        raise UsageError(
            f"--image_size={height}: expected an even height that divides {full_h} (e.g. "
            f"{', '.join(str(full_h // f) for f in (1, 2, 4, 8, 16))}) for the climate data sets"
        )
    return full_h // height


def downscale(images: np.ndarray, boxes: np.ndarray, factor: int) -> tuple[np.ndarray, np.ndarray]:
    """[n, H, W, C] images and their boxes [..., 4] at 1/factor the size (block mean)."""
    return downscale_images(images, factor), scale_boxes(boxes, factor)


def downscale_images(images: np.ndarray, factor: int) -> np.ndarray:
    """[n, H, W, C] → [n, H/f, W/f, C]: `downscale_planes` over the (H, W) axes."""
    if factor == 1:
        return images
    planes = downscale_planes(np.moveaxis(images, -1, 1), factor)
    return np.moveaxis(planes, 1, -1)


def downscale_planes(planes: np.ndarray, factor: int) -> np.ndarray:
    """[..., H, W] → float32 [..., H/f, W/f]: the mean of each factor × factor block, in float32
    (float16 sums of pressures overflow), summed in a fixed order, one block position at a time:
    elementwise, so a value does not depend on how many samples, channels or rows were
    downscaled together (the converter's output is the same however it reads the file)."""
    *lead, h, w = planes.shape
    blocks = planes.reshape(*lead, h // factor, factor, w // factor, factor)
    total = blocks[..., 0, :, 0].astype(np.float32)
    for i in range(factor):
        for j in range(factor):
            if i or j:
                total = total + blocks[..., i, :, j]
    return total / np.float32(factor * factor)


def scale_boxes(boxes: np.ndarray, factor: int) -> np.ndarray:
    """Box coordinates divided by the factor, as float32; padding rows stay -1."""
    boxes = np.asarray(boxes, np.float32)
    return boxes if factor == 1 else np.where(boxes < 0, boxes, boxes / np.float32(factor))


def box_fields(raw_boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ExtremeWeather's int rows [..., 5] (ymin, xmin, ymax, xmax, class; unused rows all -1)
    → (boxes float32 [..., 4] with padding -1, classes int32 [...] with padding -1)."""
    classes = raw_boxes[..., 4].astype(np.int32)
    unused = classes < 0
    boxes = np.where(unused[..., None], -1, raw_boxes[..., :4]).astype(np.float32)
    return boxes, np.where(unused, -1, classes)


def channel_stats(images, chunk_size: int = 16) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of [n, H, W, C] images (an array or memmap, read `chunk_size`
    examples at a time, or an iterable of such chunks), so a large set never sits in memory.

    Chunks are merged with Chan et al.'s pairwise update in float64: a sum of squares of
    pressures over a year loses the variance to cancellation.
    """
    chunks = (
        (images[i : i + chunk_size] for i in range(0, len(images), chunk_size))
        if hasattr(images, "shape")
        else images
    )
    count, mean, m2 = 0, 0.0, 0.0
    for chunk in chunks:
        x = np.asarray(chunk, dtype=np.float64).reshape(-1, chunk.shape[-1])
        k = len(x)
        if k == 0:
            continue
        chunk_mean = x.mean(axis=0)
        chunk_m2 = ((x - chunk_mean) ** 2).sum(axis=0)
        delta = chunk_mean - mean
        total = count + k
        mean = mean + delta * (k / total)
        m2 = m2 + chunk_m2 + delta**2 * (count * k / total)
        count = total
    if count == 0:
        raise ValueError("channel_stats: no examples")
    std = np.sqrt(m2 / count)
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)
