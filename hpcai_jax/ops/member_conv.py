"""Convolutions of several members at once (docs/members.md).

`jax.vmap` over members whose convolution weights differ turns every convolution into a grouped
one (`feature_group_count` = members) and its weight gradient into a grouped forward
convolution with the images as its kernel (vmap of grad): 4-16x slower than the members'
convolutions one by one on a CPU, and not matched to cuDNN's backward-filter on a GPU. Models
build their convolutions with `conv_general_dilated` below (flax's `nn.Conv` takes it); outside a
`formulation(...)` block it is `lax.conv_general_dilated`, so one member's program is unchanged.
Inside one (the engine opens it around the members' vmap) a convolution is a `custom_vjp` whose
forward and gradients are `custom_vmap` functions, and batching over the members runs, per
`formulation`:

- "loop": each member's own convolution in a `lax.map` over the members (a program that does
  not grow with them), written in the forms XLA runs fast inside a loop: the forward and input
  gradient as plain NHWC × HWIO convolutions, the weight gradient as one too (the images'
  channels as its batch, their batch as its features);
- "im2col" and "grouped_vjp": one kernel per layer for all the members (ops/member_batched.py):
  batched products over the k² shifted slices of the input, or one grouped convolution
  differentiated as such (grad of vmap); a 1×1 convolution is one batched product in both;
- "grouped": XLA's own batching of the convolution and of its gradient (vmap of grad, above).

`counting()` unrolls the "loop" formulation's loops for XLA's cost analysis, which counts a
while loop's body once whatever its trip count (flops/crosscheck.py).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

import jax
import jax.numpy as jnp
from jax import lax

from hpcai_jax.ops import member_batched
from hpcai_jax.ops.member_batched import NHWC

FORMULATIONS = ("loop", "im2col", "grouped_vjp", "grouped")

_formulation: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "member_conv_formulation", default=None
)
_unrolled: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "member_conv_unrolled", default=False
)


@contextlib.contextmanager
def formulation(name: str | None):
    """Convolutions traced inside run as `name` when batched over members (None: XLA's own)."""
    if name not in (None, *FORMULATIONS):
        raise ValueError(f"member convolution formulation {name!r} not in {FORMULATIONS}")
    token = _formulation.set(None if name == "grouped" else name)
    try:
        yield
    finally:
        _formulation.reset(token)


@contextlib.contextmanager
def counting():
    """The "loop" formulation's loops unrolled: the same operations, visible to cost analysis."""
    token = _unrolled.set(True)
    try:
        yield
    finally:
        _unrolled.reset(token)


def unrolled() -> bool:
    """Inside `counting()`: loops over members are to be written out, not run as loops."""
    return _unrolled.get()


_NHWC = NHWC


def conv_general_dilated(
    lhs,
    rhs,
    window_strides,
    padding,
    lhs_dilation=None,
    rhs_dilation=None,
    dimension_numbers=None,
    feature_group_count=1,
    batch_group_count=1,
    precision=None,
    preferred_element_type=None,
):
    """`lax.conv_general_dilated`, with the members' batching of the formulation in force for a
    2-D NHWC × HWIO convolution without dilation or groups (every other one is lax's)."""
    plain = functools.partial(
        lax.conv_general_dilated,
        lhs,
        rhs,
        window_strides,
        padding,
        lhs_dilation=lhs_dilation,
        rhs_dilation=rhs_dilation,
        dimension_numbers=dimension_numbers,
        feature_group_count=feature_group_count,
        batch_group_count=batch_group_count,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )
    if _formulation.get() is None or lhs.ndim != 4:
        return plain()
    dn = lax.conv_dimension_numbers(lhs.shape, rhs.shape, dimension_numbers)
    ones = (1,) * (lhs.ndim - 2)
    if (
        dn != _NHWC
        or feature_group_count != 1
        or batch_group_count != 1
        or tuple(lhs_dilation or ones) != ones
        or tuple(rhs_dilation or ones) != ones
        or preferred_element_type is not None
    ):
        return plain()
    strides = tuple(window_strides)
    if isinstance(padding, str):
        pads = lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], strides, padding)
    else:
        pads = padding
    pads = tuple((int(lo), int(hi)) for lo, hi in pads)
    return _member_conv(strides, pads, precision)(lhs, rhs)


def _forward(x, w, strides, pads, precision):
    return lax.conv_general_dilated(
        x, w, strides, pads, dimension_numbers=_NHWC, precision=precision
    )


def _input_grad(dy, w, strides, pads, precision, in_hw):
    """dx of one member: dy dilated by the strides, correlated with the flipped kernel (its input
    and output features swapped), padded back to the input's size."""
    window = [
        (k - 1 - lo, n + lo - 1 - (o - 1) * s)
        for k, s, (lo, _), n, o in zip(
            w.shape[:2], strides, pads, in_hw, dy.shape[1:3], strict=True
        )
    ]
    return lax.conv_general_dilated(
        dy,
        jnp.flip(w, (0, 1)).swapaxes(2, 3),
        (1, 1),
        window,
        lhs_dilation=strides,
        dimension_numbers=_NHWC,
        precision=precision,
    )


def _weight_grad(x, dy, strides, pads, precision, k_hw):
    """dw of one member as a forward convolution: the images' channels as its batch, their
    batch as its input features, dy as its kernel (spread by the strides). The padding is the
    forward's, cut where the last rows of x reach no output, so its taps are exactly the
    forward's: the same work, counted alike."""
    _, oh, ow, _ = dy.shape
    _, n_h, n_w, _ = x.shape
    window = [
        (lo, k + (o - 1) * s - n - lo)
        for (lo, _), k, o, s, n in zip(pads, k_hw, (oh, ow), strides, (n_h, n_w), strict=True)
    ]
    dw = lax.conv_general_dilated(
        x.transpose(3, 1, 2, 0),  # [C, H, W, B]
        dy.transpose(1, 2, 0, 3),  # [oh, ow, B, O]
        (1, 1),
        window,
        rhs_dilation=strides,
        dimension_numbers=_NHWC,
        precision=precision,
        preferred_element_type=jnp.float32,
    )
    return dw.transpose(1, 2, 0, 3).astype(x.dtype)  # [C, kh, kw, O] → HWIO


def loop(fn, *stacked):
    """fn on each member's slices of `stacked`, results stacked: a loop over the leading axis
    (`lax.map`), written out under `counting()` (the same operations, one copy per member)."""
    body = lambda carry, xs: (carry, fn(*xs))  # noqa: E731
    return lax.scan(body, None, stacked, unroll=True if _unrolled.get() else 1)[1]


def _batched(fn, settings: tuple):
    """A custom_vmap of the forward fn(x, w) whose batching over members is the formulation in
    force (ops/member_batched.forward_rule); `settings`: (strides, pads, precision)."""
    mapped = jax.custom_batching.custom_vmap(fn)
    mapped.def_vmap(
        lambda n, batched, *args: member_batched.forward_rule(
            _formulation.get(), fn, settings, loop, n, batched, args
        )
    )
    return mapped


def _gradient(which: str, strides, pads, precision, in_hw, k_hw):
    """dx or dw (`which`) of one member from (x, w, dy), a custom_vmap batched over members as
    the formulation says (ops/member_batched.gradient_rule); the two are apart, so that one
    nothing needs (the input image's dx) is never computed."""

    def one(x, w, dy):
        if which == "dx":
            return _input_grad(dy, w, strides, pads, precision, in_hw)
        return _weight_grad(x, dy, strides, pads, precision, k_hw)

    mapped = jax.custom_batching.custom_vmap(one)
    settings = (strides, pads, precision)
    mapped.def_vmap(
        lambda n, batched, *args: member_batched.gradient_rule(
            _formulation.get(), which, one, settings, loop, n, batched, args
        )
    )
    return mapped


@functools.cache
def _member_conv(strides: tuple, pads: tuple, precision):
    """The convolution with these static settings, with its custom vjp and batching."""

    def forward(x, w):
        return _forward(x, w, strides, pads, precision)

    fwd_b = _batched(forward, (strides, pads, precision))

    @jax.custom_vjp
    def conv(x, w):
        return fwd_b(x, w)

    def conv_fwd(x, w):
        return fwd_b(x, w), (x, w)

    def conv_bwd(res, dy):
        x, w = res
        in_hw, k_hw = x.shape[1:3], w.shape[:2]
        dx = _gradient("dx", strides, pads, precision, in_hw, k_hw)(x, w, dy)
        dw = _gradient("dw", strides, pads, precision, in_hw, k_hw)(x, w, dy)
        return dx.astype(x.dtype), dw.astype(w.dtype)

    conv.defvjp(conv_fwd, conv_bwd)
    return conv
