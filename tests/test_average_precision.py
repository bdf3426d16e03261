"""Detection mAP from on-device counts, checked against pycocotools and hand-computed figures."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from hpcai_jax.axes import DATA, ENSEMBLE
from hpcai_jax.detection.average_precision import (
    COCO_IOU_THRESHOLDS,
    LOGIT_RANGE,
    RECALL_THRESHOLDS,
    average_precision,
    counts_size,
    match_counts,
    score_bin,
)
from hpcai_jax.detection.coco import coco_map

pytest.importorskip("pycocotools")

C = 4  # TD, TC, ETC, AR
BINS = 1024
T = len(COCO_IOU_THRESHOLDS)
ROWS, K, G = 16, 24, 6


@pytest.fixture(scope="module")
def counts_fn():
    """One jitted match_counts for every test (each shape compiles once)."""
    return jax.jit(match_counts, static_argnames=("num_classes", "score_bins"))


def _random_case(seed, distinct, rows=ROWS):
    """Images with 0..G GT boxes of classes 0-2 (class 3 never has GT) and up to K detections,
    most jittered from a GT box so that their IoUs straddle the thresholds; the last two rows are
    padding (weight 0) with content of their own. Scores in distinct bins, or continuous."""
    rng = np.random.default_rng(seed)
    gt_boxes = np.zeros((rows, G, 4), np.float32)
    gt_classes = np.full((rows, G), -1, np.int32)
    det_boxes = np.zeros((rows, K, 4), np.float32)
    det_classes = np.full((rows, K), -1, np.int32)
    for i in range(rows):
        ng = 0 if i % 5 == 0 else rng.integers(1, G + 1)
        corner = rng.uniform(0, 200, (ng, 2))
        size = rng.uniform(8, 60, (ng, 2))
        gt_boxes[i, :ng] = np.concatenate([corner, corner + size], -1)
        gt_classes[i, :ng] = rng.integers(0, 3, ng)
        nd = rng.integers(0, K + 1)
        for k in rng.permutation(K)[:nd]:
            if ng and rng.random() < 0.75:
                j = rng.integers(ng)
                box = gt_boxes[i, j] + rng.normal(0, 0.12, 4) * np.tile(size[j], 2)
                det_boxes[i, k] = box
                det_classes[i, k] = gt_classes[i, j] if rng.random() < 0.85 else rng.integers(C)
            else:
                corner = rng.uniform(0, 200, 2)
                det_boxes[i, k] = np.concatenate([corner, corner + rng.uniform(8, 60, 2)])
                det_classes[i, k] = rng.integers(C)
    if distinct:
        # Bin centres in logit space, away from the float32-crowded ends, one bin each.
        bins = rng.permutation(np.arange(BINS // 4, 3 * BINS // 4))[: rows * K].reshape(rows, K)
        logit = -LOGIT_RANGE + (bins + 0.5) * (2 * LOGIT_RANGE / BINS)
        scores = (1 / (1 + np.exp(-logit))).astype(np.float32)
        assert len(np.unique(np.asarray(score_bin(scores, BINS)))) == rows * K
    else:
        # Many scores saturated near 1, so that coarse bins hold both TPs and FPs.
        scores = (1 / (1 + np.exp(-rng.normal(4, 4, (rows, K))))).astype(np.float32)
    weight = np.ones(rows, np.float32)
    weight[-2:] = 0
    return (det_boxes, scores, det_classes, gt_boxes, gt_classes, weight)


def _reference(case):
    det_boxes, scores, det_classes, gt_boxes, gt_classes, weight = case
    keep = weight > 0
    return coco_map(
        (det_boxes[keep], scores[keep], det_classes[keep]), (gt_boxes[keep], gt_classes[keep]), C
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_equals_pycocotools_when_scores_fall_in_distinct_bins(counts_fn, seed):
    case = _random_case(seed, distinct=True)
    quality = average_precision(np.asarray(counts_fn(*case, num_classes=C, score_bins=BINS)), C)
    map50, map50_95 = _reference(case)
    assert 0.05 < map50 < 0.95  # a case that exercises both matches and misses
    assert quality.map50 == pytest.approx(map50, abs=1e-6)
    assert quality.map50_95 == pytest.approx(map50_95, abs=1e-6)
    assert quality.ap50_per_class[3] is None and quality.gt_per_class[3] == 0
    keep = case[5] > 0
    expected_gt = [int(np.sum(case[4][keep] == c)) for c in range(C)]
    assert list(quality.gt_per_class) == expected_gt
    assert quality.detections == int(np.sum(case[2][keep] >= 0))
    assert quality.map50_bound == 0.0 and quality.map50_95_bound == 0.0


def test_merged_bins_stay_within_the_reported_bound(counts_fn):
    bins = 32
    gaps = []
    for seed in range(3):
        case = _random_case(10 + seed, distinct=False)
        counts = np.asarray(counts_fn(*case, num_classes=C, score_bins=bins))
        quality = average_precision(counts, C, bins)
        map50, map50_95 = _reference(case)
        for binned, exact, bound in [
            (quality.map50, map50, quality.map50_bound),
            (quality.map50_95, map50_95, quality.map50_95_bound),
        ]:
            assert -1e-9 <= exact - binned <= bound + 1e-9
            gaps.append(exact - binned)
    assert max(gaps) > 1e-3  # the bins did merge true and false positives


def test_bound_of_one_merged_bin_by_hand():
    # One GT; one bin holds a TP and an FP. In score order TP-FP gives AP 1, FP-TP 0.5; the
    # merged point (recall 1, precision 0.5) gives 0.5 and a bound of 1 - 0.5.
    bins = 8
    counts = np.zeros(counts_size(1, bins))
    counts[5 : bins * T : bins] = 1  # tp, bin 5, every threshold
    counts[bins * T + 5 : 2 * bins * T : bins] = 1  # fp, same bin
    counts[-1] = 1
    quality = average_precision(counts, 1, bins)
    assert quality.map50 == pytest.approx(0.5)
    assert quality.map50_bound == pytest.approx(0.5)


def _one_image(dets, gts, k=4, g=3):
    """Hand case: dets [(box, score, class)], gts [(box, class)] in one image, padded."""
    det_boxes = np.zeros((1, k, 4), np.float32)
    scores = np.zeros((1, k), np.float32)
    det_classes = np.full((1, k), -1, np.int32)
    for i, (box, score, cls) in enumerate(dets):
        det_boxes[0, i], scores[0, i], det_classes[0, i] = box, score, cls
    gt_boxes = np.zeros((1, g, 4), np.float32)
    gt_classes = np.full((1, g), -1, np.int32)
    for i, (box, cls) in enumerate(gts):
        gt_boxes[0, i], gt_classes[0, i] = box, cls
    return det_boxes, scores, det_classes, gt_boxes, gt_classes, np.ones(1, np.float32)


A, B = [0, 0, 10, 10], [20, 20, 40, 30]


def _quality(counts_fn, case):
    return average_precision(np.asarray(counts_fn(*case, num_classes=C, score_bins=BINS)), C)


def test_perfect_detections_score_one(counts_fn):
    quality = _quality(counts_fn, _one_image([(A, 0.9, 0), (B, 0.8, 2)], [(A, 0), (B, 2)]))
    assert quality.map50 == pytest.approx(1.0) and quality.map50_95 == pytest.approx(1.0)
    assert quality.ap50_per_class[1] is None and quality.ap50_per_class[3] is None


def test_no_detections_score_zero(counts_fn):
    quality = _quality(counts_fn, _one_image([], [(A, 0), (B, 1)]))
    assert quality.map50 == 0.0 and quality.map50_95 == 0.0 and quality.detections == 0


def test_duplicate_detection_is_a_false_positive(counts_fn):
    # Points (recall, precision): (1/2, 1), (1/2, 1/2) for the duplicate, (1, 2/3).
    case = _one_image([(A, 0.9, 0), (A, 0.8, 0), (B, 0.7, 0)], [(A, 0), (B, 0)])
    quality = _quality(counts_fn, case)
    assert quality.map50 == pytest.approx((51 + 50 * 2 / 3) / 101, abs=1e-9)
    assert quality.map50 == pytest.approx(coco_map(case[:3], case[3:5], C)[0], abs=1e-12)


def test_wrong_class_does_not_match(counts_fn):
    case = _one_image([(A, 0.9, 1)], [(A, 0)])
    quality = _quality(counts_fn, case)
    assert quality.ap50_per_class == (0.0, None, None, None)
    assert quality.map50 == 0.0 and coco_map(case[:3], case[3:5], C) == (0.0, 0.0)


def test_iou_between_050_and_055_counts_at_050_only(counts_fn):
    case = _one_image([([0, 0, 10, 5.25], 0.9, 0)], [(A, 0)])  # IoU 52.5 / 100
    counts = np.asarray(counts_fn(*case, num_classes=C, score_bins=BINS))
    tp = counts[: C * T * BINS].reshape(C, T, BINS).sum(-1)
    np.testing.assert_array_equal(tp[0], [1] + [0] * (T - 1))
    quality = average_precision(counts, C)
    assert quality.map50 == pytest.approx(1.0) and quality.map50_95 == pytest.approx(0.1)


def test_only_the_best_100_per_image_and_class_count(counts_fn):
    # 100 far-off detections outscore 10 exact ones: COCO's maxDets drops the exact ones.
    far = [([100 + i, 100, 110 + i, 110], 0.9 - 0.001 * i, 0) for i in range(100)]
    exact = [([20 * i, 0, 20 * i + 10, 10], 0.5 - 0.01 * i, 0) for i in range(10)]
    gts = [([20 * i, 0, 20 * i + 10, 10], 0) for i in range(10)]
    case = _one_image(far + exact, gts, k=110, g=10)
    quality = _quality(counts_fn, case)
    assert quality.map50 == 0.0 and quality.detections == 100
    assert coco_map(case[:3], case[3:5], C)[0] == 0.0
    exact_first = [(box, 0.99 - 0.001 * i, cls) for i, (box, _, cls) in enumerate(exact)]
    assert _quality(counts_fn, _one_image(far + exact_first, gts, k=110, g=10)).map50 == 1.0


def test_counts_add_up_and_padding_rows_count_nothing(counts_fn):
    case = _random_case(3, distinct=True)
    whole = np.asarray(counts_fn(*case, num_classes=C, score_bins=BINS))
    halves = [
        np.asarray(counts_fn(*(a[s] for a in case), num_classes=C, score_bins=BINS))
        for s in (slice(0, ROWS // 2), slice(ROWS // 2, None))
    ]
    np.testing.assert_array_equal(halves[0] + halves[1], whole)
    # Padding rows (weight 0) with other content: the same counts.
    other = _random_case(4, distinct=True)
    mixed = tuple(np.concatenate([a[:-2], b[-2:]]) for a, b in zip(case, other, strict=True))
    np.testing.assert_array_equal(
        np.asarray(counts_fn(*mixed, num_classes=C, score_bins=BINS)), whole
    )
    assert whole[-C:].sum() == np.sum(case[4][:-2] >= 0)


def test_jit_and_shard_map_agree(counts_fn):
    case = _random_case(5, distinct=True)
    eager = np.asarray(match_counts(*case, num_classes=C, score_bins=BINS))
    jitted = np.asarray(counts_fn(*case, num_classes=C, score_bins=BINS))
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), (ENSEMBLE, DATA))
    rows = P((ENSEMBLE, DATA))

    def local(*args):
        counts = match_counts(*args, num_classes=C, score_bins=BINS)
        return jax.lax.psum(counts, (ENSEMBLE, DATA))

    sharded = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(rows,) * 6, out_specs=P()))
    np.testing.assert_array_equal(jitted, eager)
    np.testing.assert_array_equal(np.asarray(sharded(*case)), jitted)
    assert jitted.shape == (counts_size(C, BINS),) and jitted.dtype == np.float32


def test_constants_are_cocos():
    from pycocotools.cocoeval import Params

    params = Params("bbox")
    np.testing.assert_array_equal(COCO_IOU_THRESHOLDS, params.iouThrs)
    np.testing.assert_array_equal(RECALL_THRESHOLDS, params.recThrs)
