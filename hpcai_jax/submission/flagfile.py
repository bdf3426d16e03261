"""A record's `config` section as a flagfile of `python -m hpcai_jax.main`, and back."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from absl import flags

from hpcai_jax import flags as hflags
from hpcai_jax.config import RunConfig
from hpcai_jax.errors import UsageError

# How a job's processes find each other (coordinator, process id, devices per process): set per
# process by the launcher, not part of what the run is; a packed flagfile leaves them out.
PER_PROCESS = ("distributed",)


@functools.cache
def _defaults() -> dict:
    """Every mode's settings at their defaults, as a record's `config` holds them (Settings,
    which `read` builds too)."""
    from hpcai_jax.settings import Settings

    return json.loads(json.dumps(Settings().to_dict()))


def completed(section: dict) -> dict:
    """A record's `config` section with each setting it lacks at that setting's default: a
    record written before the setting existed ran as its default does (a run of 0.1.0 before
    --sweep_plan packs and checks as it did)."""

    def merged(given, default):
        if not (isinstance(given, dict) and isinstance(default, dict)):
            return given
        out = dict(given)
        for key, value in default.items():
            out[key] = merged(given[key], value) if key in given else value
        return out

    return merged(section, _defaults())


def lines(section: dict, where: str) -> list[str]:
    """`--flag=value`, one per flag of hpcai_jax.main, from a record's `config` section (a
    setting it lacks at its default: `completed`)."""
    section = completed(section)
    out = []
    for name, path in hflags.FLAG_FIELDS.items():
        if path[0] in PER_PROCESS:
            continue
        try:
            value = functools.reduce(lambda part, key: part[key], path, section)
        except (KeyError, TypeError):
            raise UsageError(f"{where}: config section has no {'.'.join(path)}") from None
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if "\n" in text:
            raise UsageError(f"{where}: config {'.'.join(path)} holds a line break")
        out.append(f"--{name}={text}")
    return out


def read(path: Path) -> RunConfig:
    """The configuration a flagfile gives, parsed by hpcai_jax.main's own flags."""
    from hpcai_jax.submission import safe

    text = safe.read_text(path)
    if any(line.strip().startswith(("--flagfile", "-flagfile")) for line in text.splitlines()):
        raise UsageError(f"{path}: names another --flagfile: a packed flagfile is whole")
    values = hflags.FLAGS
    values.unparse_flags()
    try:
        values(["hpcai_jax.main", f"--flagfile={path}"])
        return hflags.build_config(values)
    except flags.Error as e:
        raise UsageError(f"{path}: {str(e).splitlines()[0] if str(e) else e!r}") from None
    finally:
        values.unparse_flags()


def comparable(section: dict) -> dict:
    """A `config` section without the per-process settings, as JSON gives it back, each setting
    it lacks at its default (`completed`)."""
    section = completed(json.loads(json.dumps(section)))
    return {k: v for k, v in section.items() if k not in PER_PROCESS}
