"""Image transforms for tfds sets: decode, the training augmentation, the held-out crop.

A crop is a pure function of (seed, member, epoch, slot), so resumes and any number of workers
read the same batches; a JPEG is cropped before it is decoded, because decoding is what an image
costs the host. What each path does, how close its pixels are, and its cost: `docs/input.md`.
"""

from __future__ import annotations

import io
import math
import operator
import random

import cv2
import numpy as np
from PIL import Image

from hpcai_jax.data import jpeg_region

# The pipeline runs one image at a time per worker; OpenCV's own threads would only add overhead.
cv2.setNumThreads(1)

_AUGMENT_TAG = 0xA06E  # separates augmentation streams from the sampler's (sampler._STREAM_TAG)
AREA = (0.08, 1.0)
ASPECT = (3 / 4, 4 / 3)
ATTEMPTS = 10
CROP_FRACTION = 0.875  # held-out: shorter side to S / 0.875, then the central S×S
# The held-out resize keeps 1.5× its size after a DCT scale: less moves its pixels away from the
# full decode's (docs/input.md, Pixels).
_EVAL_MARGIN = 1.5
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}  # PIL's mode of each channel count
# libjpeg-turbo's DCT scale keeps the box ≥ 1.5× the output a side; `_resample`'s blur does the
# rest of PIL's antialiasing. The DCT's low-pass is sharper than PIL's triangle, so a smaller
# margin departs further from the full decode (docs/input.md, Pixels).
_DCT_MARGIN = 1.5
# `_resample`'s Gaussian has 1.3× the standard deviation that PIL's triangle adds to bilinear
# interpolation: the factor closest to PIL's output (docs/input.md, Pixels).
_BLUR = 1.3


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


def _eval_box(height: int, width: int, size: int) -> tuple[float, float, float, float]:
    """(top, left, height, width) in the source of the held-out crop: the central size × size
    of the image resized to `_eval_size`."""
    resized_width, resized_height = _eval_size(height, width, size)
    top, left = (resized_height - size) // 2, (resized_width - size) // 2
    scale_y, scale_x = height / resized_height, width / resized_width
    return top * scale_y, left * scale_x, size * scale_y, size * scale_x


def _eighths(height: float, width: float, size: int) -> int:
    """The DCT scale M/8 at which to decode a height × width box: the smallest of 1/8, 1/4 and
    1/2 that keeps its shorter side at least 1.5 × size, else 8/8 (libjpeg-turbo has SIMD
    code for these four only; its other scales are slower than the full one, docs/input.md)."""
    short = min(height, width)
    return next((m for m in (1, 2, 4) if short * m >= 8 * _DCT_MARGIN * size), 8)


def _sigma(ratio: float) -> float:
    """The Gaussian blur (pixels) for a shrink by `ratio`: PIL's bilinear filter widens its
    triangle to ±ratio pixels (variance ratio²/6), interpolation alone gives ±1 (1/6). Below
    0.25 pixels (ratio < 1.07), none: its 3-tap kernel would be [0.0003, 0.9994, 0.0003]."""
    sigma = _BLUR * math.sqrt((ratio * ratio - 1) / 6) if ratio > 1 else 0.0
    return sigma if sigma > 0.25 else 0.0


def _taps(sigma: float) -> int:
    """Taps of the Gaussian kernel: 3 up to σ = 1.2 (the cheapest kernel, and as close to PIL's
    output there as wider ones: a 224² crop's σ stays below 0.9), else ±2σ."""
    return 1 if not sigma else 3 if sigma <= 1.2 else 2 * math.ceil(2 * sigma) + 1


def _resample(
    pixels: np.ndarray, box: tuple[float, float, float, float], size: int, flip: bool
) -> np.ndarray:
    """The box (top, left, height, width, in `pixels`' coordinates) resized to size × size like
    PIL's bilinear resize of that box, mirrored if `flip`. OpenCV (SIMD), cheaper than PIL's
    resize (docs/input.md): a Gaussian blur along each axis that shrinks enough, then a bilinear
    resize of the box where it lies on whole pixels (a training crop at the full scale), else one
    bilinear warp that crops, scales and flips. Pixels beyond `pixels`' edges repeat its edge."""
    top, left, height, width = box
    channels = pixels.shape[-1]
    ratio_y, ratio_x = height / size, width / size
    sigma_y, sigma_x = _sigma(ratio_y), _sigma(ratio_x)
    # Only the box and what the blur and the interpolation reach around it: the decoded region
    # has more (an iMCU's alignment on the left, its own outermost rows and columns).
    reach_y, reach_x = _taps(sigma_y) // 2 + 1, _taps(sigma_x) // 2 + 1
    row0, col0 = max(0, math.floor(top) - reach_y), max(0, math.floor(left) - reach_x)
    pixels = pixels[
        row0 : math.ceil(top + height) + reach_y, col0 : math.ceil(left + width) + reach_x
    ]
    top, left = top - row0, left - col0
    box = top, left, height, width
    if sigma_y or sigma_x:
        pixels = cv2.GaussianBlur(
            pixels,
            (_taps(sigma_x), _taps(sigma_y)),
            sigmaX=sigma_x or 1.0,  # an axis of 1 tap is left alone whatever its σ
            sigmaY=sigma_y or 1.0,
            borderType=cv2.BORDER_REPLICATE,
        )
    if all(float(v).is_integer() for v in box):
        top, left, height, width = (int(v) for v in box)
        out = cv2.resize(
            pixels[top : top + height, left : left + width],
            (size, size),
            interpolation=cv2.INTER_LINEAR,
        )
        # A copy, not a view: NumPy copies a reversed 3-byte-pixel view element by element, slowly
        # (docs/input.md).
        out = cv2.flip(out, 1) if flip else out
    else:
        # Output pixel i's centre lies at left + (i + 0.5) × ratio in the box's continuous
        # coordinates, that is at that − 0.5 in pixel indices.
        x0, y0 = left + 0.5 * ratio_x - 0.5, top + 0.5 * ratio_y - 0.5
        row_x = [-ratio_x, 0.0, x0 + ratio_x * (size - 1)] if flip else [ratio_x, 0.0, x0]
        out = cv2.warpAffine(
            pixels,
            np.array([row_x, [0.0, ratio_y, y0]]),
            (size, size),
            flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
            borderMode=cv2.BORDER_REPLICATE,
        )
    return out.reshape(size, size, channels)


def _turbo(data: bytes | np.ndarray, channels: int):
    """(decoder, header) where libjpeg-turbo 3 decodes this image to `channels` channels, else
    None (a decoded array, PNG, CMYK, RGBA, or no libjpeg-turbo 3: PIL then decodes)."""
    if isinstance(data, np.ndarray) or channels not in (1, 3):
        return None
    decoder = jpeg_region.decoder()
    header = decoder.header(bytes(data)) if decoder is not None else None
    return None if header is None else (decoder, header)


def _crop_turbo(
    turbo, data: bytes, box: tuple[float, float, float, float], size: int, channels: int, flip: bool
) -> np.ndarray | None:
    """The box (top, left, height, width in source pixels) decoded by libjpeg-turbo at its DCT
    scale and resampled to size × size; None where libjpeg-turbo fails on this file."""
    decoder, header = turbo
    eighths = _eighths(box[2], box[3], size)
    top, left, height, width = (v * eighths / 8 for v in box)
    # Rows and columns beyond the box: one the interpolation may reach, those the blur reaches,
    # and one whose chroma libjpeg-turbo upsamples without its neighbours (jpeg_region.py).
    pad_y = _taps(_sigma(height / size)) // 2 + 2
    pad_x = _taps(_sigma(width / size)) // 2 + 2
    region = decoder.decode(
        bytes(data),
        header,
        eighths,
        (math.floor(top) - pad_y, math.ceil(top + height) + pad_y),
        (math.floor(left) - pad_x, math.ceil(left + width) + pad_x),
        channels,
    )
    if region is None:
        return None
    return _resample(
        region.pixels, (top - region.top, left - region.left, height, width), size, flip
    )


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
    """`eval_image` of an encoded image: its central box decoded by libjpeg-turbo and
    resampled, or (PIL) the whole frame decoded at the DCT scale that keeps the shorter side at
    least 1.5 × size/0.875 (the full decode where none does)."""
    turbo = _turbo(data, channels)
    if turbo is not None:
        box = _eval_box(turbo[1].height, turbo[1].width, size)
        out = _crop_turbo(turbo, data, box, size, channels, flip=False)
        if out is not None:
            return out
    return _eval_opened(_open(data), channels, size)


# What the crop and flip draw from: `random()` in [0, 1), as Python's and NumPy's generators have.
Draws = random.Random | np.random.Generator


def example_rng(seed: int, member: int, epoch: int, slot: int) -> random.Random:
    """The generator of one training example's crop and flip: Python's Mersenne Twister seeded
    with the five numbers packed into one integer (an int seed gives the same `random()`
    sequence on every platform and Python version). A NumPy generator costs more to seed
    than the crop box's whole arithmetic (docs/input.md)."""
    key = _AUGMENT_TAG
    for value in map(operator.index, (seed, member, epoch, slot)):
        if not 0 <= value < 1 << 64:
            raise ValueError(f"augmentation key {value} is outside [0, 2**64)")
        key = key << 64 | value
    return random.Random(key)


def crop_box(height: int, width: int, rng: Draws) -> tuple[int, int, int, int] | None:
    """(top, left, crop height, crop width) of a random-resized crop, or None after 10 misses
    (the caller then takes the held-out centre crop). Area uniform, aspect log-uniform, as
    torchvision's RandomResizedCrop and tf.image.sample_distorted_bounding_box draw them."""
    area = height * width
    log_low, log_high = math.log(ASPECT[0]), math.log(ASPECT[1])
    for _ in range(ATTEMPTS):
        target = area * (AREA[0] + (AREA[1] - AREA[0]) * rng.random())
        aspect = math.exp(log_low + (log_high - log_low) * rng.random())
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.random() * (height - h + 1))
            left = int(rng.random() * (width - w + 1))
            return top, left, h, w
    return None


def train_image_reference(image: Image.Image, size: int, rng: Draws) -> np.ndarray:
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


def train_image(data: bytes | np.ndarray, channels: int, size: int, rng: Draws) -> np.ndarray:
    """`train_image_reference` of an encoded image, its crop box drawn from the header's size
    before decoding (the same draws of `rng`, the same box and flip), then only the box decoded
    (libjpeg-turbo) or the frame decoded at the largest power-of-two DCT scale leaving the box
    at least size × size (PIL: the full decode where none does)."""
    turbo = _turbo(data, channels)
    image = None
    if turbo is not None:
        height, width = turbo[1].height, turbo[1].width
    else:
        image = _open(data)
        width, height = image.size
    box = crop_box(height, width, rng)
    flip = rng.random() < 0.5
    if turbo is not None:
        out = _crop_turbo(turbo, data, box or _eval_box(height, width, size), size, channels, flip)
        if out is not None:
            return out
        image = _open(data)
    out = _crop_pil(image, channels, size, box)
    return out[:, ::-1] if flip else out


def _crop_pil(
    image: Image.Image, channels: int, size: int, box: tuple[int, int, int, int] | None
) -> np.ndarray:
    """The box (or, for None, the held-out crop) of an opened image, decoded by PIL at the
    largest power-of-two DCT scale that leaves the box at least size × size."""
    if box is None:
        return _eval_opened(image, channels, size)
    top, left, h, w = box
    scale = _draft(image, dct_scale(h, w, size))
    image = _as_channels(image, channels)
    return _array(
        image.resize(
            (size, size),
            Image.Resampling.BILINEAR,
            box=(left / scale, top / scale, (left + w) / scale, (top + h) / scale),
        ),
        size,
    )
