"""Image transforms for tfds sets: decode, the training augmentation, the held-out crop.

Training images get the ImageNet recipe of the flax example and MLPerf's JAX ResNet: a random
crop of 8–100% of the area and aspect 3/4–4/3 (10 attempts, then the held-out centre crop),
resized to S×S, and a horizontal flip half the time. Its randomness is a pure function of
(seed, member, epoch, slot), slot being the example's position in the member's epoch order, so a
run resumed at any step, or read by any number of workers, sees the same crops; two copies of an
example in one bootstrap sample get crops of their own, as two draws would. Held-out images
(and out-of-bag reads of training images) get the shorter side resized to S/0.875 and a centre
crop. Everything stays uint8: normalisation happens on the device.
"""

from __future__ import annotations

import io
import math

import numpy as np
from PIL import Image

_AUGMENT_TAG = 0xA06E  # separates augmentation streams from the sampler's (sampler._STREAM_TAG)
AREA = (0.08, 1.0)
ASPECT = (3 / 4, 4 / 3)
ATTEMPTS = 10
CROP_FRACTION = 0.875  # held-out: shorter side to S / 0.875, then the central S×S
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}  # PIL's mode of each channel count


def decode(data: bytes | np.ndarray, channels: int) -> Image.Image:
    """An encoded image (JPEG, PNG: what tfds stores) or a decoded array, as `channels` (1, 3
    or 4) channels: ImageNet has grayscale and CMYK JPEGs among its RGB ones."""
    if isinstance(data, np.ndarray):
        image = Image.fromarray(
            data.squeeze(-1) if data.ndim == 3 and data.shape[-1] == 1 else data
        )
    else:
        image = Image.open(io.BytesIO(data))
    mode = _MODES[channels]
    return image if image.mode == mode else image.convert(mode)


def _array(image: Image.Image, size: int) -> np.ndarray:
    out = np.asarray(image, np.uint8)
    return out.reshape(size, size, -1)


def eval_image(image: Image.Image, size: int) -> np.ndarray:
    """Shorter side to size/0.875 (bilinear), then the central size×size: uint8 [S, S, C]."""
    w, h = image.size
    short = round(size / CROP_FRACTION)
    scale = short / min(h, w)
    image = image.resize(
        (max(short, round(w * scale)), max(short, round(h * scale))), Image.Resampling.BILINEAR
    )
    top, left = (image.height - size) // 2, (image.width - size) // 2
    return _array(image.crop((left, top, left + size, top + size)), size)


def example_rng(seed: int, member: int, epoch: int, slot: int) -> np.random.Generator:
    """The generator of one training example's crop and flip."""
    key = np.random.SeedSequence([_AUGMENT_TAG, seed, member, epoch, slot])
    return np.random.Generator(np.random.PCG64(key))


def crop_box(height: int, width: int, rng: np.random.Generator) -> tuple[int, int, int, int] | None:
    """(top, left, crop height, crop width) of a random-resized crop, or None after 10 misses
    (the caller then takes the held-out centre crop). Area uniform, aspect log-uniform, as
    torchvision's RandomResizedCrop and tf.image.sample_distorted_bounding_box draw them."""
    area = height * width
    log_aspect = (math.log(ASPECT[0]), math.log(ASPECT[1]))
    for _ in range(ATTEMPTS):
        target = area * rng.uniform(*AREA)
        aspect = math.exp(rng.uniform(*log_aspect))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    return None


def train_image(image: Image.Image, size: int, rng: np.random.Generator) -> np.ndarray:
    """Random-resized crop to size×size (bilinear) and a flip half the time: uint8 [S, S, C]."""
    box = crop_box(image.height, image.width, rng)
    if box is None:
        out = eval_image(image, size)
    else:
        top, left, h, w = box
        out = _array(
            image.resize(
                (size, size), Image.Resampling.BILINEAR, box=(left, top, left + w, top + h)
            ),
            size,
        )
    return out[:, ::-1] if rng.random() < 0.5 else out
