"""COCO-style detection mAP as additive counts: matched on the device, integrated on the host.

Histograms of true and false positives by score add up over batches, devices and processes, so
multi-host evaluation is one `psum` and no prediction is ever gathered. The matching, the logit
binning and the bound it reports: `docs/detection.md`, Quality.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from hpcai_jax.detection.boxes import iou

# pycocotools' Params.setDetParams: linspace, not arange, so that 0.5 and 0.75 are exact.
COCO_IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
RECALL_THRESHOLDS = np.linspace(0.0, 1.0, 101)
MAX_DETECTIONS = 100  # COCO's maxDets for stats[0] and stats[1], per image and class
_EPS = np.spacing(1)  # COCOeval.accumulate's guard in tp / (tp + fp + eps)
# The largest float32 below 1 has logit 16.6: the range spans every score a float32 can tell
# from 1, and below sigmoid(-16) ≈ 1e-7 nothing is worth telling apart.
LOGIT_RANGE = 16.0


def counts_size(num_classes: int, score_bins: int = 1024) -> int:
    """Length of `match_counts`' vector: tp and fp [C, T, bins], then n_gt [C]."""
    return num_classes * (2 * len(COCO_IOU_THRESHOLDS) * score_bins + 1)


def score_bin(scores, score_bins: int):
    """Bin of each score in [0, 1]: uniform in logit(score) over ±LOGIT_RANGE, ends open.

    Not uniform in the score: see the module docstring.
    """
    s = jnp.clip(scores.astype(jnp.float32), 0.0, 1.0)
    logit = jnp.clip(jnp.log(s) - jnp.log1p(-s), -LOGIT_RANGE, LOGIT_RANGE)  # ±inf at 0 and 1
    unit = (logit + LOGIT_RANGE) / (2 * LOGIT_RANGE)
    return jnp.clip(jnp.floor(unit * score_bins), 0, score_bins - 1).astype(jnp.int32)


def _known(classes, num_classes):
    """int32 classes, -1 for padding and anything outside [0, num_classes)."""
    classes = classes.astype(jnp.int32)
    return jnp.where((classes >= 0) & (classes < num_classes), classes, -1)


def _greedy_match(ious, det_classes, gt_classes, thresholds):
    """TP flags [e, K, T] of detections sorted by descending score, COCO's greedy rule.

    Each detection takes, per threshold, the still-unmatched GT of its class with the highest
    IoU ≥ t; equal IoUs go to the later GT, as `evaluateImg`'s `<` comparison does.
    """
    g = ious.shape[-1]
    same = det_classes[..., None] == gt_classes[:, None, :]  # [e, K, G]; -1 matches nothing
    ious = jnp.where(same & (gt_classes[:, None, :] >= 0), ious, -1.0)
    reverse = jnp.arange(g - 1, -1, -1)

    def step(matched, iou_k):  # matched [e, T, G], iou_k [e, G]
        eligible = (iou_k[:, None, :] >= thresholds[:, None]) & ~matched
        best = jnp.where(eligible, iou_k[:, None, :], -1.0)
        # argmax takes the first maximum; over the reversed GT axis that is the last one.
        pick = reverse[jnp.argmax(best[..., ::-1], axis=-1)]  # [e, T]
        hit = jnp.any(eligible, axis=-1)
        matched = matched | (hit[..., None] & (jnp.arange(g) == pick[..., None]))
        return matched, hit

    # zeros_like, not zeros: under shard_map the carry must vary over the mesh as ious do.
    unmatched = jnp.zeros_like(ious[:, :1, :], bool)
    matched = jnp.broadcast_to(unmatched, (ious.shape[0], len(thresholds), g))
    _, tp = lax.scan(step, matched, jnp.moveaxis(ious, 1, 0))
    return jnp.moveaxis(tp, 0, 1)


def match_counts(
    det_boxes,
    det_scores,
    det_classes,
    gt_boxes,
    gt_classes,
    weight,
    num_classes: int,
    score_bins: int = 1024,
) -> jax.Array:
    """Additive detection counts of a batch of e images; jittable, per-row work summed over e.

    Args:
        det_boxes: [e, K, 4] ymin, xmin, ymax, xmax.
        det_scores: [e, K] in [0, 1].
        det_classes: [e, K] int32; -1 (or any class outside [0, num_classes)) is no detection.
        gt_boxes: [e, G, 4].
        gt_classes: [e, G] int32; -1 is padding.
        weight: [e] float32; rows of weight 0 (padding, unscored) contribute nothing.
        num_classes: C.
        score_bins: histogram bins over the score (see `score_bin`).

    Returns:
        float32 [counts_size(C, score_bins)]: tp [C, T, bins], fp [C, T, bins] (T = the 10 COCO
        IoU thresholds), n_gt [C], each flattened and concatenated.
    """
    thresholds = jnp.asarray(COCO_IOU_THRESHOLDS, jnp.float32)
    det_classes = _known(det_classes, num_classes)
    gt_classes = _known(gt_classes, num_classes)

    # evaluateImg's order: descending score, stable, so equal scores keep their input order.
    order = jnp.argsort(-det_scores, axis=-1, stable=True)
    scores = jnp.take_along_axis(det_scores, order, axis=-1).astype(jnp.float32)
    classes = jnp.take_along_axis(det_classes, order, axis=-1)
    boxes = jnp.take_along_axis(det_boxes, order[..., None], axis=1).astype(jnp.float32)

    tp = _greedy_match(iou(boxes, gt_boxes.astype(jnp.float32)), classes, gt_classes, thresholds)

    # evaluateImg keeps only each image's and class's 100 best. The rest were matched above,
    # but after (in score order) every detection that counts, so they changed no count.
    one_hot = classes[..., None] == jnp.arange(num_classes)  # [e, K, C]
    rank = jnp.sum(jnp.cumsum(one_hot, axis=1) * one_hot, axis=-1) - 1
    live = (classes >= 0) & (rank < MAX_DETECTIONS)
    w = jnp.where(live, weight.astype(jnp.float32)[:, None], 0.0)  # [e, K]
    tp = tp.astype(jnp.float32) * w[..., None]  # [e, K, T]
    fp = w[..., None] - tp

    index = jnp.maximum(classes, 0) * score_bins + score_bin(scores, score_bins)  # [e, K]
    t = len(COCO_IOU_THRESHOLDS)
    histogram = jnp.zeros((2, num_classes * score_bins, t), jnp.float32)
    histogram = histogram.at[:, index.reshape(-1)].add(
        jnp.stack([tp.reshape(-1, t), fp.reshape(-1, t)])
    )
    histogram = histogram.reshape(2, num_classes, score_bins, t).transpose(0, 1, 3, 2)

    gt_one_hot = gt_classes[..., None] == jnp.arange(num_classes)  # [e, G, C]
    n_gt = jnp.einsum("egc,e->c", gt_one_hot.astype(jnp.float32), weight.astype(jnp.float32))
    return jnp.concatenate([histogram.reshape(-1), n_gt])


@dataclasses.dataclass(frozen=True)
class DetectionQuality:
    """mAP from summed counts; None where no class has a ground-truth box.

    The exact (per-detection) value lies in [map50, map50 + map50_bound], and likewise for
    map50_95; the bounds are 0 when no score bin holds both a true and a false positive.
    """

    map50: float | None  # COCO stats[1]: mAP at IoU 0.5
    map50_95: float | None  # COCO stats[0]: mAP averaged over IoU 0.50:0.05:0.95
    ap50_per_class: tuple[float | None, ...]  # None: no ground truth of that class (COCO's -1)
    gt_per_class: tuple[int, ...]
    detections: int  # detections scored (at most 100 per image and class)
    map50_bound: float | None
    map50_95_bound: float | None


def _curve_ap(tp, fp, n_gt):
    """AP [T] and its binning bound [T] from one class's histograms [T, bins] (host, float64).

    `COCOeval.accumulate` on one point per non-empty bin, highest scores first: precision
    envelope, then precision at the first point reaching each of the 101 recall thresholds.
    """
    aps, bounds = [], []
    for tp_t, fp_t in zip(tp, fp, strict=True):
        occupied = ((tp_t + fp_t) > 0)[::-1]
        if not occupied.any():  # nothing detected: precision 0 at every recall threshold
            aps.append(0.0)
            bounds.append(0.0)
            continue
        tp_here, fp_here = tp_t[::-1][occupied], fp_t[::-1][occupied]
        tp_sum, fp_sum = np.cumsum(tp_here), np.cumsum(fp_here)
        recall = tp_sum / n_gt
        precision = tp_sum / (tp_sum + fp_sum + _EPS)
        envelope = np.maximum.accumulate(precision[::-1])[::-1]
        inds = np.searchsorted(recall, RECALL_THRESHOLDS, side="left")
        # accumulate's try/except: thresholds beyond the last recall keep precision 0.
        q = np.where(inds < len(envelope), envelope[np.minimum(inds, len(envelope) - 1)], 0.0)
        aps.append(float(np.mean(q)))
        # A bin's detections in any order reach at best precision tp_k / (tp_k + fp_{k-1}) (its
        # true positives first) at a recall no higher than the bin's end point. Only a bin with
        # both kinds hides a point above the curve through the bin ends.
        fp_before = fp_sum - fp_here
        hidden = tp_sum / (tp_sum + fp_before + _EPS) - precision
        mixed = (tp_here > 0) & (fp_here > 0)
        bounds.append(float(np.max(hidden[mixed], initial=0.0)))
    return aps, bounds


def average_precision(counts, num_classes: int, score_bins: int = 1024) -> DetectionQuality:
    """COCO mAP@0.5 and mAP@[.5:.95] from `match_counts` vectors summed over the data set."""
    counts = np.asarray(counts, np.float64)
    if counts.shape != (counts_size(num_classes, score_bins),):
        raise ValueError(
            f"counts has shape {counts.shape}, expected ({counts_size(num_classes, score_bins)},)"
        )
    t = len(COCO_IOU_THRESHOLDS)
    half = num_classes * t * score_bins
    tp = counts[:half].reshape(num_classes, t, score_bins)
    fp = counts[half : 2 * half].reshape(num_classes, t, score_bins)
    n_gt = np.rint(counts[2 * half :]).astype(int)

    per_class = [
        _curve_ap(tp[c], fp[c], n_gt[c]) if n_gt[c] > 0 else None for c in range(num_classes)
    ]
    present = [pc for pc in per_class if pc is not None]
    aps = np.array([pc[0] for pc in present]).reshape(-1, t)
    bounds = np.array([pc[1] for pc in present]).reshape(-1, t)
    return DetectionQuality(
        map50=float(np.mean(aps[:, 0])) if present else None,
        map50_95=float(np.mean(aps)) if present else None,
        ap50_per_class=tuple(pc[0][0] if pc is not None else None for pc in per_class),
        gt_per_class=tuple(int(n) for n in n_gt),
        detections=int(round(np.sum(tp[:, 0] + fp[:, 0]))),
        map50_bound=float(np.mean(bounds[:, 0])) if present else None,
        map50_95_bound=float(np.mean(bounds)) if present else None,
    )
