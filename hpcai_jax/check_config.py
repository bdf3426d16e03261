"""The settings of `--mode=check` (`CheckConfig`, the `check` part of `settings.Settings`): at the
root, not beside the mode in `nodecheck/`, because the mode sits above `settings.py`, which
composes them (docs/design.md, the floors); free of JAX, so that the configuration imports
without it. The one setting a training run reads too, the record, is the core's
(`config.CheckRecordConfig`)."""

from __future__ import annotations

import dataclasses

from hpcai_jax.config import CheckRecordConfig
from hpcai_jax.fields import setting as _field


@dataclasses.dataclass(frozen=True)
class CheckConfig(CheckRecordConfig):
    """`--mode=check` (hpcai_jax/nodecheck/, docs/node_check.md), and the record it leaves for the
    training modes."""

    budget_s: float = _field(
        600.0,
        "Seconds the whole --mode=check command may take, compilation included (it ends within "
        "this plus two minutes); items are cut down or skipped (a WARN row) to fit.",
        flag="check_budget_s",
        gt=0,
        unit="seconds",
    )
    expect: str = _field(
        "",
        "The least bus bandwidth a collective must reach at a size, a comma list of "
        "OP:VALUEUNIT@SIZE (e.g. all_reduce:304GB/s@8GiB; docs/node_check.md, Acceptance): one "
        "row each, FAIL below it or where the size was not measured.",
        flag="check_expect",
    )
    json: str = _field(
        "",
        "Also write the collectives to this file as JSON in nccl-tests' shape (argv, the "
        "environment, versions, one object per row; docs/node_check.md, Acceptance).",
        flag="check_json",
    )
