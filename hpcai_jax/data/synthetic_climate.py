"""Climate-like fields with labelled extreme events, generated: the extreme-weather workload's
data when ExtremeWeather (62 GB a year) is not at hand, and in tests.

Example i is a pure function of (seed, i), sampled from continuous functions of the full grid, so
it is the same at any height; its four event classes differ in ways a detector can learn. What a
field holds (profiles, weather, the events and their signatures): `docs/detection.md`, Data.
"""

from __future__ import annotations

import math

import numpy as np

from hpcai_jax.data.climate import CHANNELS, FULL_SHAPE, MAX_BOXES, ClimateSpec, channel_stats
from hpcai_jax.data.climate import check_image_size as _check_image_size
from hpcai_jax.data.climate_train import SAMPLE_KEY, zero_keys
from hpcai_jax.data.source import ArraySource

TRAIN_EXAMPLES, EVAL_EXAMPLES, HEIGHT = 1024, 256, 96
_EVAL_OFFSET = 1 << 40  # held-out examples are indices from here: disjoint from any training set
_MAX_EVENTS = 6
_MODES = 13  # wavenumbers 0..12 in each direction
_LATENTS = 6  # pressure, temperature, moisture, zonal wind, meridional wind, rain
_CHUNK_PIXELS = 1 << 19  # examples × pixels generated at once: bounds the temporary arrays
_C = {name: i for i, name in enumerate(CHANNELS)}
TD, TC, ETC, AR = range(4)


def _profiles(lat: np.ndarray) -> np.ndarray:
    """[H, 16] mean of each channel along the latitudes `lat` (degrees)."""
    cos2 = np.cos(np.radians(lat)) ** 2
    bump = lambda centre, width: np.exp(-(((np.abs(lat) - centre) / width) ** 2))  # noqa: E731
    out = np.zeros((len(lat), len(CHANNELS)))
    out[:, _C["PRECT"]] = 2 + 6 * bump(0, 10) + 2 * bump(50, 10)
    out[:, _C["PS"]] = 985 + 5 * bump(30, 12) - 8 * bump(65, 10)
    out[:, _C["PSL"]] = 1011 + 7 * bump(30, 12) - 10 * bump(62, 10)
    out[:, _C["QREFHT"]] = 0.001 + 0.017 * cos2**2
    out[:, _C["T200"]] = 212 + 10 * bump(45, 15)
    out[:, _C["T500"]] = 240 + 28 * cos2
    out[:, _C["TMQ"]] = 3 + 45 * cos2**3
    out[:, _C["TREFHT"]] = 245 + 55 * cos2
    out[:, _C["TS"]] = 244 + 58 * cos2
    out[:, _C["U850"]] = 11 * bump(45, 12) - 6 * bump(0, 14)
    out[:, _C["UBOT"]] = 8 * bump(45, 12) - 5 * bump(0, 14)
    out[:, _C["Z1000"]] = 100 + 8 * (out[:, _C["PSL"]] - 1013)
    out[:, _C["Z200"]] = 10900 + 1500 * cos2
    out[:, _C["ZBOT"]] = 62 + 4 * cos2
    return out


# [latent, channel]: how strongly each large-scale latent field moves each channel.
_MIX = np.zeros((_LATENTS, len(CHANNELS)), np.float32)
for _latent, _weights in enumerate(
    (
        {"PS": 8, "PSL": 7, "Z1000": 56, "Z200": 60, "ZBOT": 1},
        {"T200": 3, "T500": 3, "TREFHT": 4, "TS": 5, "Z200": 50},
        {"QREFHT": 0.002, "TMQ": 5, "PRECT": 1},
        {"U850": 5, "UBOT": 4},
        {"V850": 4, "VBOT": 3},
        {"PRECT": 2, "TMQ": 2},
    )
):
    for _name, _w in _weights.items():
        _MIX[_latent, _C[_name]] = _w

# Each event adds amp · profile for three profiles: its shape g (a Gaussian vortex or a band)
# and a flow pattern (u, v): the vortex's swirl, or the band's along-band direction. Intensity
# t ∈ [0, 1] moves every amplitude from its low to its high value together.
_SCALAR, _U, _V = range(3)


def _signature(**pairs: tuple[float, float]) -> np.ndarray:
    amp = np.zeros((2, 3, len(CHANNELS)), np.float32)  # low/high, profile, channel
    for name, (lo, hi) in pairs.items():
        if name == "wind":
            rows = ((_U, "U850", 1.0), (_U, "UBOT", 0.8), (_V, "V850", 1.0), (_V, "VBOT", 0.8))
            for profile, channel, scale in rows:
                amp[:, profile, _C[channel]] = (lo * scale, hi * scale)
        else:
            amp[:, _SCALAR, _C[name]] = (lo, hi)
    return amp


def _vortex(dp: tuple[float, float], **more: tuple[float, float]) -> np.ndarray:
    """A low: surface and sea-level pressure down by dp hPa, Z1000 by 8 m per hPa."""
    lo, hi = dp
    return _signature(PS=(-lo, -hi), PSL=(-lo, -hi), Z1000=(-8 * lo, -8 * hi), **more)


_SIGNATURES = np.stack(
    [
        _vortex((3, 7), wind=(8, 14), TMQ=(8, 14), PRECT=(15, 30), QREFHT=(0.001, 0.002)),
        _vortex(
            (25, 50), wind=(30, 50), TMQ=(20, 30), PRECT=(60, 120), QREFHT=(0.002, 0.004),
            T200=(3, 5), Z200=(60, 100),
        ),
        _vortex((15, 30), wind=(15, 25), TMQ=(4, 8), PRECT=(8, 15), T500=(-3, -6), Z200=(-150, -250)),
        _signature(TMQ=(20, 35), PRECT=(5, 10), QREFHT=(0.002, 0.004), wind=(10, 18)),
    ]
)  # fmt: skip
# Per class: |latitude| range (degrees), then size ranges in full-resolution pixels: the vortex
# radius R (box half-side 1.5 R), or the band's length and half-width (box: the rotated band).
_LATITUDES = ((5, 25), (8, 30), (35, 65), (28, 50))
_RADII = ((12, 18), (14, 22), (45, 70))
_AR_LENGTH, _AR_HALF_WIDTH, _AR_ANGLE = (300, 500), (8, 13), (12, 30)
_BOX_HALF_SIDE = 1.5  # × R: where the vortex's pressure anomaly has fallen to 10 %


def _draw_events(rng: np.random.Generator) -> np.ndarray:
    """[_MAX_EVENTS, 9] rows: class, cy, cx (full-res px), size a, size b, cos, sin, intensity,
    valid; the boxes follow from these (see _boxes)."""
    events = np.zeros((_MAX_EVENTS, 9))
    placed: list[np.ndarray] = []
    full_h, full_w = FULL_SHAPE
    for slot in range(rng.integers(1, _MAX_EVENTS + 1)):
        cls = int(rng.integers(0, 4))
        for _ in range(20):  # placements that overlap an earlier event are redrawn
            south = rng.random() < 0.5
            lat = rng.uniform(*_LATITUDES[cls]) * (-1 if south else 1)
            if cls == AR:
                length, half_w = rng.uniform(*_AR_LENGTH), rng.uniform(*_AR_HALF_WIDTH)
                angle = np.radians(rng.uniform(*_AR_ANGLE)) * (-1 if south else 1)  # poleward
                a, b, cos, sin = length / 2, half_w, np.cos(angle), np.sin(angle)
            else:
                a = rng.uniform(*_RADII[cls])
                b, cos, sin = a, 1.0, (-1.0 if south else 1.0)  # sin: the turning sense
            row = np.array([cls, 0, 0, a, b, cos, sin, rng.random(), 1.0])
            hy, hx = _half_extent(row)
            row[1] = np.clip((lat + 90) / 180 * full_h - 0.5, hy, full_h - 1 - hy)
            row[2] = rng.uniform(hx, full_w - 1 - hx)
            box = _boxes(row[None])[0]
            if all(_disjoint(box, other) for other in placed):
                placed.append(box)
                events[slot] = row
                break
    return events


def _half_extent(events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b, cos, sin = events[..., 3], events[..., 4], events[..., 5], np.abs(events[..., 6])
    band = events[..., 0] == AR
    width = np.where(band, _BOX_HALF_SIDE * b, _BOX_HALF_SIDE * a)
    hy = np.where(band, a * sin + width * cos, width)
    hx = np.where(band, a * cos + width * sin, width)
    return hy, hx


def _boxes(events: np.ndarray) -> np.ndarray:
    """[..., 4] full-resolution boxes ymin, xmin, ymax, xmax of event rows."""
    hy, hx = _half_extent(events)
    cy, cx = events[..., 1], events[..., 2]
    return np.stack([cy - hy, cx - hx, cy + hy, cx + hx], axis=-1)


def _disjoint(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(a[2] < b[0] or b[2] < a[0] or a[3] < b[1] or b[3] < a[1])


# Amplitude of wavenumbers (ky, kx): a red spectrum, most variance in the largest scales,
# normalised so that each latent field has unit variance.
_SPECTRUM = 1 / (1 + (np.arange(_MODES)[:, None] ** 2 + np.arange(_MODES) ** 2) / 16)
_SPECTRUM /= np.sqrt((_SPECTRUM**2).sum())


def _basis(coords: np.ndarray, period: float) -> np.ndarray:
    """[len(coords), 2 · _MODES]: cos and sin of wavenumbers 0..12 over `period` pixels."""
    phase = 2 * np.pi * np.outer(coords, np.arange(_MODES)) / period
    return np.concatenate([np.cos(phase), np.sin(phase)], axis=1).astype(np.float32)


def _add_event(image: np.ndarray, event: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> None:
    """Adds one event's anomalies to an [H, W, 16] image in place, within the window where they
    exceed ~1e-4 of their peak (a window, not the whole grid: generation time is in these)."""
    cls, cy, cx, a, b, cos, sin, t, _ = event.tolist()  # Python floats keep float32 math
    if cls == AR:  # a super-Gaussian ends the band at |s| ≈ a; Gaussian across it
        hy, hx = 1.4 * a * abs(sin) + 4 * b * cos, 1.4 * a * cos + 4 * b * abs(sin)
    else:
        hy = hx = 5 * a
    y0, y1 = np.searchsorted(ys, [cy - hy, cy + hy])
    x0, x1 = np.searchsorted(xs, [cx - hx, cx + hx])
    dy = ys[y0:y1, None] - cy
    dx = xs[None, x0:x1] - cx
    if cls == AR:
        s, across = dx * cos + dy * sin, dy * cos - dx * sin  # along and across the band
        shape = np.exp(-((across / b) ** 2) - (s / a) ** 8)
        u, v = shape * cos, shape * sin  # flow along the band
    else:
        # Gaussian anomaly; tangential wind V (r/R) exp((1 - r²/R²)/2), V at r = R; sin carries
        # the turning sense.
        r2 = (dy * dy + dx * dx) / (a * a)
        shape = np.exp(-r2)
        swirl = np.sqrt(shape) * (math.exp(0.5) * sin / a)
        u, v = -dy * swirl, dx * swirl
    lo, hi = _SIGNATURES[int(cls)]
    amp = lo + t * (hi - lo)  # [3, 16]
    image[y0:y1, x0:x1] += np.stack([shape, u, v], axis=-1) @ amp


def _fields(coeffs: np.ndarray, events: np.ndarray, ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """[n, H, W, 16] float32 images of n examples' latent coefficients and events."""
    full_h, full_w = FULL_SHAPE
    # Latitude: a cosine series over twice the pole-to-pole span (no wrap-around at the poles);
    # longitude: periodic, like the globe.
    by, bx = _basis(ys, 2 * full_h), _basis(xs, full_w)
    cy, sy = by[:, :_MODES], by[:, _MODES:]
    # coeffs [n, L, ky, kx, 2]: f = Σ a cos(θy + θx) + b sin(θy + θx), expanded into separable
    # products so that the grid costs two small matmuls.
    a, b = coeffs[..., 0], coeffs[..., 1]
    p = cy @ a + sy @ b  # [n, L, H, kx]
    q = cy @ b - sy @ a
    latent = np.concatenate([p, q], axis=-1) @ bx.T  # [n, L, H, W]
    image = np.einsum("nlhw,lc->nhwc", latent, _MIX, optimize=True)
    image += _profiles(ys * 180 / full_h - 90 + 90 / full_h)[None, :, None, :].astype(np.float32)
    for example, example_events in zip(image, events, strict=True):
        for event in example_events[example_events[:, 8] > 0]:
            _add_event(example, event, ys, xs)
    for name, floor in (("PRECT", 0.0), ("TMQ", 0.0), ("QREFHT", 1e-5)):
        np.maximum(image[..., _C[name]], floor, out=image[..., _C[name]])
    return image


def _example(seed: int, index: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng((seed, index))
    coeffs = rng.standard_normal((_LATENTS, _MODES, _MODES, 2)) * _SPECTRUM[..., None]
    return coeffs.astype(np.float32), _draw_events(rng)


def generate(start: int, n: int, height: int, seed: int) -> dict[str, np.ndarray]:
    """Examples start..start+n at `height` rows (a divisor of 768; width 1.5 × height):
    {"image": float16 [n, H, W, 16], "boxes": float32 [n, 15, 4], "classes": int32 [n, 15]}."""
    factor = _check_image_size(height)
    h, w = height, FULL_SHAPE[1] // factor
    # Pixel centres in full-resolution coordinates: the centre of each factor × factor block,
    # where downscaling real data puts its block mean.
    ys = (np.arange(h) * factor + (factor - 1) / 2).astype(np.float32)
    xs = (np.arange(w) * factor + (factor - 1) / 2).astype(np.float32)
    examples = [_example(seed, i) for i in range(start, start + n)]
    coeffs = np.stack([c for c, _ in examples]) if n else np.zeros((0,))
    events = np.stack([e for _, e in examples]) if n else np.zeros((0, _MAX_EVENTS, 9))
    image = np.empty((n, h, w, len(CHANNELS)), np.float16)
    chunk = max(1, _CHUNK_PIXELS // (h * w))
    for i in range(0, n, chunk):
        image[i : i + chunk] = _fields(coeffs[i : i + chunk], events[i : i + chunk], ys, xs)
    boxes = np.full((n, MAX_BOXES, 4), -1, np.float32)
    classes = np.full((n, MAX_BOXES), -1, np.int32)
    for row, ev in enumerate(events):
        ev = ev[ev[:, 8] > 0]
        boxes[row, : len(ev)] = _boxes(ev) / factor
        classes[row, : len(ev)] = ev[:, 0]
    return {"image": image, "boxes": boxes, "classes": classes}


def load(
    height: int = HEIGHT,
    train_examples: int = TRAIN_EXAMPLES,
    eval_examples: int = EVAL_EXAMPLES,
    seed: int = 0,
) -> tuple[ArraySource, ArraySource]:
    """(train, eval) sources; the spec's mean and std are the training split's."""
    train = generate(0, train_examples, height, seed)
    held_out = generate(_EVAL_OFFSET, eval_examples, height, seed)
    train[SAMPLE_KEY], held_out[SAMPLE_KEY] = zero_keys(train_examples), zero_keys(eval_examples)
    mean, std = channel_stats(train["image"])
    spec = ClimateSpec("synthetic_climate", train["image"].shape[1:], mean, std)
    return ArraySource(spec, train), ArraySource(spec, held_out)
