"""The members' convolutions as one kernel per layer (ops/member_conv.py's "im2col" and
"grouped_vjp" formulations, docs/members.md): x [M, B, H, W, C] and w [M, kh, kw, C, O], each
member's HWIO kernel, in one call for all the members.

- im2col: the k² shifted (strided) slices of the input side by side times the members' weights,
  one batched product ([M, B·oh·ow, k²·C] × [M, k²·C, O]); its weight gradient the slices'
  transpose times dy, its input gradient dy times the weights with each slice's share summed
  back into place: both products accumulate and return float32;
- grouped: one grouped convolution, the members folded into its feature groups (XLA's batching
  of one convolution), differentiated as such by the caller (grad of vmap).

The caller keeps the input and the weights for the backward pass, never the slices, so the
memory per layer is the slices of one layer at a time (engine/member_memory.py checks it)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

# NHWC × HWIO → NHWC, the layout every member form takes (lax spells it ("NHWC", "HWIO", "NHWC")).
NHWC = lax.ConvDimensionNumbers(lhs_spec=(0, 3, 1, 2), rhs_spec=(3, 2, 0, 1), out_spec=(0, 3, 1, 2))


def _padded(x, pads):
    """x [M, B, H, W, C] padded with zeros in H and W (negative pads crop, as lax's)."""
    zero = jnp.zeros((), x.dtype)
    return lax.pad(x, zero, [(0, 0, 0), (0, 0, 0), *((lo, hi, 0) for lo, hi in pads), (0, 0, 0)])


def _geometry(x_shape, w_shape, strides, pads):
    """(padded H, W), (oh, ow) of a member-batched convolution."""
    (kh, kw), (sh, sw) = w_shape[1:3], strides
    h, wd = (n + lo + hi for n, (lo, hi) in zip(x_shape[2:4], pads, strict=True))
    return (h, wd), ((h - kh) // sh + 1, (wd - kw) // sw + 1)


def _columns(x, w_shape, strides, pads):
    """The k² shifted, strided slices of x side by side: [M, B·oh·ow, k²·C], (i, j, c) order."""
    m, b, _, _, c = x.shape
    kh, kw = w_shape[1:3]
    (sh, sw), (_, (oh, ow)) = strides, _geometry(x.shape, w_shape, strides, pads)
    xp = _padded(x, pads)
    taps = [
        lax.slice(
            xp,
            (0, 0, i, j, 0),
            (m, b, i + (oh - 1) * sh + 1, j + (ow - 1) * sw + 1, c),
            (1, 1, sh, sw, 1),
        )
        for i in range(kh)
        for j in range(kw)
    ]
    cols = taps[0] if len(taps) == 1 else jnp.concatenate(taps, axis=-1)
    return cols.reshape(m, b * oh * ow, kh * kw * c)


_BATCHED_MATMUL = (((2,), (1,)), ((0,), (0,)))  # [M, N, K] × [M, K, O] → [M, N, O]


def im2col_forward(x, w, strides, pads, precision=None):
    """All the members' convolutions as one batched product: x [M, B, H, W, C], w [M, kh, kw,
    C, O] (HWIO per member) → [M, B, oh, ow, O]."""
    m, b = x.shape[:2]
    _, (oh, ow) = _geometry(x.shape, w.shape, strides, pads)
    k = w.shape[1] * w.shape[2] * w.shape[3]
    cols = _columns(x, w.shape, strides, pads)
    y = lax.dot_general(cols, w.reshape(m, k, -1), _BATCHED_MATMUL, precision=precision)
    return y.reshape(m, b, oh, ow, w.shape[-1])


def im2col_weight_grad(x, dy, w_shape, strides, pads, precision=None):
    """dw of `im2col_forward`: one batched product of the slices and dy, accumulated and
    returned in float32 (bf16 operands, f32 accumulation, on every backend)."""
    m, o = x.shape[0], w_shape[-1]
    cols = _columns(x, w_shape, strides, pads)
    dw = lax.dot_general(
        cols,
        dy.reshape(m, -1, o),
        (((1,), (1,)), ((0,), (0,))),
        precision=precision,
        preferred_element_type=jnp.float32,
    )
    return dw.reshape(w_shape)


def im2col_input_grad(x_shape, w, dy, strides, pads, precision=None):
    """dx of `im2col_forward`: dy times the weights (a batched product, in float32), each
    slice's share summed back into place in float32 and cut to the input's size."""
    m, b, _, _, c = x_shape
    kh, kw, _, o = w.shape[1:]
    (sh, sw), ((h, wd), (oh, ow)) = strides, _geometry(x_shape, w.shape, strides, pads)
    dcols = lax.dot_general(
        dy.reshape(m, b * oh * ow, o),
        w.reshape(m, -1, o),
        (((2,), (2,)), ((0,), (0,))),
        precision=precision,
        preferred_element_type=jnp.float32,
    ).reshape(m, b, oh, ow, kh * kw, c)
    dxp = None
    for t in range(kh * kw):
        i, j = divmod(t, kw)
        placed = lax.pad(
            dcols[:, :, :, :, t],
            jnp.zeros((), jnp.float32),
            [
                (0, 0, 0),
                (0, 0, 0),
                (i, h - i - (oh - 1) * sh - 1, sh - 1),
                (j, wd - j - (ow - 1) * sw - 1, sw - 1),
                (0, 0, 0),
            ],
        )
        dxp = placed if dxp is None else dxp + placed
    return _padded(dxp, [(-lo, -hi) for lo, hi in pads])


def grouped_forward(x, w, strides, pads, precision=None):
    """All the members' convolutions as one grouped convolution (XLA's batching of one)."""

    def one(a, k):
        return lax.conv_general_dilated(
            a, k, strides, pads, dimension_numbers=NHWC, precision=precision
        )

    return jax.vmap(one)(x, w)


def one_by_one(w, pads) -> bool:
    """A 1×1 convolution without padding: one batched product in every batched formulation."""
    return w.shape[-4:-2] == (1, 1) and all(p == (0, 0) for p in pads)


def batched_forward(formulation: str, strides, pads, precision):
    """The members' forward as `formulation` computes it batched (a 1×1 convolution is a
    product)."""

    def forward(x, w):
        if formulation == "im2col" or one_by_one(w, pads):
            return im2col_forward(x, w, strides, pads, precision)
        return grouped_forward(x, w, strides, pads, precision)

    return forward


def _broadcast(axis_size, in_batched, args):
    """Every argument with the members' axis in front (an unbatched one is shared)."""
    return [
        a if b else jnp.broadcast_to(a, (axis_size, *a.shape))
        for a, b in zip(args, in_batched, strict=True)
    ]


def forward_rule(formulation, fn, settings, loop, axis_size, in_batched, args):
    """The batching of one member's forward convolution fn(x, w) over the members, as
    `formulation` (one of member_conv.FORMULATIONS) says: (out, out batched). `loop`:
    member_conv.loop."""
    args = _broadcast(axis_size, in_batched, args)
    if formulation == "loop":
        return loop(fn, *args), True
    return batched_forward(formulation, *settings)(*args), True


def gradient_rule(formulation, which, one, settings, loop, axis_size, in_batched, args):
    """The batching of one member's dx or dw (`which`, computed by one(x, w, dy)): "im2col"
    (and a 1×1 convolution under "grouped_vjp") takes its products' gradients, "grouped_vjp"
    the gradient of its grouped forward (grad of vmap); "loop" loops the one-member forms."""
    strides, pads, precision = settings
    x, w, dy = _broadcast(axis_size, in_batched, args)
    if formulation == "loop":
        return loop(one, x, w, dy), True
    if formulation == "im2col" or one_by_one(w, pads):
        if which == "dx":
            return im2col_input_grad(x.shape, w, dy, strides, pads, precision), True
        return im2col_weight_grad(x, dy, w.shape, strides, pads, precision), True
    _, vjp = jax.vjp(batched_forward(formulation, strides, pads, precision), x, w)
    dx, dw = vjp(dy.astype(x.dtype))
    return (dx if which == "dx" else dw), True
