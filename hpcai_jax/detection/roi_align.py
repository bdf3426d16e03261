"""RoIAlign (Detectron2's ROIAlign, aligned=True) as two einsums, without gathers.

Bilinear interpolation is separable: a sample at (y, x) weighs pixel (i, j) by k(y, i) · k(x, j)
with k(t, i) = max(0, 1 − |t − i|), after Detectron2's border rule (a sample outside
[−1, size] on either axis is 0, one inside is clamped to [0, size − 1]). The mean over a bin's
sampling_ratio² samples is then the product of two means, so the operation is wy [R, out_h, H]
and wx [R, out_w, W] contracted with the features, R·out_w·H·W·C + R·out_h·out_w·H·C
multiply-adds: dense matmul work, where a gather-based RoIAlign is memory bound (the approach of
scenic's CenterNet2 RoI heads). The weights carry no gradient (proposals are constants to the
head, as in Detectron2); the features do.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _axis_weights(start, length, size: int, bins: int, sampling_ratio: int):
    """[R, bins, size]: mean interpolation weight of each bin's samples on each pixel.

    start, length [R] are the RoI's extent on this axis in feature pixels (aligned: already
    shifted by −0.5).
    """
    bin_size = length / bins  # [R]
    samples = (jnp.arange(sampling_ratio) + 0.5) / sampling_ratio
    offsets = jnp.arange(bins)[:, None] + samples[None, :]  # [bins, s] in bin sizes
    t = start[:, None, None] + offsets[None] * bin_size[:, None, None]  # [R, bins, s]
    inside = (t >= -1.0) & (t <= size)
    t = jnp.clip(t, 0.0, size - 1)
    pixels = jnp.arange(size, dtype=t.dtype)
    k = jnp.maximum(0.0, 1.0 - jnp.abs(t[..., None] - pixels))  # [R, bins, s, size]
    k = jnp.where(inside[..., None], k, 0.0)
    return jnp.mean(k, axis=2)


@jax.named_scope("roi_align")  # its FLOPs are totalled apart (flops.analytic.SCOPES)
def roi_align(
    features,
    boxes,
    spatial_scale: float,
    output_size: tuple[int, int] = (7, 7),
    sampling_ratio: int = 2,
):
    """Pools features [H, W, C] over boxes [R, 4] (ymin, xmin, ymax, xmax in image pixels).

    spatial_scale maps image pixels to feature pixels (1 / stride). Returns
    [R, out_h, out_w, C] in the features' dtype.
    """
    height, width, _ = features.shape
    out_h, out_w = output_size
    boxes = jax.lax.stop_gradient(boxes.astype(jnp.float32)) * spatial_scale - 0.5
    wy = _axis_weights(boxes[:, 0], boxes[:, 2] - boxes[:, 0], height, out_h, sampling_ratio)
    wx = _axis_weights(boxes[:, 1], boxes[:, 3] - boxes[:, 1], width, out_w, sampling_ratio)
    wy, wx = wy.astype(features.dtype), wx.astype(features.dtype)
    # Columns first: the intermediate [R, H, out_w, C] is the smaller one when H < W (the
    # climate grid is 2:3), and the second contraction runs over H.
    cols = jnp.einsum("rqj,ijc->riqc", wx, features)
    return jnp.einsum("rpi,riqc->rpqc", wy, cols)
