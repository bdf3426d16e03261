"""Greedy non-maximum suppression with static shapes.

One `fori_loop` iteration per output slot: take the highest-scoring box still in play, then
drop every box that overlaps it by more than the threshold (and itself). That is the textbook
algorithm (sort by score, keep a box unless a kept box overlaps it) in the same order, ties
going to the lower index as a stable sort would. The cost is max_output × N IoUs and no N × N
matrix, which suits the few hundred outputs of a proposal stage at any N.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from hpcai_jax.detection.boxes import iou


@jax.named_scope("nms")  # its FLOPs are totalled apart (flops.analytic.SCOPES)
def nms(boxes, scores, iou_threshold: float, max_output: int, classes=None):
    """Greedy NMS over boxes [N, 4] with scores [N].

    A score of -inf takes a box out (padding, below a score threshold). With `classes` [N]
    (int) boxes suppress only boxes of their own class: per-class NMS, whose survivors come out
    in one list by descending score, so the first max_output are the best max_output overall.

    Returns:
        indices [max_output] int32 into boxes, in selection order (descending score), and
        valid [max_output] bool; invalid slots (fewer survivors than max_output) hold index 0.
    """
    boxes = boxes.astype(jnp.float32)
    # NaN (a diverged member) would win every argmax and stall the loop: count it as -inf.
    scores = jnp.where(jnp.isnan(scores), -jnp.inf, scores.astype(jnp.float32))
    n = boxes.shape[0]

    def body(i, carry):
        remaining, indices, valid = carry
        j = jnp.argmax(remaining)
        ok = remaining[j] > -jnp.inf
        overlap = iou(boxes[j][None], boxes)[0] > iou_threshold
        if classes is not None:
            overlap &= classes == classes[j]
        drop = (overlap | (jnp.arange(n) == j)) & ok
        remaining = jnp.where(drop, -jnp.inf, remaining)
        # dynamic_update_slice, not a scatter: one slot per iteration.
        indices = jax.lax.dynamic_update_index_in_dim(indices, jnp.where(ok, j, 0), i, 0)
        valid = jax.lax.dynamic_update_index_in_dim(valid, ok, i, 0)
        return remaining, indices, valid

    # Slots built from the data (zeros_like), not from constants: inside shard_map the carry
    # must vary over the same mesh axes as the scores.
    zero = jnp.zeros_like(scores[:1], jnp.int32)
    init = (
        scores,
        jnp.zeros(max_output, jnp.int32) + zero,
        jnp.zeros(max_output, bool) | zero.astype(bool),
    )
    _, indices, valid = jax.lax.fori_loop(0, max_output, body, init)
    return indices, valid
