"""Members mapped in one program (--member_strategy=vmap, docs/members.md): every mapped form
trains each member exactly as unroll and as the member alone, counts the same FLOPs, and its
program does not grow with the members."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import tiny_config, train_alone

from hpcai_jax import config as C
from hpcai_jax.data.pipeline import train_batch
from hpcai_jax.engine.compiled import abstract_batch
from hpcai_jax.engine.member_map import resolve_member_map
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.flops.analytic import count_fn
from hpcai_jax.flops.crosscheck import crosscheck
from hpcai_jax.flops.mode import compile_train_step
from hpcai_jax.flops.xla import xla_cost
from hpcai_jax.ops import member_conv

NHWC = ("NHWC", "HWIO", "NHWC")
# (size, in, out, kernel, stride, padding): every convolution kind of the models: 3×3 and
# 1×1, strided, the 7×7 ImageNet stem with explicit padding, VALID, one input channel.
CONVS = [
    (12, 4, 4, 3, 1, "SAME"),
    (12, 4, 8, 3, 2, "SAME"),
    (12, 4, 8, 1, 2, "SAME"),
    (16, 3, 8, 7, 2, [(3, 3), (3, 3)]),
    (11, 1, 4, 3, 2, "VALID"),
]


def _conv_grads(formulation: str | None, mapping, dtype, case):
    size, c, o, k, s, pad = case
    x = jax.random.normal(jax.random.key(0), (3, 2, size, size, c), dtype)
    w = (jax.random.normal(jax.random.key(1), (3, k, k, c, o)) * 0.3).astype(dtype)

    def loss(w, x):
        y = member_conv.conv_general_dilated(x, w, (s, s), pad, dimension_numbers=NHWC)
        return jnp.sum(jnp.sin(y.astype(jnp.float32)))

    grad = jax.value_and_grad(loss, argnums=(0, 1))

    def run(w, x):
        with member_conv.formulation(formulation):
            return mapping(grad, w, x)

    return jax.jit(run)(w, x)


@pytest.mark.slow
@pytest.mark.parametrize("case", CONVS, ids=[f"k{c[3]}s{c[4]}c{c[1]}" for c in CONVS])
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_member_convolutions_equal_lax_in_every_form(case, dtype):
    """Value, input gradient and weight gradient of each member, vmapped ("loop" rule) and in
    a scan, against lax's own convolution vmapped (XLA's grouped form)."""
    vmapped = lambda f, *a: jax.vmap(f)(*a)  # noqa: E731
    ref = _conv_grads(None, vmapped, dtype, case)
    batched = _conv_grads("loop", vmapped, dtype, case)
    scanned = _conv_grads("loop", member_conv.loop, dtype, case)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == jnp.float32 else dict(rtol=2e-2, atol=2e-2)
    for got in (batched, scanned):
        for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
            assert g.dtype == r.dtype and g.shape == r.shape
            scale = max(1.0, float(jnp.max(jnp.abs(r.astype(jnp.float32)))))
            np.testing.assert_allclose(
                np.asarray(g, np.float32) / scale, np.asarray(r, np.float32) / scale, **tol
            )


@pytest.mark.parametrize("case", CONVS[:4], ids=[f"k{c[3]}s{c[4]}" for c in CONVS[:4]])
def test_member_convolutions_count_the_flops_of_lax(case):
    """The hand-written gradients do a convolution's work, none on the padding: the analytic
    count (XLA's rules) of a scanned member equals lax's autodiff, FLOP for FLOP."""
    size, c, o, k, s, pad = case
    x, w = jnp.ones((2, 2, size, size, c)), jnp.ones((2, k, k, c, o))

    def loss(w, x):
        y = member_conv.conv_general_dilated(x, w, (s, s), pad, dimension_numbers=NHWC)
        return jnp.sum(y)

    grad = jax.grad(loss, argnums=(0, 1))

    def mapped(w, x):
        with member_conv.formulation("loop"):
            return member_conv.loop(grad, w, x)

    lax_count = count_fn(jax.vmap(grad), w, x, batch=1).total("xla")
    assert count_fn(mapped, w, x, batch=1).total("xla") == lax_count


def test_outside_a_formulation_the_models_convolution_is_lax():
    """One member's program is unchanged: no custom rule is traced without the engine's block."""
    x, w = jnp.ones((1, 8, 8, 2)), jnp.ones((3, 3, 2, 4))
    jaxpr = jax.make_jaxpr(
        lambda x, w: member_conv.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC)
    )(x, w)
    assert [e.primitive.name for e in jaxpr.eqns] == ["conv_general_dilated"]
    with member_conv.formulation("loop"):
        inside = jax.make_jaxpr(
            lambda x, w: member_conv.conv_general_dilated(
                x, w, (1, 1), "SAME", dimension_numbers=NHWC
            )
        )(x, w)
    assert [e.primitive.name for e in inside.eqns] != ["conv_general_dilated"]


STEPS = 2
MAPPED = {
    "unroll": C.MeshConfig(4, 2, 4, member_strategy="unroll"),
    "scan": C.MeshConfig(4, 2, 4, member_strategy="vmap", member_map="scan"),
    "batched": C.MeshConfig(4, 2, 4, member_strategy="vmap", member_map="batched"),
}


def _trained(dtype: str, mesh: C.MeshConfig):
    setup = build_setup(tiny_config(mesh=mesh, model=C.ModelConfig(dtype=dtype)))
    state = setup.init_state()
    for t in range(STEPS):
        batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 4, t)
        state, metrics = setup.train_step(state, batch)
    assert np.all(np.asarray(metrics.finite))
    return setup, jax.tree.map(np.asarray, (state.params, state.model_state, state.loss_scale))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_mapped_members_train_as_unrolled_and_alone(dtype):
    """ResNet members (BatchNorm over `data` inside each member, P_degree 4, two members per
    device) after STEPS steps: scan and batched equal unroll within float tolerance, and, in
    float32, each member trained alone; float16 carries its loss scale through the map."""
    # batched's convolutions are scan's (the same rule); in float32 only, for the suite's time
    names = list(MAPPED) if dtype == "float32" else ["unroll", "scan"]
    runs = {name: _trained(dtype, MAPPED[name]) for name in names}
    assert runs["scan"][0].member_map == "scan" and runs["unroll"][0].member_strategy == "unroll"
    want = runs["unroll"][1]
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == "float32" else dict(rtol=3e-2, atol=3e-3)
    for name in names[1:]:
        jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, **tol), runs[name][1], want)
    if dtype == "float16":
        assert runs["scan"][1][2] is not None  # the loss scale travelled through the map
    if dtype == "float32":
        setup = runs["scan"][0]
        for m in range(4):
            ref = train_alone(setup, m, STEPS)
            got = jax.tree.map(lambda x, m=m: x[m], runs["scan"][1][:2])
            jax.tree.map(
                lambda g, w: np.testing.assert_allclose(g, np.asarray(w), **tol),
                got,
                (ref.params, ref.model_state),
            )


def _step_flops(mesh: C.MeshConfig):
    config = tiny_config(mesh=mesh)
    build = compile_train_step(config)
    cost = xla_cost(build.compiled, build.num_devices, build.lowered, build.counted)
    return build, cost, crosscheck(config, cost.flops)


@pytest.mark.slow
def test_every_strategy_counts_the_same_flops():
    """The analytic walk of the step is the same for every strategy; XLA's count of a mapped
    step comes from its loops written out (a loop's body is counted once otherwise) and agrees
    with it as tightly as unroll's compiled count does."""
    figures = {name: _step_flops(mesh) for name, mesh in MAPPED.items()}
    walks = {n: f[2].analytic["train_step"]["xla_rules"] for n, f in figures.items()}
    for name in ("scan", "batched"):
        build, cost, cross = figures[name]
        assert build.counted is not None and "written out" in cost.note
        # 0.02 % apart: the walk of autodiff's strided weight-gradient convolutions (unroll)
        # counts a few taps on the padding that the per-tap products leave out.
        assert walks[name] == pytest.approx(walks["unroll"], rel=5e-4)
        assert cross.xla_over_analytic == pytest.approx(1.0, abs=0.02)
        assert cross.crosscheck_ok
    assert figures["unroll"][0].counted is None


def _program_size(members_per_device: int, strategy: str) -> int:
    config = tiny_config(
        mesh=C.MeshConfig(
            members_per_device,
            members_per_device,
            1,
            member_strategy=strategy,
            member_map="scan",
        )
    )
    setup = build_setup(config, devices=jax.devices()[:1], open_data=False)
    batch = abstract_batch(setup.mesh, setup.layout, 16, setup.workload.spec.fields)
    return len(setup.train_step.lower(setup.abstract_state, batch).as_text(debug_info=False))


@pytest.mark.slow
def test_the_mapped_program_does_not_grow_with_the_members():
    """The compile-time claim without a clock: the scan step's program at 16 members per device
    is the size of its program at 2, where unroll's grows with the members."""
    scan = {m: _program_size(m, "vmap") for m in (2, 16)}
    assert scan[16] == pytest.approx(scan[2], rel=0.02)
    assert _program_size(4, "unroll") > 1.7 * _program_size(2, "unroll")


def test_member_map_resolution():
    assert resolve_member_map("auto", "cpu", "float32")[0] == "scan"
    assert resolve_member_map("batched", "cpu", "float32") == ("batched", "--member_map")
    how, why = resolve_member_map("scan", "gpu", "int8")
    assert how == "grouped" and "qwix" in why
    assert resolve_member_map("auto", "gpu", "bfloat16")[0] == "batched"
