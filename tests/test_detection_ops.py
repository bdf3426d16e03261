"""Detection building blocks against hand-computed figures and plain numpy references."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from hpcai_jax.detection import anchors, boxes, nms, roi_align, roi_sampling
from hpcai_jax.detection.losses import detection_loss


def random_boxes(rng, n, size=50.0):
    corner = rng.uniform(0, size, (n, 2))
    extent = rng.uniform(1, size / 2, (n, 2))
    return np.concatenate([corner, corner + extent], axis=1).astype(np.float32)


# ---- boxes ----


def test_iou_literal_values_and_padding():
    a = jnp.array([[0.0, 0.0, 2.0, 2.0], [-1.0, -1.0, -1.0, -1.0]])
    b = jnp.array([[1.0, 1.0, 3.0, 3.0], [0.0, 0.0, 2.0, 2.0], [5.0, 5.0, 6.0, 6.0]])
    got = np.asarray(boxes.iou(a, b))
    np.testing.assert_allclose(got, [[1 / 7, 1.0, 0.0], [0.0, 0.0, 0.0]], rtol=1e-6)
    # Padding against padding: 0, and a finite gradient (no 0/0 anywhere).
    pad = jnp.full((1, 4), -1.0)
    assert float(boxes.iou(pad, pad)[0, 0]) == 0.0
    grad = jax.jit(jax.grad(lambda x: boxes.iou(x, pad).sum() + boxes.iou(x, b).sum()))(a)
    assert np.isfinite(np.asarray(grad)).all()


def test_encode_literal_and_decode_inverts_it():
    anchor = jnp.array([0.0, 0.0, 10.0, 20.0])  # centre (5, 10), h 10, w 20
    box = jnp.array([2.0, 4.0, 22.0, 24.0])  # centre (12, 14), h 20, w 20
    got = np.asarray(boxes.encode(box, anchor, (10.0, 10.0, 5.0, 5.0)))
    np.testing.assert_allclose(got, [10 * 0.7, 10 * 0.2, 5 * math.log(2), 0.0], atol=1e-6)
    rng = np.random.default_rng(0)
    b, a = random_boxes(rng, 20), random_boxes(rng, 20)
    w = (10.0, 10.0, 5.0, 5.0)
    np.testing.assert_allclose(boxes.decode(boxes.encode(b, a, w), a, w), b, atol=1e-4)


def test_decode_clamps_the_size_ratio():
    anchor = jnp.array([0.0, 0.0, 16.0, 16.0])
    got = np.asarray(boxes.decode(jnp.array([0.0, 0.0, 50.0, 50.0]), anchor))
    np.testing.assert_allclose(got, [8 - 500, 8 - 500, 8 + 500, 8 + 500], rtol=1e-5)


def test_clip():
    got = boxes.clip(jnp.array([[-3.0, 5.0, 40.0, 70.0]]), 32, 48)
    np.testing.assert_array_equal(got, [[0.0, 5.0, 32.0, 48.0]])


# ---- anchors ----


def test_anchor_grid_layout_and_scaling():
    spec = anchors.AnchorSpec(sizes=(64.0,), aspect_ratios=(1.0, 4.0))
    full = anchors.anchor_grid((768, 1152), 16, spec)
    assert full.shape == (48 * 72 * 2, 4)
    np.testing.assert_allclose(full[0], [8 - 32, 8 - 32, 8 + 32, 8 + 32])
    np.testing.assert_allclose(full[1], [8 - 64, 8 - 16, 8 + 64, 8 + 16])  # h/w = 4: 128 × 32
    # Next anchor position: one column right, i.e. (row 0, column 1).
    np.testing.assert_allclose(full[2], [8 - 32, 24 - 32, 8 + 32, 24 + 32])
    # Downscaled 8×: the same anchors, 8× smaller, around the cell centres of stride 8.
    small = anchors.anchor_grid((96, 144), 8, spec)
    assert small.shape == (12 * 18 * 2, 4)
    np.testing.assert_allclose(small[1], [4 - 8, 4 - 2, 4 + 8, 4 + 2])
    assert anchors.AnchorSpec().per_location == 20


# ---- nms ----


def nms_reference(b, s, threshold, classes=None):
    """The textbook greedy algorithm over a stable sort by descending score."""
    b, s = b.astype(np.float64), s.astype(np.float64)
    keep = []
    for i in np.argsort(-s, kind="stable"):
        if not np.isfinite(s[i]):
            continue
        suppressed = False
        for j in keep:
            if classes is not None and classes[i] != classes[j]:
                continue
            ih = max(0.0, min(b[i, 2], b[j, 2]) - max(b[i, 0], b[j, 0]))
            iw = max(0.0, min(b[i, 3], b[j, 3]) - max(b[i, 1], b[j, 1]))
            inter = ih * iw
            area_i = (b[i, 2] - b[i, 0]) * (b[i, 3] - b[i, 1])
            area_j = (b[j, 2] - b[j, 0]) * (b[j, 3] - b[j, 1])
            if inter / (area_i + area_j - inter) > threshold:
                suppressed = True
                break
        if not suppressed:
            keep.append(i)
    return keep


@pytest.fixture(scope="module")
def nms_fn():
    return jax.jit(nms.nms, static_argnums=(2, 3))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nms_matches_the_textbook_algorithm(nms_fn, seed):
    rng = np.random.default_rng(seed)
    b = random_boxes(rng, 200)
    s = rng.uniform(size=200).astype(np.float32)
    s[:10] = -np.inf  # taken out
    expected = nms_reference(b, s, 0.5)
    indices, valid = nms_fn(jnp.asarray(b), jnp.asarray(s), 0.5, 150)
    n = int(valid.sum())
    assert n == min(len(expected), 150)
    np.testing.assert_array_equal(np.asarray(indices)[:n], expected[:n])
    assert not valid[n:].any() and (np.asarray(indices)[n:] == 0).all()


def test_nms_runs_out_of_boxes_and_breaks_ties_by_index(nms_fn):
    b = jnp.array([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 9.0], [20.0, 20.0, 30.0, 30.0]])
    s = jnp.array([0.5, 0.5, 0.5])
    indices, valid = nms_fn(b, s, 0.5, 5)
    np.testing.assert_array_equal(indices, [0, 2, 0, 0, 0])
    np.testing.assert_array_equal(valid, [True, True, False, False, False])


def test_class_aware_nms_is_per_class_nms():
    rng = np.random.default_rng(3)
    b = random_boxes(rng, 150)
    s = rng.uniform(size=150).astype(np.float32)
    c = rng.integers(0, 3, 150).astype(np.int32)
    indices, valid = jax.jit(nms.nms, static_argnums=(2, 3))(b, s, 0.4, 400, c)
    expected = nms_reference(b, s, 0.4, c)
    assert int(valid.sum()) == len(expected)
    np.testing.assert_array_equal(np.asarray(indices)[: len(expected)], expected)


# ---- roi_align ----


def bilinear_reference(f, y, x):
    """Detectron2's ROIAlign bilinear_interpolate, scalar by scalar."""
    h, w = f.shape[:2]
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return np.zeros(f.shape[2])
    y, x = max(y, 0.0), max(x, 0.0)
    y_lo, x_lo = int(y), int(x)
    if y_lo >= h - 1:
        y_hi = y_lo = h - 1
        y = float(y_lo)
    else:
        y_hi = y_lo + 1
    if x_lo >= w - 1:
        x_hi = x_lo = w - 1
        x = float(x_lo)
    else:
        x_hi = x_lo + 1
    ly, lx = y - y_lo, x - x_lo
    hy, hx = 1 - ly, 1 - lx
    return (
        hy * hx * f[y_lo, x_lo]
        + hy * lx * f[y_lo, x_hi]
        + ly * hx * f[y_hi, x_lo]
        + ly * lx * f[y_hi, x_hi]
    )


def roi_align_reference(f, rois, scale, out, ratio):
    result = np.zeros((len(rois), out[0], out[1], f.shape[2]))
    for r, (y1, x1, y2, x2) in enumerate(rois.astype(np.float64)):
        sy, sx = y1 * scale - 0.5, x1 * scale - 0.5
        bh, bw = (y2 * scale - 0.5 - sy) / out[0], (x2 * scale - 0.5 - sx) / out[1]
        for ph in range(out[0]):
            for pw in range(out[1]):
                acc = 0.0
                for iy in range(ratio):
                    y = sy + ph * bh + (iy + 0.5) * bh / ratio
                    for ix in range(ratio):
                        x = sx + pw * bw + (ix + 0.5) * bw / ratio
                        acc = acc + bilinear_reference(f, y, x)
                result[r, ph, pw] = acc / ratio**2
    return result


def test_roi_align_matches_detectron2_loop():
    rng = np.random.default_rng(0)
    f = rng.normal(size=(6, 9, 3)).astype(np.float32)  # a stride-4 map of a 24 × 36 image
    rois = np.array(
        [
            [2.0, 3.0, 14.0, 30.0],
            [0.0, 0.0, 24.0, 36.0],  # the whole image
            [-6.0, -8.0, 5.0, 4.0],  # partly outside: samples beyond −1 read 0
            [20.0, 30.0, 27.0, 45.0],  # over the bottom-right border: clamped samples
            [10.0, 10.0, 10.0, 10.0],  # a point
        ],
        np.float32,
    )
    pool = jax.jit(roi_align.roi_align, static_argnums=(2, 3, 4))
    got = pool(jnp.asarray(f), jnp.asarray(rois), 0.25, (3, 4), 2)
    expected = roi_align_reference(f, rois, 0.25, (3, 4), 2)
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5)
    # The features get a gradient (the head trains the trunk through RoIAlign).
    g = jax.jit(jax.grad(lambda x: pool(x, jnp.asarray(rois), 0.25, (3, 4), 2).sum()))(f)
    assert np.abs(np.asarray(g)).sum() > 0


# ---- targets ----

GT_BOXES = np.full((4, 4), -1.0, np.float32)
GT_BOXES[0] = [0.0, 0.0, 10.0, 10.0]
GT_BOXES[1] = [20.0, 20.0, 40.0, 24.0]
GT_CLASSES = np.array([1, 3, -1, -1], np.int32)


def test_rpn_targets_thresholds_best_anchor_and_padding():
    a = np.array(
        [
            [0.0, 0.0, 10.0, 11.0],  # IoU 10/11 with box 0: positive
            [0.0, 0.0, 10.0, 20.0],  # 0.5: ignored
            [50.0, 50.0, 60.0, 60.0],  # overlaps nothing: negative
            [20.0, 20.0, 40.0, 30.0],  # best for box 1 (IoU 0.4): positive by the low-quality rule
            [20.0, 18.0, 40.0, 28.0],  # 0.4 too: a tie, positive as well
            [-1.0, -1.0, -1.0, -1.0],  # like the padding rows, which must not make it positive
            [20.0, 20.0, 40.0, 32.0],  # 1/3 with box 1, not its best: ignored
        ],
        np.float32,
    )
    t = jax.jit(functools.partial(roi_sampling.rpn_targets, batch_per_image=16))(
        a, GT_BOXES, GT_CLASSES
    )
    np.testing.assert_array_equal(t["labels"], [1, 0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(t["sampled"], [1, 0, 1, 1, 1, 1, 0])
    np.testing.assert_allclose(t["box_targets"][0], [0.0, -0.5 / 11, 0.0, math.log(10 / 11)], 1e-5)


def test_rpn_targets_sampling_caps_and_determinism():
    # 64-px square anchors every 4 px of a 96 × 144 image, three 64-px boxes: ~40 positives.
    a = anchors.anchor_grid((96, 144), 4, anchors.AnchorSpec(sizes=(512.0,), aspect_ratios=(1.0,)))
    gt = np.full((15, 4), -1.0, np.float32)
    gt[:3] = [[0.0, 0.0, 64.0, 64.0], [32.0, 40.0, 96.0, 104.0], [16.0, 80.0, 80.0, 144.0]]
    cls = np.array([0, 2, 3] + [-1] * 12, np.int32)
    fn = jax.jit(lambda g, key=None: roi_sampling.rpn_targets(a, g, cls, key, batch_per_image=32))
    t = fn(gt)
    pos = np.asarray(t["labels"]) == 1
    sampled = np.asarray(t["sampled"])
    # Enough positives and negatives here: exactly 16 positives and 16 negatives sampled.
    full = jax.jit(functools.partial(roi_sampling.rpn_targets, batch_per_image=10**6))(a, gt, cls)
    assert np.asarray(full["labels"]).sum() > 16
    assert pos.sum() == 16 and sampled.sum() == 32
    assert (np.asarray(full["labels"])[pos] == 1).all()  # sampled from the true positives
    # The sample is keyed (per seed, member, step, example): the same key, the same sample;
    # another key (the next step), another subset of positives and of negatives.
    key, other = np.array([7, 1], np.uint32), np.array([7, 2], np.uint32)
    keyed = np.asarray(fn(gt, key)["sampled"])
    np.testing.assert_array_equal(np.asarray(fn(gt, key)["sampled"]), keyed)
    assert keyed.sum() == 32 and (np.asarray(fn(gt, key)["labels"]) == 1).sum() == 16
    again = np.asarray(fn(gt, other)["sampled"])
    assert (again & pos != keyed & pos).any() and (again & ~pos != keyed & ~pos).any()


def test_priorities_are_distinct_and_keyed():
    n = 5000
    p = np.asarray(roi_sampling.priorities(n, np.array([3, 9], np.uint32)))
    assert len(np.unique(p)) == n and p.min() >= 0 and p.max() < 2**30
    np.testing.assert_array_equal(roi_sampling.priorities(n, np.array([3, 9], np.uint32)), p)
    for key, stream in (([3, 10], 0), ([4, 9], 0), ([3, 9], 1)):
        q = np.asarray(roi_sampling.priorities(n, np.array(key, np.uint32), stream))
        # Another key or stream: an unrelated order (the top 100 barely overlap).
        assert len(np.intersect1d(np.argsort(p)[-100:], np.argsort(q)[-100:])) < 20


def test_targets_of_an_image_without_boxes():
    a = anchors.anchor_grid((32, 48), 8)
    gt = np.full((15, 4), -1.0, np.float32)
    cls = np.full(15, -1, np.int32)
    t = jax.jit(functools.partial(roi_sampling.rpn_targets, batch_per_image=64))(a, gt, cls)
    assert np.asarray(t["labels"]).sum() == 0 and np.asarray(t["sampled"]).sum() == 64
    assert np.isfinite(np.asarray(t["box_targets"])).all()
    proposals = np.array([[0.0, 0.0, 8.0, 8.0], [4.0, 4.0, 20.0, 30.0], [0.0] * 4], np.float32)
    roi = functools.partial(roi_sampling.roi_targets, num_classes=4, batch_per_image=8)
    t = jax.jit(roi)(proposals, gt, cls)
    np.testing.assert_array_equal(t["labels"], [4, 4, -1, -1, -1, -1, -1, -1])
    assert np.isfinite(np.asarray(t["box_targets"])).all()


def test_roi_targets_sampling():
    proposals = np.array(
        [
            [0.0, 0.0, 10.0, 12.0],  # IoU 10/12 with box 0 (class 1): foreground
            [20.0, 20.0, 40.0, 26.0],  # 4/6 with box 1 (class 3): foreground
            [50.0, 50.0, 60.0, 60.0],  # background
            [0.0, 0.0, 0.0, 0.0],  # an unused proposal slot: never sampled
            [0.0, 0.0, 10.0, 30.0],  # 1/3: background
        ],
        np.float32,
    )
    sample = jax.jit(
        functools.partial(roi_sampling.roi_targets, num_classes=4, batch_per_image=12),
        static_argnames="foreground_fraction",
    )
    t = sample(proposals, GT_BOXES, GT_CLASSES, foreground_fraction=0.5)
    labels = np.asarray(t["labels"])
    rois = np.asarray(t["rois"])
    # 4 foreground (2 proposals + the 2 real GT boxes), then 2 background, then unused slots.
    assert sorted(labels[:4]) == [1, 1, 3, 3] and list(labels[4:6]) == [4, 4]
    assert (labels[6:] == -1).all() and (rois[6:] == 0).all()
    for roi, label, delta in zip(
        rois[:4], labels[:4], np.asarray(t["box_targets"][:4]), strict=True
    ):
        gt = GT_BOXES[0] if label == 1 else GT_BOXES[1]
        np.testing.assert_allclose(boxes.decode(delta, roi, (10.0, 10.0, 5.0, 5.0)), gt, atol=1e-4)
    # At most 25 %: 3 of 12 foreground, which 3 depending on the key.
    t = sample(proposals, GT_BOXES, GT_CLASSES, foreground_fraction=0.25)
    labels = np.asarray(t["labels"])
    assert ((labels >= 0) & (labels < 4)).sum() == 3 and (labels == 4).sum() == 2
    picks = {
        tuple(map(tuple, np.asarray(sample(proposals, GT_BOXES, GT_CLASSES, key)["rois"][:3])))
        for key in np.arange(16, dtype=np.uint32).reshape(8, 2)
    }
    assert len(picks) > 1


# ---- losses ----


def test_detection_loss_literal():
    outputs = {
        "rpn_logits": jnp.array([[0.0, 2.0, -1.0]]),
        "rpn_deltas": jnp.array([[[0.5, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0] * 4]]),
        "rpn_labels": jnp.array([[1.0, 0.0, 0.0]]),
        "rpn_weights": jnp.array([[0.5, 0.5, 0.0]]),  # 2 sampled, 2 per image
        "rpn_box_targets": jnp.zeros((1, 3, 4)),
        "head_logits": jnp.array([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [5.0, 5.0, 5.0]]]),
        "head_deltas": jnp.array(
            [[[[1.0, 0, 0, 0], [2.0, 0, 0, 0]], [[3.0, 0, 0, 0]] * 2, [[0.0] * 4] * 2]]
        ),
        "head_labels": jnp.array([[1, 2, -1]]),  # class 1 (fg), background, unused
        "head_box_targets": jnp.zeros((1, 3, 4)),
    }
    loss, m = jax.jit(detection_loss)(outputs)
    sp = lambda x: math.log1p(math.exp(x))  # noqa: E731
    rpn_cls = 0.5 * sp(-0.0) + 0.5 * sp(2.0)
    # Normalised by the RoI slots (3, the unused one included), not by the 2 sampled RoIs.
    head_cls = (math.log(3) + (math.log(math.e + 2) - 0.0)) / 3
    expected = {
        "rpn_cls": rpn_cls,
        "rpn_box": 0.5 * 0.5,
        "head_cls": head_cls,
        "head_box": 2.0 / 3,
        "fg_fraction": 0.5,
        "head_accuracy": 0.0,
    }
    for name, value in expected.items():
        assert float(m[name]) == pytest.approx(value, rel=1e-5), name
    assert float(loss) == pytest.approx(rpn_cls + 0.25 + head_cls + 2.0 / 3, rel=1e-5)
