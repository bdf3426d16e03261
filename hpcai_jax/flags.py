"""Every command-line flag, derived from the config dataclasses, and their one-time conversion
into `settings.Settings` (the training run's `config.RunConfig` and every mode's own settings).

Each setting of `Settings` (recursively through its parts) is one flag, defined here from
the field: its name (the field's, or metadata "flag" where they differ), its default (the field's
value in `Settings()`), its help (metadata "help", with the range the field accepts where it
declares one) and its kind: an enum of metadata "choices" where there are some, else by the
field's type (bool, int, float, str). So a new field is a new flag, and its description lives
once, on the field (`config._field`, hpcai_jax/fields.py).

Names are a public interface: users' scripts and flagfiles depend on them.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from absl import flags

from hpcai_jax import fields
from hpcai_jax.errors import UsageError
from hpcai_jax.settings import Settings

_DEFINE_BY_TYPE = {
    bool: flags.DEFINE_bool,
    int: flags.DEFINE_integer,
    float: flags.DEFINE_float,
    str: flags.DEFINE_string,
}

_DEFAULTS = Settings()


def _settings(
    config: Any, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], Any, dataclasses.Field]]:
    """(path of field names, the dataclass holding it, its field) of every setting in `config`,
    depth first in field order."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            yield from _settings(value, (*path, field.name))
        else:
            yield (*path, field.name), config, field


def _define_flags(values: flags.FlagValues = flags.FLAGS) -> dict[str, tuple[str, ...]]:
    """Defines every setting's flag on `values` (absl's global FLAGS, main's, by default)."""
    names = {}
    for path, owner, field in _settings(_DEFAULTS):
        cls = type(owner)
        meta = field.metadata
        name, default = meta.get("flag", field.name), getattr(owner, field.name)
        where = f"{cls.__name__}.{field.name}"
        if not meta.get("help"):
            raise TypeError(f"{where}: no help text; declare it with config._field(default, help)")
        accepts = meta.get("accepts")
        help_text = " ".join(t for t in (meta["help"], accepts and accepts.help_text()) if t)
        if "choices" in meta:
            flags.DEFINE_enum(name, default, meta["choices"], help_text, flag_values=values)
        elif "auto" in meta:  # a number or auto: read as text, converted below
            text = "auto" if default is None else str(default)
            flags.DEFINE_string(name, text, help_text, flag_values=values)
        else:
            kind = typing.get_type_hints(cls)[field.name]
            if kind not in _DEFINE_BY_TYPE:
                raise TypeError(f"{where}: a {kind} field has no flag kind (bool, int, float, str)")
            _DEFINE_BY_TYPE[kind](name, default, help_text, flag_values=values)
        names[name] = path
    return names


# Flag name -> path of the field it sets, e.g. "stream_kernels" -> ("stream", "kernels").
FLAG_FIELDS: dict[str, tuple[str, ...]] = _define_flags()
# Flag name -> (the config part holding its setting by default, the setting's field).
_OWNERS = {
    name: (owner, field)
    for name, (_, owner, field) in zip(FLAG_FIELDS, _settings(_DEFAULTS), strict=True)
}

FLAGS = flags.FLAGS


def main_flags() -> flags.FlagValues:
    """main's flags, at their defaults, on a FlagValues of their own: a tool that must know what
    a run's flags say (the sweep: its --seed, --mllog, --epochs) parses them with absl as main
    does, never by hand."""
    values = flags.FlagValues()
    _define_flags(values)
    return values


def _replaced(config: Any, settings: Mapping[tuple[str, ...], Any], path: tuple[str, ...]) -> Any:
    changes = {}
    for field in dataclasses.fields(config):
        value, where = getattr(config, field.name), (*path, field.name)
        is_part = dataclasses.is_dataclass(value)
        changes[field.name] = _replaced(value, settings, where) if is_part else settings[where]
    return dataclasses.replace(config, **changes)


def _from_text(name: str, value: Any) -> Any:
    """A setting that may be derived (fields.setting's `auto`): auto, or its former number (a
    deprecated spelling, kept for existing flagfiles), is None; another value is the number;
    one that is neither is one line naming the flag."""
    owner, field = _OWNERS[name]
    if "auto" not in field.metadata or not isinstance(value, str):
        return value
    if value == "auto":
        return None
    try:
        number = fields.kind(type(owner), field)(value)
    except ValueError:
        raise UsageError(f"--{name}={value}: expected a number or auto") from None
    return None if number == field.metadata["auto"] else number


def _mode_defaults() -> dict[str, dict[str, str]]:
    """Mode -> {flag: its text} for the flags a mode defaults on its own (fields.setting's
    `mode_defaults`, declared on the field)."""
    found: dict[str, dict[str, str]] = {}
    for name, (_, field) in _OWNERS.items():
        for mode, text in field.metadata.get("mode_defaults", {}).items():
            found.setdefault(mode, {})[name] = text
    return found


MODE_DEFAULTS = _mode_defaults()


def _given(values: flags.FlagValues, name: str) -> Any:
    """The flag's value, or its mode's own default where the command line did not set it."""
    mode_default = MODE_DEFAULTS.get(values.mode, {}).get(name)
    return getattr(values, name) if mode_default is None or values[name].present else mode_default


def build_config(values: flags.FlagValues = FLAGS) -> Settings:
    """The run configuration the parsed flags give, not yet validated."""
    return _replaced(
        _DEFAULTS,
        {path: _from_text(name, _given(values, name)) for name, path in FLAG_FIELDS.items()},
        (),
    )


def changed_settings(config: Settings) -> list[tuple[str, Any]]:
    """(flag, value) of every setting of `config` that is not its default, in field order: the
    start-up line's short account of a run (the whole configuration is in the record)."""
    out = []
    for name, path in FLAG_FIELDS.items():
        value, default = config, _DEFAULTS
        for part in path:
            value, default = getattr(value, part), getattr(default, part)
        if value != default:
            out.append((name, value))
    return out


def _shown(name: str, value: Any) -> str:
    shown = "auto" if value is None and "auto" in _OWNERS[name][1].metadata else str(value)
    return shown or '""'


# The parts of the configuration a mode never reads: a flag of one of them, set, is said to be
# ignored in the start-up table rather than listed as if it took effect.
IGNORED_BY_MODE: dict[str, tuple[str, ...]] = {
    "stream": ("mesh", "data", "model", "optim", "train", "reliability", "check"),
}


def settings_table(config: Settings) -> str:
    """The start-up account of a run: a heading, then a row of flag, value and default for each
    setting that is not its default (the record holds the whole configuration); a setting the
    mode does not read says so on its row (`IGNORED_BY_MODE`)."""
    changed = changed_settings(config)
    if not changed:
        return f"hpcai_jax {config.mode}: all settings at their defaults"
    ignored = IGNORED_BY_MODE.get(config.mode, ())
    rows = [("flag", "value", "default")] + [
        (
            f"--{name}",
            _shown(name, value),
            _shown(name, _default(name))
            + (f"  (ignored by --mode={config.mode})" if FLAG_FIELDS[name][0] in ignored else ""),
        )
        for name, value in changed
    ]
    # A long value (a path) overflows its column rather than widening every row.
    widths = [min(max(len(row[i]) for row in rows), 32) for i in range(2)]
    lines = [f"  {a:<{widths[0]}}  {b:<{widths[1]}}  {c}".rstrip() for a, b, c in rows]
    heading = f"hpcai_jax {config.mode}: {len(changed)} setting(s) not at their defaults"
    return "\n".join([heading, *lines])


def _default(name: str) -> Any:
    return functools.reduce(getattr, FLAG_FIELDS[name], _DEFAULTS)


def config_from_flags(values: flags.FlagValues = FLAGS) -> Settings:
    """Builds and validates the run configuration; raises UsageError on bad values."""
    return build_config(values).validate()
