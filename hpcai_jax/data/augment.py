"""Image transforms for tfds sets: decode, the training augmentation, the held-out crop.

Training images get the ImageNet recipe of the flax example and MLPerf's JAX ResNet: a random
crop of 8–100% of the area and aspect 3/4–4/3 (10 attempts, then the held-out centre crop),
resized to S×S, and a horizontal flip half the time. Its randomness is a pure function of
(seed, member, epoch, slot), slot being the example's position in the member's epoch order, so a
run resumed at any step, or read by any number of workers, sees the same crops; two copies of an
example in one bootstrap sample get crops of their own, as two draws would. Held-out images
(and out-of-bag reads of training images) get the shorter side resized to S/0.875 and a centre
crop. Everything stays uint8: normalisation happens on the device.

Encoded JPEGs are cropped before they are decoded (`train_image`, `eval_encoded`): the crop box
is drawn from the header's size (PIL reads it without decoding), and where the box is at least
twice the output on both sides, libjpeg decodes at a DCT scale of 1/2, 1/4 or 1/8 (PIL's
`draft`) that still leaves the box at least the output's resolution; the box is scaled with the
image and resized with the same bilinear filter. Where no scale applies the pixels are those of
the full decode, bit for bit. PIL cannot decode only the box's rows or columns: every scale
decodes the whole frame, and the entropy decoding it cannot scale is most of a JPEG's cost (see
docs/input.md). `train_image_reference` is the full-decode path, kept for the benchmark and tests.
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
# The held-out resize keeps 1.5× its size after a DCT scale: with none, a 1/4-scaled 500 × 375
# frame resized by 1.28 to 73 differed from the full decode by 3.6/255 on average (1.3 at 1.5×).
_EVAL_MARGIN = 1.5
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}  # PIL's mode of each channel count


def _open(data: bytes | np.ndarray) -> Image.Image:
    """An encoded image, opened but not decoded (PIL decodes on first use), or an array."""
    if isinstance(data, np.ndarray):
        return Image.fromarray(data.squeeze(-1) if data.ndim == 3 and data.shape[-1] == 1 else data)
    return Image.open(io.BytesIO(data))


def _as_channels(image: Image.Image, channels: int) -> Image.Image:
    mode = _MODES[channels]
    return image if image.mode == mode else image.convert(mode)


def decode(data: bytes | np.ndarray, channels: int) -> Image.Image:
    """An encoded image (JPEG, PNG: what tfds stores) or a decoded array, as `channels` (1, 3
    or 4) channels: ImageNet has grayscale and CMYK JPEGs among its RGB ones."""
    return _as_channels(_open(data), channels)


def dct_scale(height: int, width: int, size: int, margin: float = 1.0) -> int:
    """The largest JPEG DCT scale (1, 2, 4 or 8) at which a height × width region still has at
    least margin·size pixels a side (1 where the region has fewer already)."""
    return next((s for s in (8, 4, 2) if min(height, width) >= s * size * margin), 1)


def _draft(image: Image.Image, scale: int) -> int:
    """Has a JPEG decode at 1/scale (PIL's draft: libjpeg's DCT scaling) and returns the scale
    it will decode at (1 for other formats and arrays). Call before the pixels are read."""
    if scale == 1 or image.format != "JPEG":
        return 1
    if image.draft(image.mode, (image.width // scale, image.height // scale)) is None:
        return 1
    return image.decoderconfig[0]  # PIL's choice: `scale` itself, as w // (w // s) < 2s


def _array(image: Image.Image, size: int) -> np.ndarray:
    out = np.asarray(image, np.uint8)
    return out.reshape(size, size, -1)


def _eval_size(height: int, width: int, size: int) -> tuple[int, int]:
    """(width, height) of the held-out resize: the shorter side to size/0.875."""
    short = round(size / CROP_FRACTION)
    scale = short / min(height, width)
    return max(short, round(width * scale)), max(short, round(height * scale))


def _centre(image: Image.Image, size: int) -> np.ndarray:
    top, left = (image.height - size) // 2, (image.width - size) // 2
    return _array(image.crop((left, top, left + size, top + size)), size)


def eval_image(image: Image.Image, size: int) -> np.ndarray:
    """Shorter side to size/0.875 (bilinear), then the central size×size: uint8 [S, S, C]."""
    resized = _eval_size(image.height, image.width, size)
    return _centre(image.resize(resized, Image.Resampling.BILINEAR), size)


def _eval_opened(image: Image.Image, channels: int, size: int) -> np.ndarray:
    width, height = image.size  # the header's: nothing decoded yet
    resized = _eval_size(height, width, size)
    _draft(image, dct_scale(height, width, min(resized), _EVAL_MARGIN))
    image = _as_channels(image, channels)
    return _centre(image.resize(resized, Image.Resampling.BILINEAR), size)


def eval_encoded(data: bytes | np.ndarray, channels: int, size: int) -> np.ndarray:
    """`eval_image` of an encoded image, decoded at the DCT scale that keeps the shorter side at
    least 1.5 × size/0.875 (the full decode where none does)."""
    return _eval_opened(_open(data), channels, size)


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


def train_image_reference(image: Image.Image, size: int, rng: np.random.Generator) -> np.ndarray:
    """Random-resized crop to size×size (bilinear) and a flip half the time: uint8 [S, S, C].
    The full-decode path: `train_image` draws the same, cheaper; kept for the benchmark and
    the tests that compare the two."""
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


def train_image(
    data: bytes | np.ndarray, channels: int, size: int, rng: np.random.Generator
) -> np.ndarray:
    """`train_image_reference` of an encoded image, its crop box drawn from the header's size
    before decoding, then decoded at the largest DCT scale leaving the box at least size×size
    (the full decode where none does): the same draws of `rng`, the same box and flip."""
    image = _open(data)
    box = crop_box(image.height, image.width, rng)
    if box is None:
        out = _eval_opened(image, channels, size)
    else:
        top, left, h, w = box
        scale = _draft(image, dct_scale(h, w, size))
        image = _as_channels(image, channels)
        out = _array(
            image.resize(
                (size, size),
                Image.Resampling.BILINEAR,
                box=(left / scale, top / scale, (left + w) / scale, (top + h) / scale),
            ),
            size,
        )
    return out[:, ::-1] if rng.random() < 0.5 else out
