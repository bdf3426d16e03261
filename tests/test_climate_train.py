"""The climate training read: per-example sampling keys from (seed, member, epoch, slot), and the
north-south mirror that keeps boxes on their events and cyclones turning with their hemisphere."""

import pickle

import numpy as np

from hpcai_jax.data import climate_train, synthetic_climate
from hpcai_jax.data.climate import CHANNELS
from hpcai_jax.data.source import ArraySource

U850, V850, PSL, TMQ = (CHANNELS.index(name) for name in ("U850", "V850", "PSL", "TMQ"))
HEIGHT = 96


def _events_alone(n: int):
    """Examples 0..n-1 at HEIGHT rows, and each event's anomaly alone: the field with only that
    event minus the field without events ([events, H, W, 16], with their example, box, class)."""
    full = synthetic_climate.generate(0, n, HEIGHT, seed=0)
    factor = 768 // HEIGHT
    ys = (np.arange(HEIGHT) * factor + (factor - 1) / 2).astype(np.float32)
    xs = (np.arange(HEIGHT * 3 // 2) * factor + (factor - 1) / 2).astype(np.float32)
    alone = []
    for i in range(n):
        coeffs, events = synthetic_climate._example(0, i)
        quiet = events.copy()
        quiet[:, 8] = 0  # no event is drawn
        base = synthetic_climate._fields(coeffs[None], quiet[None], ys, xs)[0]
        for j in np.flatnonzero(events[:, 8] > 0):
            one = quiet.copy()
            one[j] = events[j]
            anomaly = synthetic_climate._fields(coeffs[None], one[None], ys, xs)[0] - base
            alone.append((i, int(j), anomaly))
    return full, alone


def _vorticity(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """∂v/∂x − ∂u/∂y per pixel, y pointing north (row 0 is the South Pole): > 0 anticlockwise."""
    return np.gradient(v, axis=1) - np.gradient(u, axis=0)


def test_flip_keeps_boxes_on_their_events_and_cyclones_turning_with_their_hemisphere():
    n = 4
    full, alone = _events_alone(n)
    image, boxes = climate_train.flip_latitude(full["image"], full["boxes"], np.ones(n, bool))
    # The wind: the meridional components change sign, the zonal ones do not.
    np.testing.assert_array_equal(image[..., V850], -full["image"][:, ::-1, :, V850])
    np.testing.assert_array_equal(image[..., U850], full["image"][:, ::-1, :, U850])
    np.testing.assert_array_equal(image[..., PSL], full["image"][:, ::-1, :, PSL])
    # Generated events fill their boxes' first rows, in order (synthetic_climate.generate).
    assert len(alone) >= 8
    for i, j, anomaly in alone:
        cls = full["classes"][i, j]
        box = boxes[i, j]
        moved, _ = climate_train.flip_latitude(anomaly[None], full["boxes"][i : i + 1], [True])
        moved = moved[0]
        mass = np.abs(moved[..., TMQ if cls == synthetic_climate.AR else PSL])
        # Most of the event's anomaly lies inside its mirrored box, its peak included.
        inside = _inside(mass.shape, box)
        assert (mass * inside).sum() > 0.6 * mass.sum(), (i, j, cls, box)
        assert inside.reshape(-1)[np.argmax(mass)], (i, j, cls, box)
        if cls != synthetic_climate.AR:  # a vortex turns the way its new hemisphere wants
            north = (box[0] + box[2]) / 2 > HEIGHT / 2
            curl = (_vorticity(moved[..., U850], moved[..., V850]) * inside).sum()
            assert (curl > 0) == north, (i, j, cls, box, curl)


def _inside(shape, box) -> np.ndarray:
    """1 where a pixel's centre is in the box (pixel i covers [i, i + 1))."""
    y0, x0, y1, x1 = box
    yy, xx = np.mgrid[: shape[0], : shape[1]] + 0.5
    return ((yy >= y0) & (yy <= y1) & (xx >= x0) & (xx <= x1)).astype(np.float32)


def test_reader_keys_each_example_by_seed_member_epoch_and_slot():
    data = synthetic_climate.generate(0, 4, 32, seed=0)
    data["sample_key"] = climate_train.zero_keys(4)
    source = ArraySource(None, data)
    reader = climate_train.ClimateTrainReader(source, flip=True)
    indices = np.array([0, 1, 1, 3])
    keys = np.array([[5, 0, 0, s] for s in range(4)])  # seed 5, member 0, epoch 0, slots 0..3
    first = reader(indices, keys)
    again = pickle.loads(pickle.dumps(reader))(indices, keys)  # a worker's copy: the same
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    k = first["sample_key"]
    assert k.dtype == np.uint32 and k.shape == (4, 2) and len({tuple(r) for r in k}) == 4
    # The next epoch (the same slots a few hundred steps on): other keys.
    later = reader(indices, keys + [0, 0, 1, 0])["sample_key"]
    assert not (later == k).all(axis=1).any()
    # Flipped examples are mirrored; the others are the source's own.
    flipped = (climate_train.example_words(keys)[:, 2] & 1).astype(bool)
    for row, i in enumerate(indices):
        want = data["image"][i, ::-1] if flipped[row] else data["image"][i]
        np.testing.assert_array_equal(first["image"][row][..., PSL], want[..., PSL])
    plain = climate_train.ClimateTrainReader(source, flip=False)(indices, keys)
    np.testing.assert_array_equal(plain["image"], data["image"][indices])
    np.testing.assert_array_equal(plain["sample_key"], k)
    words = climate_train.example_words(
        [[5, m, e, s] for m in range(4) for e in range(4) for s in range(16)]
    )
    assert 0.35 < (words[:, 2] & 1).mean() < 0.65  # about half flipped
