"""Whether a one-kernel-per-layer member map fits the device, decided before anything compiles.

`--member_map=batched` multiplies each convolution as one product over k² shifted slices of its
input (ops/member_conv.py, "im2col"): its largest layer holds, for every member batched together,
k² copies of that layer's input, and its input gradient as many again in float32. A form that
cannot hold them is one error line naming the memory it needs, not an out-of-memory error
minutes into a compile (docs/members.md, "Memory")."""

from __future__ import annotations

import math

import jax
from jax import lax

from hpcai_jax import member_forms
from hpcai_jax.engine import state as ensemble
from hpcai_jax.errors import UsageError
from hpcai_jax.units import si
from hpcai_jax.workloads.base import Workload


def _convolutions(workload: Workload):
    """(input shape at batch 1, kernel shape, output shape, dtype) of each convolution of one
    member's forward pass, traced on shapes only."""
    model = workload.model(None)
    batch = {
        name: jax.ShapeDtypeStruct((1, *shape), dtype)
        for name, (shape, dtype) in workload.spec.fields.items()
    }
    variables = jax.eval_shape(
        lambda: model.init(
            jax.random.key(0), workload.inputs(ensemble.dummy_batch(workload)), train=False
        )
    )
    x = jax.eval_shape(workload.inputs, batch)
    jaxpr = jax.make_jaxpr(lambda v, x: model.apply(v, x, train=False))(variables, x)
    return [
        (
            e.invars[0].aval.shape,
            e.invars[1].aval.shape,
            e.outvars[0].aval.shape,
            e.invars[0].aval.dtype,
        )
        for e in _equations(jaxpr.jaxpr)
        if e.primitive is lax.conv_general_dilated_p
    ]


def _equations(jaxpr):
    """Every equation of `jaxpr` and of the jaxprs inside it (a custom_vjp's, a scan's)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", param)
            if hasattr(inner, "eqns"):
                yield from _equations(inner)


def columns_need(workload: Workload, members: int, batch: int) -> tuple[int, str]:
    """(bytes, the layer) the largest layer's slices and their float32 gradient take for
    `members` members of `batch` examples each (the batch a device holds of each)."""
    best, layer = 0, ""
    for x_shape, w_shape, y_shape, dtype in _convolutions(workload):
        per_example = math.prod(y_shape[1:-1]) * math.prod(w_shape[:-1])
        need = members * batch * per_example * (dtype.itemsize + 4)
        if need > best:
            kh, kw, cin, cout = w_shape
            best = need
            layer = f"{'×'.join(map(str, x_shape[1:3]))} {cin}→{cout} {kh}×{kw}"
    return best, layer


def check_fits(
    workload: Workload,
    form: str,
    members: int,
    batch: int,
    free_bytes: int | None,
    chosen_by: str = "",
) -> None:
    """UsageError (one line) where `form` is memory-checked (hpcai_jax/member_forms.py: batched)
    and its largest layer's slices need more
    than the device's `free_bytes` (None: unknown, nothing checked). `members`: those batched
    together (--member_group, else the device's); `batch`: each one's examples on the device;
    `chosen_by`: the flag or file that chose the form, as the line names it (default: the
    --member_map flag)."""
    if not member_forms.FORMS_TABLE[form].memory_checked or free_bytes is None:
        return
    need, layer = columns_need(workload, members, batch)
    if need > free_bytes:
        room = members * free_bytes // need
        fits = max([d for d in range(1, members) if members % d == 0 and d <= room] or [1])
        raise UsageError(
            f"{chosen_by or f'--member_map={form}'} needs {si(need, 'B')} per device for the "
            f"slices of its largest layer ({layer}, {members} members of {batch} examples "
            "batched together); "
            f"the device has {si(free_bytes, 'B')}: give --member_group={fits} or less, "
            "or another --member_map"
        )
