"""Members mapped in one program (--member_strategy=vmap, docs/members.md): every mapped form
trains each member exactly as unroll and as the member alone, counts the same FLOPs, and its
program does not grow with the members."""

import ast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import ROOT, tiny_config, train_alone
from jax import lax

from hpcai_jax import config as C
from hpcai_jax import member_forms
from hpcai_jax.data.pipeline import train_batch
from hpcai_jax.engine.compiled import abstract_batch, compile_abstract_step
from hpcai_jax.engine.member_map import resolve_member_map
from hpcai_jax.engine.plan import MemberMapping
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.errors import UsageError
from hpcai_jax.flops.analytic import count_fn
from hpcai_jax.flops.crosscheck import analytic_figures, crosscheck
from hpcai_jax.ops import member_conv
from hpcai_jax.ops.member_conv import MemberConv
from hpcai_jax.xla_cost import xla_cost

NHWC = ("NHWC", "HWIO", "NHWC")
# (height, width, in, out, kernel, strides, padding): every convolution kind of the models:
# 3×3 and 1×1 (stride 1: ResNet-50's bottleneck, the detector's heads; and strided), the 7×7
# ImageNet stem with explicit padding, VALID, one input channel, a non-square input, strides
# (2, 1).
CONVS = [
    (12, 12, 4, 4, 3, (1, 1), "SAME"),
    (12, 12, 4, 8, 3, (2, 2), "SAME"),
    (12, 12, 4, 8, 1, (2, 2), "SAME"),
    (9, 9, 8, 4, 1, (1, 1), "SAME"),
    (16, 16, 3, 8, 7, (2, 2), [(3, 3), (3, 3)]),
    (11, 11, 1, 4, 3, (2, 2), "VALID"),
    (12, 9, 4, 4, 3, (2, 1), "SAME"),
]
CONV_IDS = [f"{h}x{w}c{c}k{k}s{s[0]}{s[1]}" for h, w, c, _, k, s, _ in CONVS]
MEMBERS = 3


def _operands(case, dtype):
    h, w, c, o, k, _, _ = case
    x = jax.random.normal(jax.random.key(0), (MEMBERS, 2, h, w, c), dtype)
    kernel = (jax.random.normal(jax.random.key(1), (MEMBERS, k, k, c, o)) * 0.3).astype(dtype)
    return kernel, x


def _loss(conv, case):
    """(loss, output) of one member: a sum of sines, so that every output's gradient differs."""
    *_, strides, pad = case

    def loss(w, x):
        y = conv(x, w, strides, pad, dimension_numbers=NHWC)
        return jnp.sum(jnp.sin(y.astype(jnp.float32))), y

    return jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)


def _every_form(case, dtype):
    """Output, weight gradient and input gradient of each member in every formulation (one
    program for them all: one compile), and lax's autodiff member by member (the reference)."""
    ref = _loss(lax.conv_general_dilated, case)
    loop = MemberConv("loop")
    forms = {
        "loop vmapped": (loop, False),
        "loop scanned": (loop, True),
        "im2col": (MemberConv("im2col"), False),
        "grouped_vjp": (MemberConv("grouped_vjp"), False),
        "grouped": (MemberConv(None), False),
    }

    def run(w, x):
        out = {}
        for name, (member, scanned) in forms.items():
            grad = _loss(member.conv_general_dilated, case)
            out[name] = member.loop(grad, w, x) if scanned else jax.vmap(grad)(w, x)
        each = [ref(w[m], x[m]) for m in range(MEMBERS)]
        return out, jax.tree.map(lambda *a: jnp.stack(a), *each)

    return jax.jit(run)(*_operands(case, dtype))


@pytest.mark.slow
@pytest.mark.parametrize("case", CONVS, ids=CONV_IDS)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_member_convolutions_equal_lax_in_every_form(case, dtype):
    """Value, output, weight gradient and input gradient of each member, in every formulation
    (ops/member_conv.py), against autodiff of lax.conv_general_dilated member by member."""
    forms, ref = _every_form(case, dtype)
    # bf16: a few bf16 roundings of a value ~1 apart at most (im2col accumulates in f32).
    tol = dict(rtol=2e-5, atol=2e-5) if dtype == jnp.float32 else dict(rtol=2e-2, atol=2e-2)
    for name, got in forms.items():
        for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True):
            assert g.dtype == r.dtype and g.shape == r.shape, name
            scale = max(1.0, float(jnp.max(jnp.abs(r.astype(jnp.float32)))))
            np.testing.assert_allclose(
                np.asarray(g, np.float32) / scale,
                np.asarray(r, np.float32) / scale,
                err_msg=name,
                **tol,
            )


def _dot_dtypes(formulation: str, case) -> list[tuple[str, str]]:
    """(operand dtype, result dtype) of every product in the bf16 gradient's program."""
    grad = _loss(MemberConv(formulation).conv_general_dilated, case)

    def run(w, x):
        return jax.vmap(grad)(w, x)

    text = jax.jit(run).lower(*_operands(case, jnp.bfloat16)).as_text()
    ops = [line for line in text.splitlines() if "dot_general" in line or "convolution" in line]
    return [
        (line.split("tensor<")[1].split(">")[0].split("x")[-1], line.rsplit("x", 1)[-1])
        for line in ops
    ]


def test_the_bf16_weight_gradient_accumulates_in_float32():
    """im2col: every product of the bf16 gradient (the weight gradient included) takes bf16
    operands and gives float32, on every backend (preferred_element_type); grouped_vjp leaves
    the accumulation to the backend (cuDNN's is float32; XLA:CPU computes bf16 products in
    float32): its products give bf16."""
    case = CONVS[1]
    im2col = _dot_dtypes("im2col", case)
    assert len(im2col) == 3 and all(r.startswith("f32") for _, r in im2col[1:]), im2col
    assert all(o == "bf16" for o, _ in im2col)
    grouped = _dot_dtypes("grouped_vjp", case)
    assert grouped and all(o == "bf16" and r.startswith("bf16") for o, r in grouped), grouped


@pytest.mark.parametrize("case", CONVS[:5], ids=CONV_IDS[:5])
def test_member_convolutions_count_the_flops_of_lax(case):
    """The hand-written gradients do a convolution's work, none on the padding: the analytic
    count (XLA's rules) of a scanned member equals lax's autodiff, FLOP for FLOP."""
    h, wd, c, o, k, s, pad = case
    x, w = jnp.ones((2, 2, h, wd, c)), jnp.ones((2, k, k, c, o))

    def grad_of(conv):
        loss = lambda w, x: jnp.sum(conv(x, w, s, pad, dimension_numbers=NHWC))  # noqa: E731
        return jax.grad(loss, argnums=(0, 1))

    loop = MemberConv("loop")
    mapped = lambda w, x: loop.loop(grad_of(loop.conv_general_dilated), w, x)  # noqa: E731
    lax_count = count_fn(jax.vmap(grad_of(lax.conv_general_dilated)), w, x, batch=1).total("xla")
    assert count_fn(mapped, w, x, batch=1).total("xla") == lax_count


def test_the_plain_member_convolution_is_lax():
    """One member's program is unchanged: MemberConv() traces lax's convolution, no custom
    rule; a formulation traces its custom rule."""
    x, w = jnp.ones((1, 8, 8, 2)), jnp.ones((3, 3, 2, 4))

    def eqns(member):
        conv = member.conv_general_dilated
        fn = lambda x, w: conv(x, w, (1, 1), "SAME", dimension_numbers=NHWC)  # noqa: E731
        return [e.primitive.name for e in jax.make_jaxpr(fn)(x, w).eqns]

    assert eqns(member_conv.PLAIN) == ["conv_general_dilated"]
    assert eqns(MemberConv("loop")) != ["conv_general_dilated"]


STEPS = 2
# Two stages (an identity block, a strided projection block, their BatchNorms): every block
# kind of resnet_small in fewer ops to compile; the model is not the point of these tests.
MODEL = "resnet_tiny"
MAPPED = {
    "unroll": C.MeshConfig(4, 2, 4, member_strategy="unroll"),
    **{
        form: C.MeshConfig(4, 2, 4, member_strategy="vmap", member_map=form)
        for form in member_forms.VMAP_FORMS
    },
}


_TRAINED: dict[tuple[str, C.MeshConfig], tuple] = {}  # one build, compile and training each


def _trained(dtype: str, mesh: C.MeshConfig):
    """(setup, (params, model state, loss scale)) after STEPS steps; kept for the file, so that
    the FLOP test counts the very setups the training tests built and compiled."""
    if (dtype, mesh) not in _TRAINED:
        _TRAINED[dtype, mesh] = _train(dtype, mesh)
    return _TRAINED[dtype, mesh]


def _train(dtype: str, mesh: C.MeshConfig):
    setup = build_setup(tiny_config(mesh=mesh, model=C.ModelConfig(model=MODEL, dtype=dtype)))
    state = setup.init_state()
    for t in range(STEPS):
        batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, 4, t)
        state, metrics = setup.train_step(state, batch)
    assert np.all(np.asarray(metrics.finite))
    return setup, jax.tree.map(np.asarray, (state.params, state.model_state, state.loss_scale))


_ALONE: dict[str, tuple] = {}  # dtype → the reference below: one compile and training each


def _alone(setup) -> tuple:
    """(params, model state) of the 4 members, each trained alone: the reference. `_trained`'s
    setups differ in their mesh and member form, which a member alone does not read (plain
    model, one device: `member_train_step`), and in their dtype, which it does: the tests of
    one dtype share it."""
    dtype = setup.config.model.dtype
    if dtype not in _ALONE:
        each = [train_alone(setup, m, STEPS) for m in range(4)]
        _ALONE[dtype] = jax.tree.map(
            lambda *a: np.stack([np.asarray(x) for x in a]),
            *[(r.params, r.model_state) for r in each],
        )
    return _ALONE[dtype]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_mapped_members_train_as_unrolled_and_alone(dtype):
    """ResNet members (BatchNorm over `data` inside each member, P_degree 4, two members per
    device) after STEPS steps: every --member_map form and unroll equal each member trained
    alone within float tolerance; float16 carries its loss scale through the map. float32
    runs every form and unroll; bfloat16 and float16, for the suite's time, the forms whose
    convolutions differ from float32's checks (scan's are conv_loop's, grouped is XLA's own,
    unroll is autodiff's)."""
    names = list(MAPPED) if dtype == "float32" else ["conv_loop", "batched", "batched_grouped"]
    runs = {name: _trained(dtype, MAPPED[name]) for name in names}
    assert runs["batched"][0].plan.mapping == MemberMapping("batched")
    if dtype == "float32":
        assert runs["unroll"][0].plan.mapping == MemberMapping("unroll")
    want = _alone(runs[names[0]][0])
    tol = dict(rtol=2e-4, atol=2e-5) if dtype == "float32" else dict(rtol=3e-2, atol=3e-3)
    for name in names:
        got = jax.tree.map(np.asarray, runs[name][1][:2])
        jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, **tol), got, want)
        if dtype == "float16":
            assert runs[name][1][2] is not None  # the loss scale travelled through the map


@pytest.mark.slow
def test_members_in_groups_train_as_all_at_once():
    """--member_group=1: the batched members one group after another, equal to all at once."""
    one = _trained("float32", C.MeshConfig(4, 2, 4, member_map="batched", member_group=1))
    assert one[0].member_loop_trips == 2 and one[0].count_step is not None
    want = _alone(one[0])
    tol = dict(rtol=2e-4, atol=2e-5)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, **tol), one[1][:2], want)


def _step_flops(mesh: C.MeshConfig):
    """The float32 step of `mesh` compiled before any state exists, as a run counts it (the
    program `_trained` compiled: the persistent cache's), and its setup's analytic walk."""
    setup = _trained("float32", mesh)[0]
    build = compile_abstract_step(setup, count=True)
    cost = xla_cost(build.compiled, setup.layout.num_devices, build.lowered, build.counted)
    figures = analytic_figures(setup.config, setup=setup)
    return build, cost, crosscheck(setup.config, cost.flops, figures=figures)


@pytest.mark.slow
def test_every_strategy_counts_the_same_flops():
    """The analytic walk of the step is the same for every strategy; XLA's count of a mapped
    step comes from its loops written out (a loop's body is counted once otherwise) and agrees
    with it as tightly as unroll's compiled count does."""
    names = ("unroll", "scan", "batched", "batched_grouped")
    figures = {name: _step_flops(MAPPED[name]) for name in names}
    walks = {n: f[2].analytic["train_step"]["xla_rules"] for n, f in figures.items()}
    for name in names[1:]:
        build, cost, cross = figures[name]
        assert build.counted is not None and "written out" in cost.note
        # 0.02 % apart: the walk of autodiff's strided weight-gradient convolutions (unroll)
        # counts a few taps on the padding that the per-tap products leave out.
        assert walks[name] == pytest.approx(walks["unroll"], rel=5e-4)
        assert cross.xla_over_analytic == pytest.approx(1.0, abs=0.02)
        assert cross.crosscheck_ok
    assert figures["unroll"][0].counted is None


def _program_size(members_per_device: int, strategy: str, form: str = "scan") -> int:
    config = tiny_config(
        mesh=C.MeshConfig(
            members_per_device,
            members_per_device,
            1,
            member_strategy=strategy,
            member_map=form,
        ),
        model=C.ModelConfig(model=MODEL),
    )
    setup = build_setup(config, devices=jax.devices()[:1], open_data=False)
    batch = abstract_batch(setup.mesh, setup.layout, 16, setup.workload.spec.fields)
    return len(setup.train_step.lower(setup.abstract_state, batch).as_text(debug_info=False))


@pytest.mark.slow
def test_the_mapped_program_does_not_grow_with_the_members():
    """The compile-time claim without a clock: the scan and batched steps' programs at 16
    members per device are the size of their programs at 2, where unroll's grows with the
    members."""
    for form in ("scan", "batched"):
        size = {m: _program_size(m, "vmap", form) for m in (2, 16)}
        assert size[16] == pytest.approx(size[2], rel=0.02), form
    assert _program_size(4, "unroll") > 1.7 * _program_size(2, "unroll")


def test_member_map_resolution():
    assert resolve_member_map("auto", "cpu", "float32")[0] == "scan"
    assert resolve_member_map("batched", "cpu", "float32") == ("batched", "--member_map")
    how, why = resolve_member_map("scan", "gpu", "int8")
    assert how == "grouped" and "qwix" in why
    assert resolve_member_map("auto", "gpu", "bfloat16")[0] == "conv_loop"


def test_a_batched_form_that_does_not_fit_is_one_line_before_compiling(monkeypatch):
    """The largest layer's slices against the device's memory, before anything compiles: the
    line names the form, the memory, the layer and a --member_group that fits."""
    from hpcai_jax.engine import setup as setup_module

    config = tiny_config(mesh=C.MeshConfig(4, 4, 1, member_strategy="vmap", member_map="batched"))
    monkeypatch.setattr(setup_module, "device_memory_bytes", lambda device: 20 * 2**20)
    with pytest.raises(UsageError) as e:
        build_setup(config, devices=jax.devices()[:1], open_data=False)
    line = str(e.value)
    assert "\n" not in line and line.startswith("--member_map=batched needs 57.8 MB per device")
    assert "(28×28 16→16 3×3, 4 members of 16 examples batched together)" in line
    assert "the device has 20.97 MB: give --member_group=1 or less" in line
    monkeypatch.setattr(setup_module, "device_memory_bytes", lambda device: 2**30)
    assert build_setup(config, devices=jax.devices()[:1], open_data=False).plan.mapping.form == (
        "batched"
    )


def test_a_batched_decision_that_does_not_fit_names_the_acceptance_not_a_flag(
    monkeypatch, tmp_path
):
    """With --member_map=auto, a form an acceptance's decision chose is not the user's flag:
    the memory line names --acceptance (its file) and what auto took from it."""
    from hpcai_jax.acceptance import render
    from hpcai_jax.acceptance.journal import Journal
    from hpcai_jax.acceptance.members import decision_item
    from hpcai_jax.engine import setup as setup_module

    journal = Journal(tmp_path)
    journal.note(backend="cpu")
    rates = {"vmap scan": 10.0, "ideal": 40.0, "vmap batched": 30.0}
    journal.finish("members", [decision_item(rates, "cpu")])
    render.write(tmp_path)
    path = str(tmp_path / render.JSON_NAME)
    mesh = C.MeshConfig(4, 4, 1, member_strategy="vmap", acceptance=path)
    monkeypatch.setattr(setup_module, "device_memory_bytes", lambda device: 20 * 2**20)
    with pytest.raises(UsageError) as e:
        build_setup(tiny_config(mesh=mesh), devices=jax.devices()[:1], open_data=False)
    line = str(e.value)
    assert "\n" not in line, line
    assert line.startswith(
        f"--member_map=auto (batched, the decision of --acceptance={path}) needs 57.8 MB"
    ), line
    assert "give --member_group=1 or less, or another --member_map" in line


@pytest.mark.parametrize(
    "mesh, expected",
    [
        (
            C.MeshConfig(4, 4, 1, member_strategy="vmap", member_map="scan", member_group=2),
            "--member_group=2: scan runs the members one at a time",
        ),
        (
            C.MeshConfig(4, 4, 1, member_strategy="unroll", member_group=2),
            "--member_group=2: --member_strategy=unroll runs the members one at a time",
        ),
        (
            C.MeshConfig(4, 4, 1, member_strategy="vmap", member_map="batched", member_group=3),
            "--member_group=3 must divide the 4 members per device",
        ),
    ],
)
def test_member_group_errors(mesh, expected):
    with pytest.raises(UsageError, match=expected):
        build_setup(tiny_config(mesh=mesh), devices=jax.devices()[:1], open_data=False)


def test_the_record_names_the_resolved_mapping():
    """mesh.member_mapping: unroll, the form vmap runs (auto resolved), `form/k` in groups."""
    from hpcai_jax.run.record import _mesh

    def mapping(mesh):
        config = tiny_config(mesh=mesh)
        setup = build_setup(config, devices=jax.devices()[:1], open_data=False)
        return _mesh(setup).member_mapping

    assert mapping(C.MeshConfig(4, 4, 1, member_strategy="unroll")) == "unroll"
    assert mapping(C.MeshConfig(4, 4, 1, member_strategy="vmap")) == "scan"  # auto on a CPU
    grouped = C.MeshConfig(4, 4, 1, member_strategy="vmap", member_map="batched", member_group=2)
    assert mapping(grouped) == "batched/2"
    every = C.MeshConfig(4, 4, 1, member_strategy="vmap", member_map="batched", member_group=4)
    assert mapping(every) == "batched"  # all the device's members at once: no groups


# The names under which a function takes the member mapping (or one of the two flags it
# merges): with a string default, a second default beside config.py's would come back.
MAPPING_PARAMETERS = {"how", "form", "mapping", "member_map", "strategy", "member_strategy"}


def _string_defaults(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, function, parameter) of every mapping parameter given a string default."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            positional = [*args.posonlyargs, *args.args]
            defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
            pairs = [
                *zip(positional, defaults, strict=True),
                *zip(args.kwonlyargs, args.kw_defaults, strict=True),
            ]
            found += [
                (node.lineno, getattr(node, "name", "<lambda>"), arg.arg)
                for arg, default in pairs
                if arg.arg in MAPPING_PARAMETERS
                and isinstance(default, ast.Constant)
                and isinstance(default.value, str)
            ]
    return found


def test_no_function_defaults_the_member_mapping_to_a_string():
    """One default per choice: `--member_strategy` and `--member_map` are defaulted in config.py
    (MeshConfig) only; setup resolves them into the step plan, which every builder takes."""
    assert _string_defaults(ast.parse('def f(x, how="scan"): pass')) == [(1, "f", "how")]
    found = [
        (str(path.relative_to(ROOT)), *hit)
        for path in sorted((ROOT / "hpcai_jax").rglob("*.py"))
        for hit in _string_defaults(ast.parse(path.read_text()))
    ]
    assert not found, found


# Where a form's or formulation's name stands for something else, or is a choice of forms to
# measure rather than code a new form changes: lax's scan primitive (flops/analytic.py), the
# smoke sizes' picks (acceptance/sizes.py), the layer table's sequential rows (acceptance/
# member_layers.py: every form whose convolutions loop).
OTHER_MEANINGS = {
    "hpcai_jax/flops/analytic.py": {"scan"},
    "hpcai_jax/acceptance/sizes.py": {"scan", "batched"},
    "hpcai_jax/acceptance/member_layers.py": {"loop"},
}


def _named(names: set[str]) -> dict[str, set[str]]:
    """Package file → the names of `names` its code spells as a string."""
    found = {}
    for path in sorted((ROOT / "hpcai_jax").rglob("*.py")):
        tree = ast.parse(path.read_text())
        hits = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names}
        rel = path.relative_to(ROOT).as_posix()
        if hits - OTHER_MEANINGS.get(rel, set()):
            found[rel] = hits
    return found


def test_a_new_member_form_touches_at_most_three_package_files():
    """A form is a row of hpcai_jax/member_forms.py; a new formulation of the convolutions is
    ops/member_conv.py's name and ops/member_batched.py's code. No other package file spells a
    --member_map form or a formulation (`unroll` is also --member_strategy's word)."""
    forms = set(member_forms.VMAP_FORMS)
    formulations = set(member_conv.FORMULATIONS)
    touched = set(_named(forms | formulations))
    assert touched == {
        "hpcai_jax/member_forms.py",
        "hpcai_jax/ops/member_conv.py",
        "hpcai_jax/ops/member_batched.py",
    }, touched
    assert set(_named(forms)) == {"hpcai_jax/member_forms.py"}
