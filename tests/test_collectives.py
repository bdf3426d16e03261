"""The explicit gradient reduction: every mode × dtype sums the same gradient as the default, and
the step's HLO holds the collectives it claims (element type, replica groups per sub-axis).

The element type is read from the HLO before XLA's passes: XLA:CPU promotes bf16/f16 collectives
to f32 (its `_promoted` reductions), which GPU and TPU do not."""

import re

import jax
import numpy as np
import pytest
from helpers import tiny_config

from hpcai_jax import config as C
from hpcai_jax.data.pipeline import train_batch
from hpcai_jax.engine.collectives import resolve_plan
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.errors import UsageError

REGRESSION = dict(
    model=C.ModelConfig(workload="regression", model="mlp"),
    data=C.DataConfig(dataset="friedman1", train_examples=256, eval_examples=64),
)
# (allreduce, group size, dtype) → parameter tolerance after one step, against flat float32.
OPTIONS = {
    ("flat", 0, "bfloat16"): 2e-3,
    ("flat", 0, "float16"): 2e-4,
    ("flat", 0, "int8"): 2e-3,
    ("hierarchical", 2, "float32"): 1e-6,
    ("hierarchical", 2, "bfloat16"): 2e-3,
    ("2d_torus", 0, "float32"): 1e-6,
}


def _setup(allreduce="flat", group=0, dtype="float32"):
    mesh = C.MeshConfig(
        2, 1, 4, allreduce=allreduce, allreduce_group_size=group, grad_allreduce_dtype=dtype
    )
    return build_setup(tiny_config(mesh=mesh, **REGRESSION))


def _one_step(setup):
    batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 2, 0)
    hlo = setup.train_step.lower(setup.init_state(), batch).compiler_ir("hlo").as_hlo_text()
    state, metrics = setup.train_step(setup.init_state(), batch)
    assert np.all(np.asarray(metrics.finite))
    return jax.tree.map(np.asarray, state.params), hlo


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


@pytest.fixture(scope="module")
def default():
    return _one_step(_setup())


def test_default_sums_in_float32_with_one_flat_all_reduce(default):
    _, hlo = default
    assert _collectives(hlo) == {("all-reduce", "f32", "{{0,1,2,3},{4,5,6,7}}")}


@pytest.mark.parametrize("option", list(OPTIONS), ids=lambda o: "-".join(map(str, o)))
def test_option_matches_the_default(option, default):
    params, hlo = _one_step(_setup(*option))
    jax.tree.map(
        lambda g, w: np.testing.assert_allclose(g, w, atol=OPTIONS[option], rtol=0),
        params,
        default[0],
    )
    ops = _collectives(hlo)
    mode, _, dtype = option
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


def test_plans_group_the_data_axis():
    torus = resolve_plan(C.MeshConfig(allreduce="2d_torus"), 8, 8)
    assert (torus.inner, torus.outer) == (2, 4)
    assert torus.inner_groups() == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert torus.outer_groups() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    node = resolve_plan(C.MeshConfig(allreduce="hierarchical"), 8, 4)  # 4 devices per process
    assert (node.inner, node.outer) == (4, 2)
