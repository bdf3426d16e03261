"""Every shipped flagfile parses and validates; flags override flagfiles; every declared bound,
choice and format refuses what it should with a one-line message naming its flag."""

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, assert_one_line_error, run_in_process

from hpcai_jax import config as C
from hpcai_jax import fields
from hpcai_jax import flags as hflags
from hpcai_jax.check_config import CheckConfig
from hpcai_jax.errors import UsageError
from hpcai_jax.settings import Settings
from hpcai_jax.stream.config import StreamConfig

FLAGFILES = sorted((ROOT / "configs").glob("*.flags"))


@pytest.fixture
def parse():
    def _parse(*argv):
        hflags.FLAGS.unparse_flags()
        hflags.FLAGS(["hpcai_jax", *argv])
        return hflags.config_from_flags()

    yield _parse
    hflags.FLAGS.unparse_flags()


def test_there_are_configs():
    names = {p.name for p in FLAGFILES}
    assert {"quickstart.flags", "resnet50_imagenet.flags", "synthetic_resnet50.flags"} <= names


@pytest.mark.parametrize("path", FLAGFILES, ids=lambda p: p.name)
def test_flagfile_parses_and_validates(path: Path, parse, monkeypatch):
    monkeypatch.chdir(ROOT)  # flagfiles include others by repo-relative path
    config = parse(f"--flagfile={path}")
    assert isinstance(config, C.RunConfig)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("#") and any(
        "python -m hpcai_jax.main" in line for line in lines if line.startswith("#")
    )


def test_command_line_overrides_flagfile(parse, monkeypatch):
    monkeypatch.chdir(ROOT)
    config = parse("--flagfile=configs/quickstart.flags", "--ensemble_size=8", "--seed=7")
    assert config.mesh.ensemble_size == 8 and config.train.seed == 7
    assert config.model.model == "resnet_small"


def test_the_quickstart_target_is_one_its_configuration_reaches(parse, monkeypatch):
    """A first run that misses its own target reads as a failure: the target sits below the
    ensemble accuracy docs/measurements.md gives for the quickstart."""
    monkeypatch.chdir(ROOT)
    config = parse("--flagfile=configs/quickstart.flags")
    row = next(
        line
        for line in (ROOT / "docs" / "measurements.md").read_text().splitlines()
        if line.startswith("| **quickstart** |")
    )
    reached = float(row.split("|")[4].strip(" *"))
    assert config.results.target_quality <= reached - 0.01, (config.results.target_quality, reached)


def _scored(dataset="imagenet2012", model="resnet50", **results):
    return Settings(
        data=C.DataConfig(dataset=dataset),
        model=C.ModelConfig(model=model),
        results=C.ResultsConfig(**results),
    ).validate()


def test_official_target_belongs_to_resnet50_on_imagenet():
    target = _scored().quality_target()
    assert (target.target, target.exponent, target.metric) == (0.763, 5.0, "top1_accuracy")
    assert target.target_is_official and target.exponent_is_official
    assert _scored(dataset="imagenet2012:5.1.0").quality_target().target_is_official
    assert _scored(target_quality=0.763).quality_target().target_is_official
    other = _scored(target_quality=0.7).quality_target()
    assert other.target == 0.7 and not other.target_is_official


@pytest.mark.parametrize(
    "dataset,model",
    [("fashion_mnist", "resnet_small"), ("imagenet2012", "resnet18"), ("cifar10", "resnet50")],
)
def test_any_other_run_must_name_its_target(dataset, model):
    with pytest.raises(
        UsageError,
        match=f"--target_quality: no official target for "
        f"--workload=image_classification --model={model} "
        f"--dataset={dataset}",
    ):
        _scored(dataset=dataset, model=model)
    target = _scored(dataset=dataset, model=model, target_quality=0.9).quality_target()
    assert (target.target, target.exponent, target.target_is_official) == (0.9, 5.0, False)


def test_the_cross_rules_leave_what_works_alone():
    """A warm-up as long as the run, a profile window ending at the last step, checkpoints with
    their directory, and --steps (whose epochs the data decides) pass."""
    data = C.DataConfig(dataset="synthetic")
    Settings(
        data=data, optim=C.OptimConfig(warmup_epochs=3), train=C.TrainConfig(epochs=3)
    ).validate()
    Settings(
        data=data, optim=C.OptimConfig(warmup_epochs=5), train=C.TrainConfig(steps=3)
    ).validate()
    Settings(
        data=data, results=C.ResultsConfig(profile_steps="1:3"), train=C.TrainConfig(steps=3)
    ).validate()
    Settings(
        data=data, reliability=C.ReliabilityConfig(checkpoint_dir="ck", checkpoint_every="5")
    ).validate()


def test_unscored_runs_need_no_target():
    Settings(data=C.DataConfig(dataset="synthetic")).validate()
    Settings(mode="flops").validate()
    Settings(mode="stream").validate()


def test_quality_exponent_zero_means_zero():
    target = _scored(quality_exponent=0.0).quality_target()
    assert target.exponent == 0.0 and not target.exponent_is_official
    assert _scored(quality_exponent=None).quality_target().exponent == 5.0


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(train=C.TrainConfig(epochs=0, steps=0)), "expected epochs > 0 or steps > 0"),
        (dict(optim=C.OptimConfig(momentum=1.0)), r"--momentum=1.0: expected in \[0, 1\)"),
        (dict(results=C.ResultsConfig(target_quality=1.5)), "--target_quality=1.5"),
        (dict(results=C.ResultsConfig(quality_exponent=-2)), "--quality_exponent=-2"),
        (dict(results=C.ResultsConfig(flops_source="guess")), "--flops_source='guess'"),
        (dict(mesh=C.MeshConfig(ensemble_size=0)), "--ensemble_size=0"),
        (dict(train=C.TrainConfig(eval_every_epochs=-1)), "--eval_every_epochs=-1: expected >= 0"),
        (dict(train=C.TrainConfig(seed=-1)), r"--seed=-1: expected an integer in \[0, 2\^32\)"),
        (dict(train=C.TrainConfig(seed=2**32)), "--seed=4294967296: expected an integer"),
        (dict(optim=C.OptimConfig(learning_rate=float("inf"))), "--learning_rate=inf: expected a"),
        (dict(train=C.TrainConfig(epochs=float("nan"), steps=3)), "--epochs=nan: expected a fin"),
        (dict(results=C.ResultsConfig(target_quality=float("nan"))), "--target_quality=nan"),
        (dict(stream=StreamConfig(array_mib=float("inf"))), "--array_mib=inf: expected a"),
        (
            dict(train=C.TrainConfig(stop_at_target=True)),
            "--stop_at_target: needs --eval_every_epochs > 0",
        ),
        (
            dict(
                data=C.DataConfig(dataset="synthetic"),
                train=C.TrainConfig(stop_at_target=True, eval_every_epochs=1),
            ),
            "--stop_at_target: --dataset=synthetic has no held-out quality to reach",
        ),
        (
            dict(reliability=C.ReliabilityConfig(checkpoint_every="5")),
            "--checkpoint_every=5: needs --checkpoint_dir",
        ),
        (
            dict(reliability=C.ReliabilityConfig(checkpoint_every="auto")),
            "--checkpoint_every=auto: needs --checkpoint_dir",
        ),
        (
            dict(optim=C.OptimConfig(warmup_epochs=5), train=C.TrainConfig(epochs=3)),
            r"--warmup_epochs=5: longer than the run's --epochs=3 \(the learning rate would",
        ),
        (
            dict(results=C.ResultsConfig(profile_steps="5:7"), train=C.TrainConfig(steps=3)),
            "--profile_steps=5:7: the run has 3 steps; B may be at most 3",
        ),
    ],
)
def test_validation_messages(kwargs, message):
    with pytest.raises(UsageError, match=message):
        Settings(**kwargs).validate()


def test_a_negative_seed_is_a_one_line_error():
    """It used to reach numpy's SeedSequence (a traceback)."""
    assert_one_line_error(run_in_process("--seed=-3", "--steps=1"), "--seed=-3", "[0, 2^32)")


# ---------------------------------------------------------------------------------------------
# Declared bounds (hpcai_jax/fields.py): every case below is generated from the declarations, so
# a bound added to a field is tested without a new line here.

# Validates as it stands in every mode's checks: unscored (no target), STREAM's part checked.
BASE = Settings(mode="stream", data=C.DataConfig(dataset="synthetic"))


def _leaves(config=BASE, path=()):
    """(path, owner, field) of every setting of Settings, depth first."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, (*path, field.name))
        else:
            yield (*path, field.name), config, field


LEAVES = list(_leaves())


def _with(path, value, base=BASE):
    """`base` with the setting at `path` replaced by `value`."""
    if len(path) == 1:
        return dataclasses.replace(base, **{path[0]: value})
    return dataclasses.replace(base, **{path[0]: _with(path[1:], value, getattr(base, path[0]))})


def _just_past(bound, step, is_int):
    return bound + step if is_int else math.nextafter(bound, bound + step)


def _bound_cases():
    """(path, flag, refused values, accepted values) of every field with a numeric range: the
    first value past each bound (skipping the values `allow` lets in) and the bound itself (or
    the first value inside an open bound), and every allowed value."""
    for path, owner, field in LEAVES:
        accepts = field.metadata.get("accepts")
        if accepts is None or not accepts.bounded:
            continue
        kind = fields.kind(type(owner), field)  # int or float: values as a flag gives them
        is_int = kind is int
        refused, accepted = [], list(accepts.allow)
        for bound, outward, closed in (
            (accepts.ge, -1, True),
            (accepts.gt, -1, False),
            (accepts.le, +1, True),
            (accepts.lt, +1, False),
        ):
            if bound is None:
                continue
            outside = bound if not closed else _just_past(bound, outward, is_int)
            while outside in accepts.allow:
                outside = _just_past(outside, outward, is_int)
            refused.append(outside)
            accepted.append(bound if closed else _just_past(bound, -outward, is_int))
        refused, accepted = ([kind(v) for v in dict.fromkeys(vs)] for vs in (refused, accepted))
        accepted += [None] if accepts.auto else []
        yield pytest.param(path, fields.flag_name(field), refused, accepted, id=".".join(path))


BOUND_CASES = list(_bound_cases())


def _refusal(config: C.RunConfig) -> str:
    with pytest.raises(UsageError) as info:
        config.validate()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_the_bounds_are_declared():
    """The generator finds them: 45 fields declared the ranges once checked by hand."""
    assert len(BOUND_CASES) >= 45


@pytest.mark.parametrize("path,flag,refused,accepted", BOUND_CASES)
def test_every_declared_bound_refuses_the_value_just_past_it(path, flag, refused, accepted):
    for value in refused:
        message = _refusal(_with(path, value))
        assert message.startswith(f"--{flag}={value}: "), message


@pytest.mark.parametrize("path,flag,refused,accepted", BOUND_CASES)
def test_every_declared_bound_accepts_its_boundary_value(path, flag, refused, accepted):
    for value in accepted:
        _with(path, value).validate()


CHOICE_CASES = [
    pytest.param(path, owner, field, id=".".join(path))
    for path, owner, field in LEAVES
    if getattr(field.metadata.get("accepts"), "choices", None) is not None
]


@pytest.mark.parametrize("path,owner,field", CHOICE_CASES)
def test_every_declared_choice_refuses_other_values(path, owner, field):
    """Enum flags are checked by absl too; a config built in code is checked here."""
    choices = field.metadata["accepts"].choices
    message = _refusal(_with(path, "no_such_value"))
    assert message == (
        f"--{fields.flag_name(field)}='no_such_value': expected one of {', '.join(choices)}"
    )
    for value in choices:  # its own declaration only: other rules tie --model to --workload
        fields.check(dataclasses.replace(owner, **{field.name: value}))


# A value each format check refuses; a new `valid=` declaration needs its case here.
FORMAT_CASES = {
    "checkpoint_every": "often",
    "dataset": "",
    "lr_step_epochs": "30,20",
    "results_dir": "",
    "run_name": "a/b",
    "inject_nan": "1-3",
    "profile_steps": "4:2",
    "sweep_plan": "paper:full:x",
}


def test_every_format_check_has_a_case():
    declared = {
        fields.flag_name(field)
        for _, _, field in LEAVES
        if getattr(field.metadata.get("accepts"), "valid", None) is not None
    }
    assert declared == set(FORMAT_CASES)


@pytest.mark.parametrize("flag", sorted(FORMAT_CASES))
def test_every_format_check_refuses_a_bad_value(flag):
    path = hflags.FLAG_FIELDS[flag]
    message = _refusal(_with(path, FORMAT_CASES[flag]))
    assert message.startswith(f"--{flag}={FORMAT_CASES[flag]}: expected"), message


FLOATS = [
    pytest.param(path, fields.flag_name(field), id=".".join(path))
    for path, owner, field in LEAVES
    if fields.kind(type(owner), field) is float
]


@pytest.mark.parametrize("path,flag", FLOATS)
def test_every_float_setting_must_be_finite_in_every_mode(path, flag):
    for value in (float("inf"), float("-inf"), float("nan")):
        config = _with(path, value, dataclasses.replace(BASE, mode="train"))
        assert _refusal(config) == f"--{flag}={value}: expected a finite number"


def test_pipeline_stages_keeps_its_reason():
    """docs/system_options.md quotes it."""
    message = _refusal(_with(("mesh", "pipeline_stages"), 2))
    assert message.startswith(
        "--pipeline_stages=2: only 1 is supported; pipeline microbatches would change BatchNorm's "
        "batch statistics"
    )


def test_only_cross_field_rules_are_written_out():
    """A part without rules between its fields validates by its declarations alone."""
    for part in (C.MeshConfig, C.DataConfig, C.OptimConfig, C.ResultsConfig):
        assert "validate" not in vars(part), part
    for part in (C.ReliabilityConfig, CheckConfig):
        assert "validate" not in vars(part), part


@pytest.mark.slow
def test_the_configuration_imports_without_jax():
    """flags and tools that only read a configuration must not pay for JAX (nor import the
    modes: the STREAM and check settings live beside their modes, which do import it)."""
    code = "import sys, hpcai_jax.config; print(sorted(m for m in sys.modules if 'jax' == m))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]", out.stdout


MODE_PACKAGES = (
    "nodecheck",
    "check_config",
    "stream",
    "distributed",
    "gpu_settings",
    "acceptance",
    "settings",
)


def _hpcai_imports(path) -> set[str]:
    """The hpcai_jax modules `path` imports, at any depth of its code."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hpcai_jax"):
            names |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("hpcai_jax")}
    return names


def test_the_training_configuration_imports_no_mode():
    """config.py holds what the engine reads; each mode's settings live apart from it and are
    composed above it (settings.py), so the engine never reaches a mode's package. The node
    check's settings sit at the root (check_config.py), below the composition: settings.py
    imports nothing of nodecheck/, which reads it."""
    from helpers import ROOT

    imported = _hpcai_imports(ROOT / "hpcai_jax" / "config.py")
    assert imported and not [
        m for m in imported for p in MODE_PACKAGES if m.startswith(f"hpcai_jax.{p}")
    ], sorted(imported)
    # The composition holds every mode's section, and the flags are derived from it.
    composed = _hpcai_imports(ROOT / "hpcai_jax" / "settings.py")
    assert {"hpcai_jax.check_config", "hpcai_jax.stream.config"} <= composed
    assert not [m for m in composed if m.startswith("hpcai_jax.nodecheck")], composed
    assert {f.name for f in dataclasses.fields(Settings)} >= {"stream", "check", "distributed"}
    assert not {"stream", "distributed"} & {f.name for f in dataclasses.fields(C.RunConfig)}


def test_more_examples_than_the_split_holds_is_one_warning(caplog):
    """--train_examples past the split's end trains on all of it: a warning says so, and that
    the record's data section holds the count used."""
    from hpcai_jax.data import datasets, friedman

    config = C.DataConfig(dataset="friedman1", train_examples=10**7, eval_examples=10)
    with caplog.at_level("WARNING"):
        loaded = datasets.open_datasets(config)
    assert len(loaded.train) == friedman.TRAIN_EXAMPLES
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert line == (
        f"--train_examples=10000000: the training split of --dataset=friedman1 has "
        f"{friedman.TRAIN_EXAMPLES} examples; the run uses all {friedman.TRAIN_EXAMPLES} (the "
        "record's data section says so, its config keeps the flag as given)"
    )
