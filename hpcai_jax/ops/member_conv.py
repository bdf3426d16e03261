"""Convolutions of several members at once (docs/members.md).

`jax.vmap` over members whose convolution weights differ turns every convolution into a grouped
one (`feature_group_count` = members) and its weight gradient into a grouped forward
convolution with the images as its kernel (vmap of grad): 4-16x slower than the members'
convolutions one by one on a CPU, and not matched to cuDNN's backward-filter on a GPU. A
`MemberConv` is the convolution a member's model is built with (flax's `nn.Conv` takes its
`conv_general_dilated`, as flax's own examples take a `conv` module): `PLAIN` is
`lax.conv_general_dilated`, one member's program unchanged. Any other is a `custom_vjp` whose
forward and gradients are `custom_vmap` functions, and batching over the members runs, per
`formulation`:

- "loop": each member's own convolution in a `lax.map` over the members (a program that does
  not grow with them), written in the forms XLA runs fast inside a loop: the forward and input
  gradient as plain NHWC × HWIO convolutions, the weight gradient as one too (the images'
  channels as its batch, their batch as its features);
- "im2col" and "grouped_vjp": one kernel per layer for all the members (ops/member_batched.py):
  batched products over the k² shifted slices of the input, or one grouped convolution
  differentiated as such (grad of vmap); a 1×1 convolution is one batched product in both;
- None: XLA's own batching of the convolution and of its gradient (vmap of grad, above).

`written_out` unrolls the "loop" formulation's loops for XLA's cost analysis, which counts a
while loop's body once whatever its trip count (flops/crosscheck.py).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax

from hpcai_jax.ops import member_batched
from hpcai_jax.ops.member_batched import NHWC

FORMULATIONS = ("loop", "im2col", "grouped_vjp")


@dataclasses.dataclass(frozen=True)
class MemberConv:
    """The members' convolution: how it batches over members (`formulation`, FORMULATIONS;
    None: XLA's own) and whether loops over members are written out (`written_out`: the same
    operations, visible to cost analysis). Hashable, so a flax module can hold it."""

    formulation: str | None = None
    written_out: bool = False

    def __post_init__(self):
        if self.formulation not in (None, *FORMULATIONS):
            raise ValueError(f"member convolution {self.formulation!r} not in {FORMULATIONS}")

    def loop(self, fn, *stacked):
        """fn on each member's slices of `stacked`, results stacked: a loop over the leading
        axis (`lax.map`), written out where `written_out` (one copy per member)."""
        body = lambda carry, xs: (carry, fn(*xs))  # noqa: E731
        return lax.scan(body, None, stacked, unroll=True if self.written_out else 1)[1]

    def conv_general_dilated(self, lhs, rhs, window_strides, padding, **settings):
        """`lax.conv_general_dilated`, batched over members as `formulation` says for a 2-D
        NHWC × HWIO convolution without dilation or groups (every other one is lax's)."""
        plain = functools.partial(lax.conv_general_dilated, lhs, rhs, window_strides, padding)
        if self.formulation is None or lhs.ndim != 4 or not _plain_2d(lhs, rhs, settings):
            return plain(**settings)
        strides = tuple(window_strides)
        if isinstance(padding, str):
            pads = lax.padtype_to_pads(lhs.shape[1:3], rhs.shape[:2], strides, padding)
        else:
            pads = padding
        pads = tuple((int(lo), int(hi)) for lo, hi in pads)
        return _member_conv(strides, pads, settings.get("precision"), self)(lhs, rhs)


PLAIN = MemberConv()


def _plain_2d(lhs, rhs, settings: dict) -> bool:
    """A convolution the member forms take: NHWC × HWIO, no groups, dilation or result type."""
    dn = lax.conv_dimension_numbers(lhs.shape, rhs.shape, settings.get("dimension_numbers"))
    ones = (1,) * (lhs.ndim - 2)
    return (
        dn == NHWC
        and settings.get("feature_group_count", 1) == 1
        and settings.get("batch_group_count", 1) == 1
        and tuple(settings.get("lhs_dilation") or ones) == ones
        and tuple(settings.get("rhs_dilation") or ones) == ones
        and settings.get("preferred_element_type") is None
    )


def _forward(x, w, strides, pads, precision):
    return lax.conv_general_dilated(
        x, w, strides, pads, dimension_numbers=NHWC, precision=precision
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
        dimension_numbers=NHWC,
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
        dimension_numbers=NHWC,
        precision=precision,
        preferred_element_type=jnp.float32,
    )
    return dw.transpose(1, 2, 0, 3).astype(x.dtype)  # [C, kh, kw, O] → HWIO


def _batched(fn, settings: tuple, conv: MemberConv):
    """A custom_vmap of the forward fn(x, w) whose batching over members is `conv`'s
    (ops/member_batched.forward_rule); `settings`: (strides, pads, precision)."""
    mapped = jax.custom_batching.custom_vmap(fn)
    mapped.def_vmap(
        lambda n, batched, *args: member_batched.forward_rule(
            conv.formulation, fn, settings, conv.loop, n, batched, args
        )
    )
    return mapped


def _gradient(which: str, strides, pads, precision, in_hw, k_hw, conv: MemberConv):
    """dx or dw (`which`) of one member from (x, w, dy), a custom_vmap batched over members as
    `conv` says (ops/member_batched.gradient_rule); the two are apart, so that one
    nothing needs (the input image's dx) is never computed."""

    def one(x, w, dy):
        if which == "dx":
            return _input_grad(dy, w, strides, pads, precision, in_hw)
        return _weight_grad(x, dy, strides, pads, precision, k_hw)

    mapped = jax.custom_batching.custom_vmap(one)
    settings = (strides, pads, precision)
    mapped.def_vmap(
        lambda n, batched, *args: member_batched.gradient_rule(
            conv.formulation, which, one, settings, conv.loop, n, batched, args
        )
    )
    return mapped


@functools.cache
def _member_conv(strides: tuple, pads: tuple, precision, member: MemberConv):
    """The convolution with these static settings, with its custom vjp and `member`'s
    batching."""

    def forward(x, w):
        return _forward(x, w, strides, pads, precision)

    fwd_b = _batched(forward, (strides, pads, precision), member)

    @jax.custom_vjp
    def conv(x, w):
        return fwd_b(x, w)

    def conv_fwd(x, w):
        return fwd_b(x, w), (x, w)

    def conv_bwd(res, dy):
        x, w = res
        in_hw, k_hw = x.shape[1:3], w.shape[:2]
        dx = _gradient("dx", strides, pads, precision, in_hw, k_hw, member)(x, w, dy)
        dw = _gradient("dw", strides, pads, precision, in_hw, k_hw, member)(x, w, dy)
        return dx.astype(x.dtype), dw.astype(w.dtype)

    conv.defvjp(conv_fwd, conv_bwd)
    return conv
