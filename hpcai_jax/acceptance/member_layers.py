"""The members' convolutions layer by layer, in every formulation (docs/members.md, "On a
device"): four layers of resnet_small at M members of batch B each, forward, input gradient and
weight gradient timed apart, against one member at batch M·B (the ideal), with the kernels each
form compiled to (cuDNN/cuBLAS custom calls on a GPU) and the weight gradient's dtype read from
the compiled program. What decides `--member_map=auto` on a backend (`DECISION`)."""

from __future__ import annotations

import dataclasses
import re
import statistics
import time
from collections import Counter

import jax
import jax.numpy as jnp
from jax import lax

from hpcai_jax import member_forms
from hpcai_jax.ops import member_conv
from hpcai_jax.ops.member_batched import NHWC


@dataclasses.dataclass(frozen=True)
class Layer:
    name: str
    size: int  # input height and width
    cin: int
    cout: int
    kernel: int
    stride: int


# resnet_small's convolution kinds (models/resnet.py at 28²): a stage's 3×3, a downsampling
# 3×3 and its 1×1 shortcut, and the last stage's 3×3.
LAYERS = (
    Layer("28² 16→16 3×3 s1", 28, 16, 16, 3, 1),
    Layer("28² 16→32 3×3 s2", 28, 16, 32, 3, 2),
    Layer("28² 16→32 1×1 s2", 28, 16, 32, 1, 2),
    Layer("7² 64→64 3×3 s1", 7, 64, 64, 3, 1),
)
# Formulations of ops/member_conv.py, as the member forms use them (hpcai_jax/member_forms.py),
# and the ideal: `sequential` is every form whose convolutions loop over the members (scan and
# conv_loop), `grouped` XLA's own batching.
FORMS = {
    "sequential": "loop",
    **{
        name: f.formulation
        for name, f in member_forms.FORMS_TABLE.items()
        if f.mapped and not f.loops
    },
    "ideal": "ideal",  # one member at batch M·B
}
PASSES = ("forward", "input_grad", "weight_grad")
DECISION = (
    "the GPU default becomes the faster one-kernel-per-layer form (batched or batched_grouped) "
    "where its whole step reaches >= 2x sequential (scan) at M = 16, B = 32 and >= 50 % of the "
    "ideal's rate (one member at batch M·B); otherwise it stays as it is"
)


def _operands(layer: Layer, m: int, b: int, dtype):
    kx, kw, kd = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (m, b, layer.size, layer.size, layer.cin), dtype)
    w = jax.random.normal(kw, (m, layer.kernel, layer.kernel, layer.cin, layer.cout)) * 0.1
    out = -(-layer.size // layer.stride)
    dy = jax.random.normal(kd, (m, b, out, out, layer.cout), dtype)
    return x, w.astype(dtype), dy


def _conv(layer: Layer, conv):
    s = (layer.stride, layer.stride)
    return lambda x, w: conv(x, w, s, "SAME", dimension_numbers=NHWC)


def programs(layer: Layer, form: str) -> dict:
    """pass → a function of (x, w, dy) over the members ([M, ...] each) in `form`."""
    if form == "ideal":  # one member, all the images
        conv = _conv(layer, lax.conv_general_dilated)

        def flat(x):
            return x.reshape(-1, *x.shape[2:])

        def one(x, w, dy):
            return flat(x), w[0], flat(dy)

        fns = {
            "forward": lambda x, w, dy: conv(*one(x, w, dy)[:2]),
            "input_grad": lambda x, w, dy: _vjp(conv, *one(x, w, dy))[0],
            "weight_grad": lambda x, w, dy: _vjp(conv, *one(x, w, dy))[1],
        }
        return fns
    member = member_conv.MemberConv(FORMS[form])
    conv = _conv(layer, member.conv_general_dilated)

    def mapped(fn):
        def run(x, w, dy):
            if form == "sequential":
                return member.loop(fn, x, w, dy)
            return jax.vmap(fn)(x, w, dy)

        return run

    return {
        "forward": mapped(lambda x, w, dy: conv(x, w)),
        "input_grad": mapped(lambda x, w, dy: _vjp(conv, x, w, dy)[0]),
        "weight_grad": mapped(lambda x, w, dy: _vjp(conv, x, w, dy)[1]),
    }


def _vjp(conv, x, w, dy):
    _, pullback = jax.vjp(conv, x, w)
    return pullback(dy.astype(x.dtype))


_CALL = re.compile(r'custom_call_target="([^"]+)"')
_OP = re.compile(r"=\s*\(?([a-z0-9]+)\[[^=]*?\b(convolution|dot|custom-call)\(")


def kernels(compiled) -> dict:
    """What a compiled program became: its library calls by target, and the element type of
    each convolution, product and custom call's (first) result."""
    text = compiled.as_text()
    return {
        "custom_calls": dict(Counter(_CALL.findall(text))),
        "result_dtypes": dict(Counter(f"{op}:{dt}" for dt, op in _OP.findall(text))),
    }


def _seconds(fn, args, calls: int) -> float:
    """Median seconds of one call over 5 samples of `calls` calls back to back."""
    jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(*args)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def measure(layer: Layer, m: int, b: int, form: str, dtype=jnp.bfloat16, calls: int = 5) -> dict:
    """One (layer, M, B, form): seconds per pass and what each pass compiled to."""
    args = _operands(layer, m, b, dtype)
    out = {"layer": layer.name, "members": m, "batch": b, "form": form}
    for name, fn in programs(layer, form).items():
        compiled = jax.jit(fn).lower(*args).compile()
        out[name] = {"seconds": _seconds(compiled, args, calls), **kernels(compiled)}
    return out


def summary(rows: list[dict], m: int, b: int) -> dict[str, float]:
    """form → its seconds for all the layers' three passes at (M, B), for the forms measured
    on every layer there (one that failed on a layer has no total)."""
    total: dict[str, float] = {}
    layers: dict[str, int] = {}
    for r in rows:
        if (r["members"], r["batch"]) == (m, b):
            spent = sum(r[p]["seconds"] for p in PASSES)
            total[r["form"]] = total.get(r["form"], 0.0) + spent
            layers[r["form"]] = layers.get(r["form"], 0) + 1
    most = max(layers.values(), default=0)
    return {form: t for form, t in total.items() if layers[form] == most}


def table(rows: list[dict]) -> str:
    """Markdown: per (layer, M, B, form), each pass's µs and its ratio to sequential."""
    head = "| layer | M | B | form | forward µs | input grad µs | weight grad µs | vs sequential |"
    lines = [head, "|" + " --- |" * 8]
    for r in rows:
        seq = next(
            (
                q
                for q in rows
                if q["form"] == "sequential"
                and (q["layer"], q["members"], q["batch"]) == (r["layer"], r["members"], r["batch"])
            ),
            None,
        )
        total = sum(r[p]["seconds"] for p in PASSES)
        ratio = sum(seq[p]["seconds"] for p in PASSES) / total if seq else None
        cells = [r["layer"], str(r["members"]), str(r["batch"]), r["form"]]
        cells += [f"{r[p]['seconds'] * 1e6:.0f}" for p in PASSES]
        cells.append("n/a" if ratio is None else f"{ratio:.2f}x")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
