"""BabelStream's check of every run: replay the kernels on scalars, compare every element.

The expected ("gold") values follow the run order `num_times` times in the run's own precision,
as BabelStream does in `check_solution`. Each array's error is the mean of |x - gold| over its
elements, relative to |gold| (absolute where gold is 0: c stays 0 in the Triad-only and
Nstream-only orders). Dot's error is |sum - gold_sum| / |gold_sum|, its tolerance BabelStream's
or, in float64 at large sizes, the sum's error bound (`dot_tolerance`). The errors are computed on the devices, shard by shard, so nothing is copied to
the host and multi-host arrays need no gathering.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np

from hpcai_jax import dtypes
from hpcai_jax.stream.kernels import ARRAY_NAMES, START_A, START_B, START_C, START_SCALAR
from hpcai_jax.stream.placement import Placement

# BabelStream: mean error per array below 100 x machine epsilon of the precision. For bfloat16
# (eps = 2^-7) that would allow 78% error, so we use 8 x eps (6.25%); see `gold_values` for the
# two roundings a bfloat16 kernel may use.
ARRAY_TOLERANCE = {
    "float64": 100 * float(np.finfo(np.float64).eps),  # 2.2e-14
    "float32": 100 * float(np.finfo(np.float32).eps),  # 1.2e-5
    "bfloat16": 8 * float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps),  # 6.25e-2
}
# BabelStream checks the sum to 1e-8 (relative). A float32 sum of 2^25 terms cannot meet that,
# so float32 allows 1e-4; bfloat16 Dot accumulates in float32 from inputs rounded to bfloat16.
DOT_TOLERANCE = {"float64": 1.0e-8, "float32": 1.0e-4, "bfloat16": 1.0e-3}
# float64, NERSC-10's precision, takes the larger of BabelStream's 1e-8 and the error bound of
# its sum (`dot_tolerance`), which holds at any size (1e-8 does not: BabelStream's own build
# fails it at 2^28). float32 and bfloat16 keep the fixed figures: their bound exceeds them from
# about 1,700 terms and is vacuous from 2^24 (docs/stream.md, Validation).
BOUNDED = ("float64",)
UNIT_ROUNDOFF_64 = 2.0**-53
ROUNDINGS = ("operation", "kernel")


@dataclasses.dataclass(frozen=True)
class Gold:
    a: float
    b: float
    c: float
    dot: float | None  # expected Dot result; None when the run order has no Dot
    rounding: str = "operation"


def gold_values(
    kernels: str, num_times: int, precision: str, elements: int, rounding: str = "operation"
) -> Gold:
    """Replays `num_times` iterations of the run order on scalars of the run's precision.

    rounding="operation" rounds every operation to the precision (BabelStream's replay in T);
    "kernel" evaluates each kernel in float32 and rounds only its result, as XLA may for
    bfloat16 when it allows excess precision (the default on GPUs). For float32 and float64
    the two are the same replay.
    """
    t = dtypes.dtype(precision).type
    w = t if rounding == "operation" or precision != "bfloat16" else np.float32
    a, b, c, scalar = t(START_A), t(START_B), t(START_C), t(START_SCALAR)
    s = w(scalar)
    for _ in range(num_times):
        if kernels == "all":
            c = a
            b = t(s * w(c))
            c = t(w(a) + w(b))
            a = t(w(b) + w(s * w(c)))
        elif kernels == "triad":
            a = t(w(b) + w(s * w(c)))
        elif kernels == "nstream":
            a = t(w(a) + w(w(b) + w(s * w(c))))
        else:
            raise ValueError(f"unknown run order {kernels!r}")
    dot = float(a) * float(b) * elements if kernels == "all" else None
    return Gold(float(a), float(b), float(c), dot, rounding)


def dot_bound(elements: int) -> float:
    """The relative error bound of a float64 Dot of `elements` terms summed in any order:
    γ_N = N·u / (1 − N·u) (each product rounded once, then N − 1 additions: Higham, Accuracy and
    Stability of Numerical Algorithms, §3.1), plus 2u for the gold value a·b·N computed on the
    host. Every term is a·b > 0 here, so the bound on Σ|a_i·b_i| is one on the sum itself."""
    n_u = elements * UNIT_ROUNDOFF_64
    return n_u / (1 - n_u) + 2 * UNIT_ROUNDOFF_64


def dot_tolerance(precision: str, elements: int) -> tuple[float, str]:
    """Dot's relative tolerance for `elements` terms, and its basis for the record."""
    fixed = DOT_TOLERANCE[precision]
    if precision not in BOUNDED:
        return fixed, f"fixed {fixed:g} (BabelStream's kind; no useful bound in {precision})"
    bound = dot_bound(elements)
    if bound > fixed:
        return bound, f"the sum's error bound for {elements} terms (above BabelStream's {fixed:g})"
    return (
        fixed,
        f"BabelStream's {fixed:g} (the sum's error bound for {elements} terms: {bound:.3g})",
    )


@dataclasses.dataclass(frozen=True)
class Check:
    name: str  # "a", "b", "c" or "dot"
    error: float
    tolerance: float
    relative: bool  # False: absolute error (gold is 0)
    basis: str = ""  # where the tolerance comes from

    @property
    def passed(self) -> bool:
        return bool(np.isfinite(self.error)) and self.error <= self.tolerance

    def message(self) -> str:
        label = "sum" if self.name == "dot" else f"{self.name}[]"
        kind = "relative" if self.relative else "absolute"
        return (
            f"Validation failed on {label}. Average {kind} error {self.error:.6g} "
            f"(tolerance {self.tolerance:.3g})"
        )


@dataclasses.dataclass(frozen=True)
class Validation:
    gold: Gold
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def failures(self) -> list[str]:
        return [c.message() for c in self.checks if not c.passed]

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "gold": dataclasses.asdict(self.gold),
            "checks": {
                c.name: {
                    "error": c.error,
                    "tolerance": c.tolerance,
                    "relative": c.relative,
                    "passed": c.passed,
                    "basis": c.basis,
                }
                for c in self.checks
            },
        }


def mean_abs_errors(
    arrays: dict[str, jax.Array], gold: Gold, placement: Placement
) -> dict[str, float]:
    """mean |x - gold| per array, reduced on the devices (float64 for float64 runs, else float32)."""
    acc = jnp.float64 if arrays["a"].dtype == jnp.float64 else jnp.float32
    golds = {"a": gold.a, "b": gold.b, "c": gold.c}

    def errors(a, b, c):
        return tuple(
            jnp.mean(jnp.abs(x.astype(acc) - golds[name]), dtype=acc)
            for name, x in zip(ARRAY_NAMES, (a, b, c), strict=True)
        )

    out = jax.jit(errors, out_shardings=(placement.replicated,) * 3)(
        *(arrays[name] for name in ARRAY_NAMES)
    )
    return {name: _host_scalar(x) for name, x in zip(ARRAY_NAMES, out, strict=True)}


def _host_scalar(x: jax.Array) -> float:
    """A replicated scalar's value; reads this process's copy, so it works across hosts."""
    return float(np.asarray(x.addressable_data(0)))


def validate(
    arrays: dict[str, jax.Array],
    dot_sum: jax.Array | None,
    kernels: str,
    num_times: int,
    precision: str,
    placement: Placement,
) -> Validation:
    """Checks the arrays (and Dot's sum) after `num_times` iterations of the run order `kernels`.

    bfloat16 is checked against both roundings (`gold_values`) and keeps the closer one.
    """
    elements = arrays["a"].shape[0]
    roundings = ROUNDINGS if precision == "bfloat16" else ROUNDINGS[:1]
    results = [
        _validate_against(
            arrays,
            dot_sum,
            gold_values(kernels, num_times, precision, elements, r),
            precision,
            placement,
        )
        for r in roundings
    ]
    return min(results, key=lambda v: (not v.passed, max(c.error for c in v.checks)))


def _validate_against(
    arrays, dot_sum, gold: Gold, precision: str, placement: Placement
) -> Validation:
    errors = mean_abs_errors(arrays, gold, placement)
    checks = []
    for name in ARRAY_NAMES:
        g = getattr(gold, name)
        relative = g != 0
        error = errors[name] / abs(g) if relative else errors[name]
        checks.append(Check(name, error, ARRAY_TOLERANCE[precision], relative))
    if gold.dot is not None and dot_sum is not None:
        checks.append(dot_check(_host_scalar(dot_sum), gold, precision, arrays["a"].shape[0]))
    return Validation(gold=gold, checks=tuple(checks))


def dot_check(total: float, gold: Gold, precision: str, elements: int) -> Check:
    """Dot's sum against the gold value, with the tolerance for its size (`dot_tolerance`)."""
    tolerance, basis = dot_tolerance(precision, elements)
    return Check("dot", abs(total - gold.dot) / abs(gold.dot), tolerance, True, basis)
