"""The analytic FLOP count: the paper's Table 3 rules applied to every operator of a jaxpr.

The jaxpr is what XLA compiles, so the backward pass, the optimizer update and plain `jnp` code
are all counted, and nothing from a module's declared hyper-parameters; flax is consulted only
for which operators make up a normalization layer (`normalization_scopes`). The walk and its
three conventions (`table3`, `table3_2mac`, `xla`): `docs/flops.md`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.extend import core

KINDS = (
    "convolution",
    "depthwise_convolution",
    "group_convolution",
    "fully_connected",
    "elementwise",
    "pooling",
    "normalization",
    "reduction",
    "conversion",
    "collective",
    "other",  # data movement (reshape, transpose, slice, gather, ...): no FLOPs, never listed
)
CONVENTIONS = ("table3", "table3_2mac", "xla")

_NORM_SCOPE = "hpcai_norm_"  # + call index; one named scope per normalization-module call
_NORM_MODULES = (nn.BatchNorm, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm, nn.InstanceNorm)

# Element-wise primitives XLA counts as transcendentals (HandleElementwiseOp), not FLOPs.
_TRANSCENDENTAL = frozenset(
    {
        "exp",
        "log",
        "log1p",
        "expm1",
        "tanh",
        "logistic",
        "sqrt",
        "rsqrt",
        "cbrt",
        "pow",
        "sin",
        "cos",
        "tan",
        "erf",
        "atan2",
        "acosh",
    }
)
# One FLOP per output element under every convention.
_ELEMENTWISE = (
    frozenset(
        {
            "add",
            "add_any",
            "sub",
            "mul",
            "div",
            "rem",
            "max",
            "min",
            "neg",
            "abs",
            "sign",
            "floor",
            "ceil",
            "round",
            "square",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "and",
            "or",
            "not",
            "xor",
            "clamp",
            "is_finite",
            "nextafter",
            "copysign",
            "reduce_precision",
            "shift_left",
            "shift_right_logical",
            "shift_right_arithmetic",
            "population_count",
        }
    )
    | _TRANSCENDENTAL
)
_REDUCTION = frozenset(
    {
        "reduce_sum",
        "reduce_max",
        "reduce_min",
        "reduce_prod",
        "reduce_and",
        "reduce_or",
        "reduce_xor",
        "argmax",
        "argmin",
    }
)
_POOLING = frozenset(
    {"reduce_window_sum", "reduce_window_max", "reduce_window_min", "reduce_window"}
)
_COLLECTIVE_REDUCE = frozenset({"psum", "pmax", "pmin", "psum_invariant"})
_COLLECTIVE_MOVE = frozenset(
    {
        "all_gather",
        "all_gather_invariant",
        "psum_scatter",
        "reduce_scatter",
        "ppermute",
        "all_to_all",
        "pbroadcast",
        "pvary",
    }
)
# Data movement and bookkeeping: no FLOPs under any convention (XLA: reshape, broadcast, copy,
# slice, pad, gather, ... cost bytes only).
_FREE = frozenset(
    {
        "broadcast_in_dim",
        "reshape",
        "transpose",
        "squeeze",
        "expand_dims",
        "slice",
        "dynamic_slice",
        "dynamic_update_slice",
        "concatenate",
        "pad",
        "rev",
        "iota",
        "copy",
        "gather",
        "sharding_constraint",
        "device_put",
        "stop_gradient",
        "bitcast_convert_type",
        "split",
        "mesh_cast",
        "reshard",
        "axis_index",
        "optimization_barrier",
        "random_wrap",
        "random_unwrap",
        "random_seed",
        "stack",
        "unstack",
        # Selection, not arithmetic: XLA's cost analysis gives a plain scatter no FLOPs and
        # top_k (a custom call on CPU) none it can count (a detector's proposals and NMS).
        "scatter",
        "top_k",
    }
)


@dataclasses.dataclass
class OperatorCount:
    """FLOPs of one operator kind, under each convention; `ops` counts operator instances."""

    kind: str
    ops: int = 0
    macs: int = 0  # multiply-adds over all taps (convolutions, fully connected)
    table3: int = 0
    table3_2mac: int = 0
    xla: int = 0
    transcendentals: int = 0  # XLA's separate count (exp, log, rsqrt, ...), not in `xla`

    def add(self, other: OperatorCount, times: int = 1) -> None:
        self.ops += other.ops * times
        self.macs += other.macs * times
        self.table3 += other.table3 * times
        self.table3_2mac += other.table3_2mac * times
        self.xla += other.xla * times
        self.transcendentals += other.transcendentals * times

    def flops(self, convention: str) -> int:
        return getattr(self, convention)


@dataclasses.dataclass(frozen=True)
class FlopCount:
    """A per-operator count of one computation that processes `batch` examples."""

    rows: tuple[OperatorCount, ...]  # one per kind in KINDS order, kinds with no ops left out
    batch: int
    notes: tuple[str, ...] = ()
    # FLOPs (XLA's rules) of the operators inside each of SCOPES, part of the totals: the share
    # of a detector's step that is not convolution or dense work (NMS, RoIAlign, targets).
    scopes: tuple[tuple[str, int], ...] = ()

    def total(self, convention: str) -> int:
        _check_convention(convention)
        return sum(row.flops(convention) for row in self.rows)

    def per_example(self, convention: str) -> float:
        return self.total(convention) / self.batch

    @property
    def macs(self) -> int:
        return sum(row.macs for row in self.rows)

    @property
    def transcendentals(self) -> int:
        return sum(row.transcendentals for row in self.rows)

    def row(self, kind: str) -> OperatorCount:
        for row in self.rows:
            if row.kind == kind:
                return row
        return OperatorCount(kind)

    def scaled(self, factor: int) -> FlopCount:
        """The same count for `factor` copies of the computation (e.g. 3× forward)."""
        rows = []
        for row in self.rows:
            scaled = OperatorCount(row.kind)
            scaled.add(row, factor)
            rows.append(scaled)
        scopes = tuple((name, flops * factor) for name, flops in self.scopes)
        return FlopCount(tuple(rows), self.batch, self.notes, scopes)

    def to_dict(self) -> dict:
        return {
            "batch": self.batch,
            "totals": {c: self.total(c) for c in CONVENTIONS},
            "per_example": {c: self.per_example(c) for c in CONVENTIONS},
            "macs": self.macs,
            "transcendentals": self.transcendentals,
            "operators": [dataclasses.asdict(row) for row in self.rows],
            "notes": list(self.notes),
            "scopes_xla": dict(self.scopes),
        }


def _check_convention(convention: str) -> None:
    if convention not in CONVENTIONS:
        raise ValueError(f"convention {convention!r}: expected one of {', '.join(CONVENTIONS)}")


# --- normalization layers ------------------------------------------------------------------


@contextlib.contextmanager
def normalization_scopes() -> Iterator[None]:
    """While active, every call of a flax normalization module runs in its own named scope.

    The scope `hpcai_norm_<i>` (i counts calls) shows up in the name stack of every jaxpr
    equation the call produces, forward and backward, which is how `count_jaxpr` books them.
    """
    calls = [0]

    def interceptor(next_fun, args, kwargs, context):
        if context.method_name != "__call__" or not isinstance(context.module, _NORM_MODULES):
            return next_fun(*args, **kwargs)
        calls[0] += 1
        with jax.named_scope(f"{_NORM_SCOPE}{calls[0]}"):
            return next_fun(*args, **kwargs)

    with nn.intercept_methods(interceptor):
        yield


def _norm_call(eqn) -> tuple[str, bool] | None:
    """(scope, is_backward) of the normalization call an equation belongs to, or None."""
    stack = str(eqn.source_info.name_stack)
    start = stack.rfind(_NORM_SCOPE)
    if start < 0:
        return None
    end = stack.find("/", start)
    scope = stack[start:] if end < 0 else stack[start:end]
    return scope, "transpose(" in stack


# --- per-primitive rules -------------------------------------------------------------------


def _size(aval) -> int:
    return math.prod(aval.shape) if hasattr(aval, "shape") else 1


def _out_size(eqn) -> int:
    return sum(_size(v.aval) for v in eqn.outvars)


def _conv_taps(
    out: int,
    kernel: int,
    stride: int,
    pad_lo: int,
    rhs_dilation: int,
    lhs_dilation: int,
    size_in: int,
) -> tuple[int, int]:
    """(all taps, valid taps) summed over the output positions of one spatial dimension.

    All taps: every (output, kernel) pair except those on the holes of a dilated input (a
    transposed convolution's zeros are not taps of the operator). Valid taps: XLA's count
    (GetConvolutionFlops), the pairs that land on a real input element, no padding.
    """
    o = np.arange(out)[:, None]
    k = np.arange(kernel)[None, :]
    index = o * stride - pad_lo + k * rhs_dilation  # in the padded, dilated input
    not_hole = (index % lhs_dilation) == 0
    inside = (index >= 0) & (index // lhs_dilation < size_in)
    return int(not_hole.sum()), int((not_hole & inside).sum())


def _conv(eqn) -> OperatorCount:
    lhs, rhs = (v.aval for v in eqn.invars[:2])
    out = eqn.outvars[0].aval
    p = eqn.params
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = dn.lhs_spec, dn.rhs_spec, dn.out_spec
    all_taps = valid_taps = 1
    for d in range(len(lhs_spec) - 2):
        a, v = _conv_taps(
            out=out.shape[out_spec[2 + d]],
            kernel=rhs.shape[rhs_spec[2 + d]],
            stride=p["window_strides"][d],
            pad_lo=p["padding"][d][0],
            rhs_dilation=p["rhs_dilation"][d],
            lhs_dilation=p["lhs_dilation"][d],
            size_in=lhs.shape[lhs_spec[2 + d]],
        )
        all_taps *= a
        valid_taps *= v
    # Per output (batch, feature) pair: rhs input features × taps multiply-adds. This equals
    # XLA's (C_in / feature_group_count) × C_out × (N / batch_group_count) × Π taps.
    pairs = out.shape[out_spec[0]] * out.shape[out_spec[1]] * rhs.shape[rhs_spec[1]]
    macs = pairs * all_taps
    groups = max(p["feature_group_count"], p["batch_group_count"])
    if groups == 1:
        kind = "convolution"
    elif p["feature_group_count"] > 1 and rhs.shape[rhs_spec[1]] == 1:
        kind = "depthwise_convolution"
    else:
        kind = "group_convolution"
    return OperatorCount(
        kind, ops=1, macs=macs, table3=2 * macs, table3_2mac=2 * macs, xla=2 * pairs * valid_taps
    )


def _dot(eqn) -> OperatorCount:
    lhs = eqn.invars[0].aval
    (lhs_contract, _), _ = eqn.params["dimension_numbers"]
    macs = _out_size(eqn) * math.prod(lhs.shape[d] for d in lhs_contract)
    return OperatorCount(
        "fully_connected", ops=1, macs=macs, table3=macs, table3_2mac=2 * macs, xla=2 * macs
    )


def _integer_pow_muls(y: int) -> int:
    """Multiplies in JAX's lowering of x**y (square-and-multiply), plus 1 divide if y < 0."""
    n, acc, muls = abs(y), False, 0
    while n:
        if n & 1:
            muls += acc
            acc = True
        n >>= 1
        muls += bool(n)
    return muls + (y < 0)


def _window_elements(eqn) -> int:
    return math.prod(eqn.params["window_dimensions"])


# Primitives of a few FLOPs per output element (`_per_element`).
_PER_ELEMENT = _ELEMENTWISE | {"select_n", "integer_pow", "exp2", "convert_element_type"}


def _per_element(eqn, name: str, n: int) -> OperatorCount:
    """The count of an equation of `_PER_ELEMENT` with `n` output elements."""
    if name in _TRANSCENDENTAL:
        return OperatorCount("elementwise", ops=1, table3=n, table3_2mac=n, transcendentals=n)
    if name in _ELEMENTWISE:
        return OperatorCount("elementwise", ops=1, table3=n, table3_2mac=n, xla=n)
    if name == "select_n":  # n-way select lowers to n - 1 two-way selects
        xla = n * (len(eqn.invars) - 2)
        return OperatorCount("elementwise", ops=1, table3=n, table3_2mac=n, xla=xla)
    if name == "integer_pow":
        return OperatorCount(
            "elementwise",
            ops=1,
            table3=n,
            table3_2mac=n,
            xla=n * _integer_pow_muls(eqn.params["y"]),
        )
    if name == "exp2":  # lowered as exp(x · ln 2)
        return OperatorCount(
            "elementwise", ops=1, table3=n, table3_2mac=n, xla=n, transcendentals=n
        )
    return OperatorCount("conversion", ops=1, xla=n)  # convert_element_type


def _count_eqn(eqn) -> OperatorCount | None:
    """The count of one first-order equation; None for a primitive with no rule here."""
    name = eqn.primitive.name
    n = _out_size(eqn)
    if name == "conv_general_dilated":
        return _conv(eqn)
    if name == "dot_general":
        return _dot(eqn)
    if name in _PER_ELEMENT:
        return _per_element(eqn, name, n)
    if name in _REDUCTION:
        return OperatorCount("reduction", ops=1, xla=_size(eqn.invars[0].aval) - n)
    if name == "cumsum":  # associative scan: about one add per element
        return OperatorCount("reduction", ops=1, xla=n)
    if name in _POOLING:
        return OperatorCount(
            "pooling", ops=1, table3=n, table3_2mac=n, xla=(_window_elements(eqn) - 1) * n
        )
    if name == "select_and_scatter_add":  # max-pool's gradient: window - 1 compares + 1 add
        source = _size(eqn.invars[0].aval)
        return OperatorCount(
            "pooling", ops=1, table3=source, table3_2mac=source, xla=source * _window_elements(eqn)
        )
    if name == "select_and_gather_add":  # max-pool's JVP: a reduce-window over (value, tangent)
        return OperatorCount(
            "pooling", ops=1, table3=n, table3_2mac=n, xla=(_window_elements(eqn) - 1) * n
        )
    if name in ("scatter-add", "scatter_add"):  # one add per update element
        return OperatorCount(
            "elementwise",
            ops=1,
            table3=_size(eqn.invars[2].aval),
            table3_2mac=_size(eqn.invars[2].aval),
            xla=_size(eqn.invars[2].aval),
        )
    if name in _COLLECTIVE_REDUCE:  # XLA's HandleAllReduce: one FLOP per output element
        return OperatorCount("collective", ops=1, xla=n)
    if name in _COLLECTIVE_MOVE:
        return OperatorCount("collective", ops=1)
    if name in _FREE:
        return OperatorCount("other")
    return None


# --- the walk ------------------------------------------------------------------------------


# Primitives whose inner jaxpr's outputs are the equation's outputs, one for one: an output
# nobody reads is dead code inside them too.
_CALLS = frozenset(
    {
        "pjit",
        "jit",
        "closed_call",
        "core_call",
        "custom_jvp_call",
        "custom_vjp_call",
        "custom_vjp_call_jaxpr",
        "remat",
        "checkpoint",
        "shard_map",
        "custom_lin",
    }
)


def _sub_jaxprs(eqn) -> list[tuple[core.Jaxpr, int]]:
    """Inner jaxprs of a higher-order primitive, each with how many times it runs."""
    name, p = eqn.primitive.name, eqn.params
    if name == "cond":  # one branch runs; like XLA, count the dearest (resolved in the walk)
        return [(b.jaxpr, 1) for b in p["branches"]]
    times = 1
    if name == "scan":
        times = p["length"]
    elif name == "shard_map":
        # The body's shapes are per device and it runs on every device of the mesh's manual axes.
        manual = p.get("manual_axes") or p.get("axis_names") or p["mesh"].axis_names
        times = math.prod(p["mesh"].shape[a] for a in manual)
    found = []
    for value in p.values():
        for item in value if isinstance(value, tuple | list) else (value,):
            if isinstance(item, core.ClosedJaxpr):
                found.append((item.jaxpr, times))
            elif isinstance(item, core.Jaxpr):
                found.append((item, times))
    return found


def _live_eqns(jaxpr: core.Jaxpr, live_out: list[bool] | None):
    """Yields (eqn, which of its outputs are read) for the equations whose results are used.

    XLA deletes dead code before it counts (e.g. a forward result that only a linear function's
    gradient would have read), so the walk does too.
    """
    outs = jaxpr.outvars
    if live_out is not None:
        outs = [v for v, keep in zip(jaxpr.outvars, live_out, strict=True) if keep]
    live = {v for v in outs if isinstance(v, core.Var)}
    kept = []
    for eqn in reversed(jaxpr.eqns):
        used = [v in live for v in eqn.outvars]
        if not any(used) and not eqn.effects:
            continue
        kept.append((eqn, used))
        live.update(v for v in eqn.invars if isinstance(v, core.Var))
    return reversed(kept)


# Named scopes (jax.named_scope) whose operators are also totalled on their own: the detector's
# non-matmul stages (hpcai_jax/detection/), so a record states their share of the step.
SCOPES = ("nms", "roi_align", "box_targets", "proposals")


def _scope_of(eqn, inherited: str | None) -> str | None:
    """The first of SCOPES on the equation's name stack (or its caller's, for inner jaxprs)."""
    if inherited:
        return inherited
    stack = str(eqn.source_info.name_stack)
    parts = set(stack.replace("(", "/").replace(")", "/").split("/"))
    return next((name for name in SCOPES if name in parts), None)


class _Walk:
    def __init__(self) -> None:
        self.scoped: dict[str, int] = {}
        self.rows = {kind: OperatorCount(kind) for kind in KINDS}
        # (scope, is_backward) of each normalization call -> (largest array it touches, times)
        self.norm_calls: dict[tuple[str, bool], tuple[int, int]] = {}
        self.notes: list[str] = []
        self.unknown: set[str] = set()

    def jaxpr(
        self,
        jaxpr: core.Jaxpr,
        times: int,
        live_out: list[bool] | None = None,
        scope: str | None = None,
    ) -> None:
        for eqn, used in _live_eqns(jaxpr, live_out):
            eqn_scope = _scope_of(eqn, scope)
            subs = _sub_jaxprs(eqn)
            if subs and eqn.primitive.name == "cond":
                self._cond(subs, times)
                continue
            if subs:
                if eqn.primitive.name == "while":
                    self._note(
                        "a while loop's body is counted once (trip count unknown, as in "
                        "XLA's cost analysis)"
                    )
                for sub, sub_times in subs:
                    one_for_one = eqn.primitive.name in _CALLS and len(sub.outvars) == len(used)
                    self.jaxpr(sub, times * sub_times, used if one_for_one else None, eqn_scope)
                continue
            count = _count_eqn(eqn)
            if count is None:
                self.unknown.add(eqn.primitive.name)
                continue
            if eqn_scope:
                self.scoped[eqn_scope] = self.scoped.get(eqn_scope, 0) + count.xla * times
            call = _norm_call(eqn)
            if call is not None and count.kind in ("elementwise", "reduction", "conversion"):
                self._normalization(eqn, count, call, times)
            else:
                self.rows[count.kind].add(count, times)

    def _normalization(self, eqn, count: OperatorCount, call: tuple[str, bool], times: int) -> None:
        """XLA rules: every inner op by its own rule. Table 3: C × H × W once per call, and once
        for the call's backward; the largest array a call touches is its input (= its output)."""
        row = self.rows["normalization"]
        row.xla += count.xla * times
        row.transcendentals += count.transcendentals * times
        elements = max(_size(v.aval) for v in (*eqn.invars, *eqn.outvars))
        seen, _ = self.norm_calls.get(call, (0, times))
        self.norm_calls[call] = (max(seen, elements), times)

    def _cond(self, subs: list[tuple[core.Jaxpr, int]], times: int) -> None:
        branches = []
        for sub, _ in subs:
            walk = _Walk()
            walk.jaxpr(sub, times)
            branches.append(walk.finish())
            self.unknown |= walk.unknown
            self.notes += [n for n in walk.notes if n not in self.notes]
        best = max(branches, key=lambda rows: sum(row.xla for row in rows.values()))
        for kind, row in best.items():
            self.rows[kind].add(row)
        self._note("cond: the branch with the most FLOPs is counted")

    def finish(self) -> dict[str, OperatorCount]:
        """Books the normalization calls' Table 3 figures; returns the rows by kind."""
        norm = self.rows["normalization"]
        for elements, times in self.norm_calls.values():
            norm.ops += times
            norm.table3 += elements * times
            norm.table3_2mac += elements * times
        self.norm_calls = {}
        return self.rows

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)


def count_jaxpr(closed_jaxpr: core.ClosedJaxpr, batch: int) -> FlopCount:
    """Counts every operator of a (closed) jaxpr; `batch` is how many examples it processes."""
    walk = _Walk()
    walk.jaxpr(closed_jaxpr.jaxpr, 1)
    rows = walk.finish()
    notes = list(walk.notes)
    if walk.unknown:
        notes.append(
            "no FLOP rule for primitive(s) " + ", ".join(sorted(walk.unknown)) + ": counted as 0"
        )
    kept = tuple(rows[k] for k in KINDS if rows[k].ops or rows[k].xla or rows[k].table3)
    return FlopCount(kept, batch, tuple(notes), tuple(sorted(walk.scoped.items())))


def count_fn(fn: Callable, *args: Any, batch: int, **kwargs: Any) -> FlopCount:
    """Traces `fn(*args, **kwargs)` (arrays or jax.ShapeDtypeStructs) and counts its operators,
    with flax normalization modules booked as Table 3 normalizations."""
    with normalization_scopes():
        closed = jax.make_jaxpr(fn)(*args, **kwargs)
    return count_jaxpr(closed, batch)
