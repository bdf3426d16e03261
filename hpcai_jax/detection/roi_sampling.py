"""Training targets of the two stages, assigned and sampled with static shapes.

Assignment follows Detectron2, and so does the fresh sample every step, but drawn from the
example's `sample_key` so that a step stays a pure function of (state, batch). The rules and the
keyed draw: `docs/detection.md`, The detector.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from hpcai_jax.detection.boxes import area, encode, iou

_PRIORITY_BITS = 30  # priorities < 2^30: the RoI ordering key 2^30 + p still fits in int32
_MASK = np.uint32((1 << _PRIORITY_BITS) - 1)
_ODD = (0x7FEB352D, 0x846CA68B, 0x2C1B3C6D)  # odd multipliers: invertible modulo 2^30
RPN_STREAM, ROI_STREAM = 0, 1


def priorities(n: int, key=None, stream: int = RPN_STREAM) -> jax.Array:
    """[n] distinct int32 in [0, 2^30): slot i's priority under `key` (uint32 [2]; None: the
    zero key) and `stream`. Each round is invertible modulo 2^30 (adding a key word, xor with
    a right shift of itself, multiplying by an odd number), so distinct slots never tie."""
    assert n <= 1 << _PRIORITY_BITS, n
    key = jnp.zeros(2, jnp.uint32) if key is None else jnp.asarray(key, jnp.uint32)
    words = (key[0], key[1] ^ np.uint32(0x9E3779B9 * (stream + 1) & 0xFFFFFFFF), key[0] ^ key[1])
    x = jnp.arange(n, dtype=jnp.uint32)
    for word, odd in zip(words, _ODD, strict=True):
        x = (x + word) & _MASK
        x = x ^ (x >> 15)
        x = (x * np.uint32(odd)) & _MASK
        x = x ^ (x >> 13)
    return x.astype(jnp.int32)


def _take_highest(mask, priority, count, max_count: int):
    """mask & among the `count` (≤ max_count, static) members of mask of highest priority."""
    k = min(max_count, mask.shape[0])
    top = jax.lax.top_k(jnp.where(mask, priority, -1), k)[0]
    threshold = jnp.where(count > 0, top[jnp.clip(count - 1, 0, k - 1)], jnp.iinfo(jnp.int32).max)
    return mask & (priority >= threshold)


def _match(candidates, gt_boxes, gt_classes):
    """IoU of each candidate with each real ground-truth box (padding columns -1)."""
    ious = iou(candidates, gt_boxes)
    return jnp.where((gt_classes >= 0)[None, :], ious, -1.0)


@jax.named_scope("box_targets")  # its FLOPs are totalled apart (flops.analytic.SCOPES)
def rpn_targets(
    anchors,
    gt_boxes,
    gt_classes,
    key=None,
    *,
    batch_per_image: int = 256,
    positive_fraction: float = 0.5,
    positive_iou: float = 0.7,
    negative_iou: float = 0.3,
):
    """One image's RPN targets.

    Args:
        anchors: [A, 4] (numpy or jax).
        gt_boxes: [G, 4]; gt_classes: [G] int, -1 for padding.
        key: the example's sample_key, uint32 [2] (None: the zero key).

    Returns:
        dict of labels [A] float (1 positive, 0 otherwise), sampled [A] bool (in the loss),
        box_targets [A, 4] (encoded with weights 1, meaningful where labels is 1).
    """
    anchors = jnp.asarray(anchors, jnp.float32)
    ious = _match(anchors, gt_boxes, gt_classes)  # [A, G]
    best = jnp.max(ious, axis=1)
    matched = jnp.argmax(ious, axis=1)
    # Each real box's best anchors (ties included, as Detectron2's low-quality matches) are
    # positive, unless the box overlaps no anchor at all.
    best_per_gt = jnp.max(ious, axis=0)
    is_best = (ious == best_per_gt[None, :]) & (best_per_gt[None, :] > 0)
    positive = (best >= positive_iou) | jnp.any(is_best, axis=1)
    negative = (best < negative_iou) & ~positive
    max_positive = int(batch_per_image * positive_fraction)
    num_pos = jnp.minimum(jnp.sum(positive), max_positive)
    num_neg = jnp.minimum(jnp.sum(negative), batch_per_image - num_pos)
    priority = priorities(anchors.shape[0], key, RPN_STREAM)
    positive = _take_highest(positive, priority, num_pos, max_positive)
    negative = _take_highest(negative, priority, num_neg, batch_per_image)
    return {
        "labels": positive.astype(jnp.float32),
        "sampled": positive | negative,
        "box_targets": encode(gt_boxes[matched], anchors),
    }


@jax.named_scope("box_targets")  # its FLOPs are totalled apart (flops.analytic.SCOPES)
def roi_targets(
    proposals,
    gt_boxes,
    gt_classes,
    key=None,
    *,
    num_classes: int,
    batch_per_image: int = 512,
    foreground_fraction: float = 0.25,
    foreground_iou: float = 0.5,
    box_weights=(10.0, 10.0, 5.0, 5.0),
):
    """One image's sampled RoIs and their head targets.

    Args:
        proposals: [P, 4], zero-area rows unused; gt_boxes: [G, 4]; gt_classes: [G], -1 padding.
        key: the example's sample_key, uint32 [2] (None: the zero key).

    Returns:
        dict of rois [S, 4] (S = batch_per_image; foreground first), labels [S] int32 (the
        class 0..C-1, C for background, -1 for an unused slot) and box_targets [S, 4] (encoded
        with box_weights, meaningful for foreground).
    """
    gt_boxes = gt_boxes.astype(jnp.float32)
    candidates = jnp.concatenate([jax.lax.stop_gradient(proposals), gt_boxes])
    usable = jnp.concatenate([area(proposals) > 0, gt_classes >= 0])
    ious = _match(candidates, gt_boxes, gt_classes)
    best = jnp.max(ious, axis=1)
    matched = jnp.argmax(ious, axis=1)
    foreground = usable & (best >= foreground_iou)
    background = usable & (best < foreground_iou)
    n = candidates.shape[0]
    max_fg = int(batch_per_image * foreground_fraction)
    num_fg = jnp.minimum(jnp.sum(foreground), max_fg)
    num_bg = jnp.minimum(jnp.sum(background), batch_per_image - num_fg)
    priority = priorities(n, key, ROI_STREAM)
    foreground = _take_highest(foreground, priority, num_fg, max_fg)
    background = _take_highest(background, priority, num_bg, batch_per_image)
    # Foreground, then background, each by priority; unsampled candidates sort last (key -1).
    top = jnp.int32(1 << _PRIORITY_BITS)
    order = jnp.where(foreground, top + priority, jnp.where(background, priority, -1))
    k = min(batch_per_image, n)
    keys, index = jax.lax.top_k(order, k)
    taken = keys >= 0
    gt_index = matched[index]
    labels = jnp.where(foreground[index], gt_classes[gt_index], num_classes)
    out = {
        "rois": jnp.where(taken[:, None], candidates[index], 0.0),
        "labels": jnp.where(taken, labels, -1).astype(jnp.int32),
        "box_targets": encode(gt_boxes[gt_index], candidates[index], box_weights),
    }
    pad = batch_per_image - k
    if pad:  # fewer candidates than slots: the rest are unused
        fill = {"rois": 0.0, "labels": -1, "box_targets": 0.0}
        out = {
            name: jnp.pad(v, [(0, pad)] + [(0, 0)] * (v.ndim - 1), constant_values=fill[name])
            for name, v in out.items()
        }
    return out
