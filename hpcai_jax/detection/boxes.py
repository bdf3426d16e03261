"""Box arithmetic in the order ymin, xmin, ymax, xmax (pixels), as every detection module uses.

Widths are `xmax - xmin` (Detectron2's convention, no +1). Padding boxes (-1, -1, -1, -1) and
any box of zero area overlap nothing: their IoU is 0, never NaN.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

# Detectron2's clamp on exp(dh), exp(dw): no decoded box grows more than 1000/16 × its anchor.
SCALE_CLAMP = math.log(1000.0 / 16)


def area(boxes):
    """[..., 4] → [...]; negative extents count as 0."""
    h = jnp.maximum(boxes[..., 2] - boxes[..., 0], 0.0)
    w = jnp.maximum(boxes[..., 3] - boxes[..., 1], 0.0)
    return h * w


def iou(a, b):
    """Pairwise IoU of a [..., N, 4] and b [..., M, 4] → [..., N, M]; 0 where either is empty."""
    a, b = a[..., :, None, :], b[..., None, :, :]
    ih = jnp.maximum(jnp.minimum(a[..., 2], b[..., 2]) - jnp.maximum(a[..., 0], b[..., 0]), 0.0)
    iw = jnp.maximum(jnp.minimum(a[..., 3], b[..., 3]) - jnp.maximum(a[..., 1], b[..., 1]), 0.0)
    inter = ih * iw
    union = area(a) + area(b) - inter
    # An empty box has inter 0; the where keeps 0/0 out of the result and its gradient.
    positive = union > 0
    return jnp.where(positive, inter / jnp.where(positive, union, 1.0), 0.0)


def _centres(boxes):
    h = boxes[..., 2] - boxes[..., 0]
    w = boxes[..., 3] - boxes[..., 1]
    return boxes[..., 0] + 0.5 * h, boxes[..., 1] + 0.5 * w, h, w


def encode(boxes, anchors, weights=(1.0, 1.0, 1.0, 1.0)):
    """Regression targets (dy, dx, dh, dw) of boxes [..., 4] relative to anchors [..., 4].

    Faster R-CNN's parameterisation: centre offsets in anchor sizes, log size ratios, each times
    its weight (Detectron2: (1, 1, 1, 1) for the RPN, (10, 10, 5, 5) for the box head). Sizes are
    floored at a tiny positive value so that a padding box gives finite (masked-out) targets.
    """
    wy, wx, wh, ww = weights
    ay, ax, ah, aw = _centres(anchors)
    by, bx, bh, bw = _centres(boxes)
    ah, aw = jnp.maximum(ah, 1e-6), jnp.maximum(aw, 1e-6)
    bh, bw = jnp.maximum(bh, 1e-6), jnp.maximum(bw, 1e-6)
    return jnp.stack(
        [
            wy * (by - ay) / ah,
            wx * (bx - ax) / aw,
            wh * jnp.log(bh / ah),
            ww * jnp.log(bw / aw),
        ],
        axis=-1,
    )


def decode(deltas, anchors, weights=(1.0, 1.0, 1.0, 1.0)):
    """Inverse of `encode`: boxes [..., 4] from deltas [..., 4] and anchors [..., 4].

    dh/dw are clamped at log(1000/16) so that an untrained head cannot overflow exp.
    """
    wy, wx, wh, ww = weights
    ay, ax, ah, aw = _centres(anchors)
    dy, dx = deltas[..., 0] / wy, deltas[..., 1] / wx
    dh = jnp.minimum(deltas[..., 2] / wh, SCALE_CLAMP)
    dw = jnp.minimum(deltas[..., 3] / ww, SCALE_CLAMP)
    cy, cx = ay + dy * ah, ax + dx * aw
    h, w = ah * jnp.exp(dh), aw * jnp.exp(dw)
    return jnp.stack([cy - 0.5 * h, cx - 0.5 * w, cy + 0.5 * h, cx + 0.5 * w], axis=-1)


def clip(boxes, height, width):
    """Boxes [..., 4] clipped to the image [0, height] × [0, width]."""
    lo = jnp.zeros(4, boxes.dtype)
    hi = jnp.asarray([height, width, height, width], boxes.dtype)
    return jnp.clip(boxes, lo, hi)
