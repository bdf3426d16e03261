"""The explicit gradient reduction: every mode × dtype sums the devices' local gradients within a
bound derived from its dtype's precision, and the step's HLO holds the collectives it claims
(element type, replica groups per sub-axis).

The comparison is at the gradient level (`step.build_gradient_step`: the train step's own local
gradients and reduction code, without the update), against the exact sum (float64, in numpy) of
the very local gradients that went in; flat float32 is held to float32's bound like the others.

The element type is read from the HLO before XLA's passes: XLA:CPU promotes bf16/f16 collectives
to f32 (its `_promoted` reductions), which GPU and TPU do not."""

import re
from dataclasses import replace

import jax
import numpy as np
import pytest
from helpers import tiny_config
from jax.sharding import NamedSharding

from hpcai_jax import config as C
from hpcai_jax.axes import BATCH_SPEC
from hpcai_jax.data.pipeline import train_batch
from hpcai_jax.engine.collectives import INT8_MAX, resolve_plan
from hpcai_jax.engine.compiled import abstract_batch
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.engine.step import build_gradient_step, build_train_step, build_update_step
from hpcai_jax.errors import UsageError

REGRESSION = dict(
    model=C.ModelConfig(workload="regression", model="mlp"),
    data=C.DataConfig(dataset="friedman1", train_examples=256, eval_examples=64),
)
# (allreduce, group size, dtype): mesh ensemble 2 × data 4, so P_degree = 4.
OPTIONS = [
    ("flat", None, "float32"),
    ("flat", None, "bfloat16"),
    ("flat", None, "float16"),
    ("flat", None, "int8"),
    ("hierarchical", 2, "float32"),
    ("hierarchical", 2, "bfloat16"),
    ("2d_torus", None, "float32"),
]
UNIT_ROUNDOFF = {  # u = eps / 2: a rounding to nearest errs by at most u relative
    "float32": 2.0**-24,
    "bfloat16": 2.0**-8,
    "float16": 2.0**-11,
}
SUBNORMAL_HALF = {"float32": 2.0**-150, "bfloat16": 2.0**-134, "float16": 2.0**-25}


def _setup(allreduce="flat", group=None, dtype="float32"):
    mesh = C.MeshConfig(
        2, 1, 4, allreduce=allreduce, allreduce_group_size=group, grad_allreduce_dtype=dtype
    )
    return build_setup(tiny_config(mesh=mesh, **REGRESSION))


@pytest.fixture(scope="module")
def inputs():
    """One state and batch for every option: the local gradients are the same computation."""
    setup = _setup()
    return setup.init_state(), train_batch(setup.datasets.train, setup.sampler, setup.mesh, 2, 0)


def bound(dtype: str, local: np.ndarray) -> np.ndarray:
    """How far the reduced gradient may be from Σ_i local_i, per element, for local gradients
    [M, P, ...] of one parameter (float64).

    Float types: each device's gradient is rounded once to the dtype (relative error ≤ u, or half
    the smallest subnormal near zero), then summed in the dtype with P − 1 additions along any
    path (flat, or reduce-scatter + all-reduce + all-gather: XLA promises no order, so the depth
    is P − 1, not log2 P), each rounded with |error| ≤ u × (a partial sum ≤ Σ|g_i|). First
    order: (1 + (P − 1)) × (u Σ_i |g_i| + subnormal/2). bfloat16: 4 × 2^-8 = 1.6 % of Σ|g_i|.

    int8: device i sends round(g / s_i) with s_i = max|g_i| / 127 over the member's tensor on
    that device (collectives._int8_sum), so each element errs by ≤ s_i / 2: Σ_i s_i / 2.

    Every mode also sums in float32 somewhere (the float32 mode, the int8 dequantized sum, the
    cast back): P × 2^-24 × Σ|g_i| covers it.
    """
    p = local.shape[1]
    abs_sum = np.abs(local).sum(axis=1)
    f32 = p * UNIT_ROUNDOFF["float32"] * abs_sum
    if dtype == "int8":
        per_tensor = tuple(range(2, local.ndim))
        scales = np.abs(local).max(axis=per_tensor, keepdims=True) / INT8_MAX  # [M, P, 1...]
        return f32 + scales.sum(axis=1) / 2
    roundings = 1 + (p - 1)
    return f32 + roundings * (UNIT_ROUNDOFF[dtype] * abs_sum + SUBNORMAL_HALF[dtype])


def _collectives(hlo):
    """(op, element type, replica groups) of the gradient's collectives (not the loss's pmean,
    not the metrics gathered for the host)."""
    found = set()
    for line in hlo.splitlines():
        op = re.search(r"= (\w+)\[[^\]]*\]\S* (all-reduce|reduce-scatter|all-gather)\(", line)
        if op and "member_metrics" not in line and "psum_invariant" not in line:
            groups = re.search(r"replica_groups=(\{[{}\d,]*\}|\[[^ ]*)", line)
            if op[1] != "s32":  # the members' finite flags, gathered over `ensemble`
                found.add((op[2], op[1], groups[1] if groups else None))
    return found


def test_default_sums_in_float32_with_one_flat_all_reduce(inputs):
    hlo = _setup().train_step.lower(*inputs).compiler_ir("hlo").as_hlo_text()
    assert _collectives(hlo) == {("all-reduce", "f32", "{{0,1,2,3},{4,5,6,7}}")}


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: "-".join(map(str, o)))
def test_option_sums_the_local_gradients_within_its_dtype_bound(option, inputs):
    setup = _setup(*option)
    mode, _, dtype = option
    local, summed = build_gradient_step(setup.workload, setup.plan)(*inputs)
    for (key, g), s in zip(
        jax.tree_util.tree_leaves_with_path(local), jax.tree.leaves(summed), strict=True
    ):
        path, g, s = jax.tree_util.keystr(key), np.asarray(g, np.float64), np.asarray(s)
        exact, limit = g.sum(axis=1), bound(dtype, g)
        assert np.any(exact != 0), path
        # Every device of a member holds the same sum.
        np.testing.assert_array_equal(s, np.broadcast_to(s[:, :1], s.shape), err_msg=path)
        error = np.abs(s[:, 0] - exact)
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(error - limit), error.shape))
        within = bool(np.all(error <= limit))
        assert within, (
            f"{path}: |reduced − Σ local| = {error[worst]:.3g} > bound {limit[worst]:.3g} "
            f"at {worst} (sum {exact[worst]:.3g}); worst ratio {np.max(error / limit):.3g}"
        )
    ops = _collectives(setup.train_step.lower(*inputs).compiler_ir("hlo").as_hlo_text())
    elem = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int8": "s8"}[dtype]
    if mode == "flat" and dtype != "int8":
        assert ("all-reduce", elem) in {(op, t) for op, t, _ in ops}
    elif dtype == "int8":
        assert ("all-gather", "s8") in {(op, t) for op, t, _ in ops}
        assert not any(op == "all-reduce" and t == "s8" for op, t, _ in ops)
    else:
        # Mesh (ensemble 2 × data 4): nodes of 2 neighbours, across nodes stride 2.
        inside, across = "{{0,1},{2,3},{4,5},{6,7}}", "{{0,2},{1,3},{4,6},{5,7}}"
        assert ("reduce-scatter", elem, inside) in ops
        assert ("all-reduce", elem, across) in ops
        assert ("all-gather", elem, inside) in ops


@pytest.mark.parametrize(
    "mesh, p, message",
    [
        (C.MeshConfig(allreduce="2d_torus"), 7, "P_degree=7 does not factor into two sides > 1"),
        (C.MeshConfig(allreduce="hierarchical", allreduce_group_size=3), 4, "must divide"),
        (C.MeshConfig(allreduce="hierarchical"), 4, "devices per process"),  # one node: 8 ≥ 4
        (C.MeshConfig(allreduce="2d_torus", grad_allreduce_dtype="int8"), 4, "flat only"),
    ],
)
def test_bad_combinations_fail_in_one_line(mesh, p, message):
    with pytest.raises(UsageError, match=message) as err:
        resolve_plan(mesh, p, 8)
    assert "\n" not in str(err.value)


def test_torus_and_hierarchical_group_p8_differently_in_the_hlo():
    """P_degree = 8 on 2 processes of 4 devices: the torus is 2 × 4 (the squarest factoring),
    hierarchical groups a node's 4 devices. Their plans differ, and so do the replica groups
    of the step each compiles (mesh ensemble 1 × data 8, device i at data position i)."""
    setup = build_setup(tiny_config(mesh=C.MeshConfig(1, 1, 8), **REGRESSION))
    state = setup.abstract_state
    batch = abstract_batch(setup.mesh, setup.layout, 16, setup.workload.spec.fields)
    claimed = {
        "2d_torus": (
            (2, 4),
            "{{0,1},{2,3},{4,5},{6,7}}",  # inside: the inner side, contiguous
            "{{0,2,4,6},{1,3,5,7}}",  # across: the other side
        ),
        "hierarchical": ((4, 2), "{{0,1,2,3},{4,5,6,7}}", "{{0,4},{1,5},{2,6},{3,7}}"),
    }
    seen = {}
    for mode, (sides, inside, across) in claimed.items():
        plan = resolve_plan(C.MeshConfig(allreduce=mode), 8, 4)  # 4 devices per process
        assert (plan.inner, plan.outer) == sides, mode
        step = build_train_step(setup.workload, setup.tx, replace(setup.plan, allreduce=plan))
        ops = _collectives(step.lower(state, batch).compiler_ir("hlo").as_hlo_text())
        assert ops == {
            ("reduce-scatter", "f32", inside),
            ("all-reduce", "f32", across),
            ("all-gather", "f32", inside),
        }, (mode, ops)
        seen[mode] = ops
    assert seen["2d_torus"] != seen["hierarchical"]


# (allreduce, group size, dtype, model dtype): every option that casts or quantizes, and int8
# under float16 training, where a non-finite gradient must skip the step instead.
NAN_OPTIONS = [
    ("flat", None, "int8", "float32"),
    ("flat", None, "bfloat16", "float32"),
    ("flat", None, "float16", "float32"),
    ("hierarchical", 2, "float32", "float32"),
    ("2d_torus", None, "bfloat16", "float32"),
    ("flat", None, "int8", "float16"),
]


@pytest.fixture(scope="module")
def four_members():
    """model dtype → (setup, state): M = 4, two per device, P_degree = 4; one init each."""
    built = {}

    def get(model_dtype):
        if model_dtype not in built:
            model = C.ModelConfig(workload="regression", model="mlp", dtype=model_dtype)
            config = tiny_config(mesh=C.MeshConfig(4, 2, 4), model=model, data=REGRESSION["data"])
            setup = build_setup(config)
            built[model_dtype] = setup, setup.init_state()
        return built[model_dtype]

    return get


@pytest.mark.parametrize("option", NAN_OPTIONS, ids=lambda o: "-".join(map(str, o)))
def test_a_nan_on_one_device_reaches_only_its_members_flag(option, four_members):
    """M = 4, two per device, P_degree = 4: a NaN in member 1's local gradient on data position 2
    (member 0 shares its devices) comes out of every reduction as member 1's fault: its finite
    flag false (float32 training), or its step skipped (float16); members 0, 2, 3 take the
    step they take without the NaN. int8 used to quantize the NaN away (scale 1 → finite)."""
    mode, group, dtype, model_dtype = option
    setup, state = four_members(model_dtype)
    mesh = C.MeshConfig(allreduce=mode, allreduce_group_size=group, grad_allreduce_dtype=dtype)
    plan = resolve_plan(mesh, 4, 8)
    update = build_update_step(setup.tx, replace(setup.plan, allreduce=plan))
    sharding = NamedSharding(setup.mesh, BATCH_SPEC)
    rng = np.random.default_rng(0)
    clean = jax.tree.map(
        lambda p: rng.normal(0, 1e-2, (4, 4, *p.shape[1:])).astype(np.float32), state.params
    )
    poisoned = jax.tree.map(np.copy, clean)
    jax.tree.leaves(poisoned)[0][1, 2].flat[0] = np.nan

    def run(local):
        local = jax.tree.map(lambda g: jax.device_put(g, sharding), local)
        new, finite, skipped = update(state, local, state.model_state)
        params = jax.tree.map(np.asarray, new.params)
        return params, np.asarray(finite), None if skipped is None else np.asarray(skipped)

    want, want_finite, _ = run(clean)
    got, finite, skipped = run(poisoned)
    assert want_finite.all()
    before = jax.tree.map(np.asarray, state.params)
    if model_dtype == "float16":
        np.testing.assert_array_equal(finite, [True] * 4)  # a skipped step is no divergence
        np.testing.assert_array_equal(skipped, [0, 1, 0, 0])
        jax.tree.map(lambda g, b: np.testing.assert_array_equal(g[1], b[1]), got, before)
    else:
        np.testing.assert_array_equal(finite, [True, False, True, True])
    for m in (0, 2, 3):
        jax.tree.map(lambda g, w, m=m: np.testing.assert_array_equal(g[m], w[m]), got, want)
