"""The flags are the config's fields: one flag per field, same defaults, the field's help."""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import typing

import pytest
from absl import flags

from hpcai_jax import config as C
from hpcai_jax import flags as hflags
from hpcai_jax.distributed import DistributedConfig
from hpcai_jax.errors import UsageError
from hpcai_jax.settings import Settings
from hpcai_jax.stream.config import StreamConfig

FLAGS = hflags.FLAGS

# Flag names that differ from their field's name; users' flagfiles spell them so.
RENAMED = {
    "stream_kernels": ("stream", "kernels"),
    "stream_devices": ("stream", "devices"),
    "stream_burst": ("stream", "burst"),
    "stream_rules": ("stream", "rules"),
    "stream_scan": ("stream", "scan"),
    "check_expect": ("check", "expect"),
    "check_json": ("check", "json"),
    "stream_outlier_fraction": ("stream", "outlier_fraction"),
    "distributed_timeout_s": ("distributed", "timeout_s"),
    "check_budget_s": ("check", "budget_s"),
    "check_record": ("check", "record"),
}
ENUMS = {
    "mode": C.MODES,
    "member_strategy": C.MEMBER_STRATEGIES,
    "member_map": C.MEMBER_MAPS,
    "workload": C.WORKLOADS,
    "model": C.MODELS,
    "dtype": C.DTYPES,
    "optimizer": C.OPTIMIZERS,
    "lr_schedule": C.LR_SCHEDULES,
    "bootstrap": C.BOOTSTRAP_METHODS,
    "batch_policy": C.BATCH_POLICIES,
    "flops_source": C.FLOPS_SOURCES,
    "submission_status": C.SUBMISSION_STATUSES,
    "on_divergence": C.ON_DIVERGENCE,
    "allreduce": C.ALLREDUCE_MODES,
    "grad_allreduce_dtype": C.GRAD_ALLREDUCE_DTYPES,
    "bad_example_policy": C.BAD_EXAMPLE_POLICIES,
    "resume_members": C.RESUME_MEMBERS,
}
FLAG_TYPE = {bool: "bool", int: "int", float: "float", str: "string"}


def settings(cls=Settings, path=()):
    """(path, owning class, field) of every leaf field of Settings, recursively."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[field.name]):
            yield from settings(hints[field.name], (*path, field.name))
        else:
            yield (*path, field.name), cls, field


SETTINGS = list(settings())


def module_flags() -> set[str]:
    return {flag.name for flag in FLAGS.flags_by_module_dict()["hpcai_jax.flags"]}


@functools.cache
def rendered_help() -> str:
    """The module's --helpfull section, whitespace-normalised (absl wraps lines)."""
    return " ".join(FLAGS.module_help("hpcai_jax.flags").split())


def default_of(path):
    value = Settings()
    for name in path:
        value = getattr(value, name)
    return value


@pytest.fixture
def parse():
    def _parse(*argv):
        FLAGS.unparse_flags()
        FLAGS(["hpcai_jax", *argv])

    yield _parse
    FLAGS.unparse_flags()


def test_every_field_has_exactly_one_flag_and_every_flag_a_field():
    paths = [path for path, _, _ in SETTINGS]
    assert len(paths) == len(set(paths)) > 50
    assert sorted(hflags.FLAG_FIELDS.values()) == sorted(paths)  # one flag per field
    assert set(hflags.FLAG_FIELDS) == module_flags()  # and nothing else defined by the module


def test_flags_py_declares_no_setting_of_its_own():
    """Every help text and mode default is on its field: flags.py only derives (issue 67)."""
    text = pathlib.Path(hflags.__file__).read_text()
    assert '"help":' not in text and "_METADATA_OF" not in text
    assert hflags.MODE_DEFAULTS == {"flops": {"members_per_device": "auto"}}


def test_flag_names_are_field_names_except_the_renamed():
    for name, path in hflags.FLAG_FIELDS.items():
        assert name == path[-1] or RENAMED.get(name) == path, name
    for name, path in RENAMED.items():
        assert hflags.FLAG_FIELDS[name] == path


@pytest.mark.parametrize("path,owner,field", SETTINGS, ids=[".".join(s[0]) for s in SETTINGS])
def test_flag_kind_default_and_help_come_from_the_field(path, owner, field):
    name = next(n for n, p in hflags.FLAG_FIELDS.items() if p == path)
    flag = FLAGS[name]
    derived = "auto" in field.metadata
    if derived:  # a number or auto (--members_per_device=auto): a string flag
        default = default_of(path)
        assert flag.default == ("auto" if default is None else str(default))
        assert flag.flag_type() == "string"
    else:
        assert flag.default == default_of(path)
    if derived:
        pass
    elif name in ENUMS:
        assert isinstance(flag, flags.EnumFlag) and tuple(flag.parser.enum_values) == ENUMS[name]
    else:
        assert flag.flag_type() == FLAG_TYPE[typing.get_type_hints(owner)[field.name]]
    help_text = field.metadata["help"]
    assert help_text and help_text in flag.help
    # Whitespace-free: absl wraps help lines, also after a hyphen ("reduce-\nscatter").
    assert "".join(help_text.split()) in "".join(rendered_help().split())


def test_a_declared_range_ends_the_flags_help():
    """The help states the range `validate` checks, from the same declaration."""
    for path, _owner, field in SETTINGS:
        accepts = field.metadata.get("accepts")
        name = next(n for n, p in hflags.FLAG_FIELDS.items() if p == path)
        help_text = field.metadata["help"]  # after absl's <a|b>: of enums
        if accepts is not None and accepts.help_text():
            assert FLAGS[name].help.endswith(f"{help_text} {accepts.help_text()}"), name
        else:
            assert FLAGS[name].help.endswith(help_text), name
    assert FLAGS["members_per_device"].help.endswith(" (>= 1, or auto)")
    assert FLAGS["seed"].help.endswith(" (in [0, 2^32))")
    assert FLAGS["pipeline_stages"].help.endswith("(docs/system_options.md says why).")


DERIVED = [name for name, (_, field) in hflags._OWNERS.items() if "auto" in field.metadata]


def test_derive_it_is_spelled_once():
    """None in Python, auto on the command line; no setting declares a magic number for it."""
    assert len(DERIVED) >= 9
    magic = {
        path[-1]
        for path, _, field in SETTINGS
        if {0, -1} & set(getattr(field.metadata.get("accepts"), "allow", ()))
    }
    # STREAM's 0 is "not this way of sizing", not "derive"; the data set's three are left for
    # now: their readers in data/ and rules.py compare with the number itself.
    assert magic == {"array_mib", "array_fraction", "image_size", "num_classes", "data_workers"}


def test_a_special_number_says_what_it_means_in_the_help():
    """A setting that accepts 0 or -1 outside its range (--array_mib=0: not set, the size then
    automatic) says so in its help, as `0: ...` or `-1: ...`."""
    for path, _owner, field in SETTINGS:
        allowed = getattr(field.metadata.get("accepts"), "allow", ())
        help_text = field.metadata["help"]
        for value in {0, -1} & set(allowed):
            assert f"{value}: " in help_text, (path[-1], help_text)


@pytest.mark.parametrize("name", DERIVED)
def test_auto_and_its_former_number_both_derive(name, parse):
    """Existing flagfiles and configs/*.flags keep working: the former 0 (or -1) is a
    deprecated spelling of auto; the record still writes it (RunConfig.to_dict)."""
    path, former = hflags.FLAG_FIELDS[name], hflags._OWNERS[name][1].metadata["auto"]
    for spelling in ("auto", str(former)):
        parse(f"--{name}={spelling}")
        config = hflags.build_config()
        assert functools.reduce(getattr, path, config) is None, spelling
        assert functools.reduce(dict.get, path, config.to_dict()) == former
    parse(f"--{name}=often")
    with pytest.raises(UsageError, match=f"^--{name}=often: expected a number or auto$"):
        hflags.build_config()


def test_stream_settings_stay_string_flags():
    """STREAM validates these itself, in stream mode only; an enum would reject them earlier."""
    for name in ("precision", "stream_kernels", "stream_devices"):
        assert FLAGS[name].flag_type() == "string"


def test_default_flags_give_the_default_config(parse):
    parse()
    assert hflags.build_config() == Settings()
    # The default is a scored run on fashion_mnist, which has no official target.
    with pytest.raises(UsageError, match="--target_quality"):
        hflags.config_from_flags()
    parse("--target_quality=0.9")
    expected = Settings(results=C.ResultsConfig(target_quality=0.9))
    assert hflags.config_from_flags() == expected


def test_renamed_flags_set_their_fields(parse):
    parse(
        "--mode=stream",
        "--stream_kernels=triad",
        "--stream_devices=all",
        "--distributed_timeout_s=7",
        "--csv",
    )
    config = hflags.config_from_flags()
    assert config.stream.kernels == "triad" and config.stream.devices == "all"
    assert config.stream.csv and config.distributed.timeout_s == 7


def test_bad_values_raise_usage_error(parse):
    parse("--mode=stream", "--stream_kernels=copy")
    with pytest.raises(UsageError, match="--stream_kernels='copy'"):
        hflags.config_from_flags()


def test_a_records_config_section_gives_back_every_flag(parse):
    """A record's `config` (RunConfig.to_dict, through JSON) holds every flag's value: flags
    rebuilt from it through FLAG_FIELDS give the same configuration, so a record needs no
    separate flag list to be rerun."""
    config = Settings(
        mesh=C.MeshConfig(ensemble_size=8, allreduce="2d_torus"),
        data=C.DataConfig(dataset="imagenet2012", augment=False, image_size=160),
        optim=C.OptimConfig(weight_decay=1e-4, lr_step_epochs="10,20", nesterov=True),
        results=C.ResultsConfig(
            target_quality=0.7, mllog="logs/a b.mllog", submission_org="ACME Labs, Inc."
        ),
        stream=StreamConfig(kernels="triad", csv=True),
        distributed=DistributedConfig(timeout_s=7),
    )
    section = json.loads(json.dumps(config.to_dict()))
    argv = []
    for name, path in hflags.FLAG_FIELDS.items():
        value = functools.reduce(lambda part, key: part[key], path, section)
        argv.append(f"--{name}={str(value).lower() if isinstance(value, bool) else value}")
    parse(*argv)
    assert hflags.build_config() == config


def test_the_start_up_table_names_only_the_settings_that_differ_from_the_defaults():
    config = Settings(
        mesh=C.MeshConfig(ensemble_size=8), train=C.TrainConfig(batch_size=32, log_every=5)
    )
    assert hflags.changed_settings(config) == [
        ("ensemble_size", 8),
        ("batch_size", 32),
        ("log_every", 5),
    ]
    assert hflags.settings_table(config).splitlines() == [
        "hpcai_jax train: 3 setting(s) not at their defaults",
        "  flag             value  default",
        "  --ensemble_size  8      4",
        "  --batch_size     32     128",
        "  --log_every      5      50",
    ]
    assert hflags.settings_table(Settings()) == "hpcai_jax train: all settings at their defaults"
    shared = hflags.settings_table(Settings(mesh=C.MeshConfig(members_per_device=None)))
    assert shared.splitlines()[-1].split() == ["--members_per_device", "auto", "1"]
