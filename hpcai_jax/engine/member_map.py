"""How a device runs its several members, and which way `--member_strategy=auto` and
`--member_map=auto` pick per backend (docs/members.md, with the measurements behind each choice).

`--member_strategy`: `vmap`, the members as one mapped program over their stacked parameters
(whose size does not grow with the members), or `unroll`, a Python loop inside the step (one
copy of the member's program per member). Under `vmap`, `--member_map` says how the mapping is
carried out:

- `scan`: `lax.map` over whole members, each member's forward and backward one loop iteration,
  its convolutions in the forms XLA runs fast inside a loop (ops/member_conv.py);
- `batched`: `jax.vmap` over the members: BatchNorm, dense layers and elementwise work batched
  across them, each convolution a loop over the members (ops/member_conv.py, "loop");
- `grouped`: plain `jax.vmap`, XLA's grouped convolutions (the slow form, kept as an ablation).
"""

from __future__ import annotations

MEMBER_MAPS = ("scan", "batched", "grouped")

# --member_strategy=auto per backend, and why (docs/members.md).
MEMBER_STRATEGY_DEFAULTS = {
    "cpu": (
        "vmap",
        "measured on a 2-core CPU by benchmarks/ensemble_vs_loop.py (docs/members.md): the "
        "mapped members (under scan one member after another, in a loop) run 1.05-1.11x "
        "separate steps' speed and as fast as unroll (0.97-1.00x), in a program that does not "
        "grow with them",
    ),
    "gpu": (
        "unroll",
        "measured on one H200 by the acceptance's members group (docs/measurements.md) before "
        "the fast mapped forms existed: 2 members under grouped vmap ran at 0.08 of the "
        "1-member rate, 4 under unroll at 0.65; the mapped forms are not measured on a GPU yet",
    ),
    "tpu": ("unroll", "not measured on a TPU yet; kept as on GPUs"),
}

# --member_map=auto per backend, and why (docs/members.md).
MEMBER_MAP_DEFAULTS = {
    "cpu": (
        "scan",
        "measured on a 2-core CPU (docs/members.md): whole members in a loop beat jax.vmap "
        "with looped convolutions, whose vmapped BatchNorm and elementwise work is slower there",
    ),
    "gpu": (
        "batched",
        "not measured on a GPU yet: jax.vmap batches BatchNorm and elementwise kernels across "
        "the members, each convolution keeps one member's cuDNN kernel",
    ),
    "tpu": ("batched", "not measured on a TPU yet; as on GPUs"),
}


def _default(table: dict, backend: str) -> tuple[str, str]:
    return table.get(backend, table["cpu"])


def resolve_member_strategy(
    requested: str, backend: str, members_per_device: int, check_record: str = ""
) -> tuple[str, str]:
    """Returns (strategy, why) for the record. `auto` takes the strategy a --mode=check record
    measured on this backend (`check_record`), else the backend's default."""
    measured = None
    if check_record and requested == "auto":  # read (and checked) whatever the layout
        from hpcai_jax.records.strategy import measured_strategy

        measured = measured_strategy(check_record, backend)
    if members_per_device == 1:
        return "unroll", "one member per device: nothing to map over"
    if requested != "auto":
        return requested, "--member_strategy"
    if measured is not None:
        return measured
    strategy, why = _default(MEMBER_STRATEGY_DEFAULTS, backend)
    unmeasured = " (the check record did not measure it)" if check_record else ""
    return strategy, f"auto for {backend}{unmeasured}: {why}"


def resolve_member_map(
    requested: str, backend: str, dtype: str, model_parallel: int = 1
) -> tuple[str, str]:
    """(how vmap maps the members, why). int8 keeps XLA's own batching: qwix intercepts the
    models' convolutions (models/int8.py), so they must stay lax's; so does a member split over
    `model`, whose convolutions' gradients are typed varying over it."""
    if model_parallel > 1:
        return "grouped", "--model_parallel: a split member's convolutions keep XLA's batching"
    if dtype == "int8":
        return "grouped", "--dtype=int8: qwix's quantized convolutions keep XLA's batching"
    if requested != "auto":
        return requested, "--member_map"
    how, why = _default(MEMBER_MAP_DEFAULTS, backend)
    return how, f"auto for {backend}: {why}"
