"""The settings of `--mode=check` (`CheckConfig`, the `check` part of `config.RunConfig`): beside
the mode, and free of JAX, so that the configuration imports without it."""

from __future__ import annotations

import dataclasses

from hpcai_jax.fields import Checked
from hpcai_jax.fields import field as _field


@dataclasses.dataclass(frozen=True)
class CheckConfig(Checked):
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
    record: str = _field(
        "",
        "A --mode=check record: --member_strategy=auto takes the strategy it measured on this "
        "backend. Empty: the per-backend default.",
        flag="check_record",
    )
