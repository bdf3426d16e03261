"""How a device runs its several members, and which way `--member_strategy=auto` and
`--member_map=auto` pick per backend: the forms' table's default, a check record's measured
strategy (--check_record) or an acceptance's decision (--acceptance); docs/members.md, "Why auto
picks what it picks", holds the measurements behind each default.

`--member_strategy`: `vmap`, the members as one mapped program over their stacked parameters
(whose size does not grow with the members), or `unroll`, a Python loop inside the step (one
copy of the member's program per member). Under `vmap`, `--member_map` says how the mapping is
carried out:

- `scan`: sequential, `lax.map` over whole members, each member's forward and backward one
  loop iteration, its convolutions in the forms XLA runs fast inside a loop (ops/member_conv.py);
- `conv_loop`: `jax.vmap` over the members: BatchNorm, dense layers and elementwise work batched
  across them, each convolution a loop over the members (ops/member_conv.py, "loop");
- `batched`: one kernel per layer for all the device's members: dense layers and every
  convolution a batched product (ops/member_conv.py, "im2col"), BatchNorm and elementwise work
  batched, statistics per member;
- `batched_grouped`: the same, but each k×k convolution one grouped convolution differentiated
  as such (grad of vmap: ops/member_conv.py, "grouped_vjp"), a 1×1 one a batched product;
- `grouped`: plain `jax.vmap`, XLA's grouped convolutions and their vmapped gradients (the slow
  form, kept as an ablation).

`--member_group=k` batches k members at a time under the jax.vmap forms, the groups one after
another (`lax.map`'s batch_size): the memory knob between `scan` and all members at once.
"""

from __future__ import annotations

from hpcai_jax import member_forms
from hpcai_jax.errors import UsageError
from hpcai_jax.records.strategy import accepted_form, measured_strategy

# Where `auto`'s default comes from: the forms' table, whose choices docs/members.md's section
# explains with the measurements behind them (the record's why points there once).
WHY_DEFAULT = "the forms table's default"
WHY_DOCS = 'see docs/members.md, "Why auto picks what it picks"'
# An acceptance's decision (`decided_form`): the form it chose, or None, and why.
Decided = tuple[str | None, str]
NONE: Decided = (None, "")


def auto_form(backend: str, strategy: bool) -> str:
    """`auto`'s pick on `backend` from the forms' table (hpcai_jax/member_forms.py: each row's
    default_on; an unknown backend is taken as a CPU): --member_strategy's (`unroll` or `vmap`)
    where `strategy`, else --member_map's."""
    table = member_forms.FORMS_TABLE
    known = backend if any(backend in f.default_on for f in table.values()) else "cpu"
    if strategy:
        return member_forms.UNROLL if known in table[member_forms.UNROLL].default_on else "vmap"
    return next(n for n in member_forms.VMAP_FORMS if known in table[n].default_on)


def _default(backend: str, strategy: bool, note: str = "") -> tuple[str, str]:
    """`auto`'s pick from the forms' table, and why (`note`: why no measurement replaced it)."""
    note = f", as {note}" if note else ""
    return auto_form(backend, strategy), f"auto for {backend}: {WHY_DEFAULT}{note}"


def decided_form(acceptance: str, backend: str) -> Decided:
    """(form, why) from an acceptance's decision (--acceptance; records/strategy.accepted_form),
    its form checked against the forms' table."""
    form, why = accepted_form(acceptance, backend)
    if form is not None and form not in member_forms.VMAP_FORMS:
        raise UsageError(
            f"--acceptance={acceptance}: its decision names {form!r}, not a --member_map form "
            f"(expected one of {', '.join(member_forms.VMAP_FORMS)})"
        )
    return form, why


def resolve_member_strategy(
    requested: str,
    backend: str,
    members_per_device: int,
    check_record: str = "",
    decided: str | None = None,
) -> tuple[str, str]:
    """Returns (strategy, why) for the record. `auto` takes the strategy a --mode=check record
    measured on this backend (`check_record`), else `vmap` where an acceptance's decision chose
    a form (`decided`: its members are mapped), else the backend's default."""
    measured = None
    if check_record and requested == "auto":  # read (and checked) whatever the layout
        measured = measured_strategy(check_record, backend)
    if members_per_device == 1:
        return member_forms.UNROLL, "one member per device: nothing to map over"
    if requested != "auto":
        return requested, "--member_strategy"
    if measured is not None:
        return measured
    if decided is not None:
        return "vmap", f"auto for {backend}: vmap, as the acceptance's decision maps the members"
    unmeasured = "the check record did not measure it" if check_record else ""
    return _default(backend, strategy=True, note=unmeasured)


def resolve_member_map(
    requested: str, backend: str, dtype: str, model_parallel: int = 1, decided: Decided = NONE
) -> tuple[str, str]:
    """(how vmap maps the members, why). `auto` takes an acceptance's decision (`decided`:
    decided_form's), else the backend's default. int8 keeps XLA's own batching: qwix
    intercepts the models' convolutions (models/int8.py), so they must stay lax's; so does a
    member split over `model`, whose convolutions' gradients are typed varying over it."""
    kept = "--model_parallel: a split member's" if model_parallel > 1 else ""
    kept = "--dtype=int8: qwix's quantized" if dtype == "int8" and not kept else kept
    if kept:
        return member_forms.XLA_BATCHED, f"{kept} convolutions keep XLA's batching"
    if requested != "auto":
        return requested, "--member_map"
    if decided[0] is not None:
        return decided
    return _default(backend, strategy=False, note=decided[1])


def resolve_mapping(
    strategy_flag: str,
    map_flag: str,
    group: int,
    *,
    backend: str,
    dtype: str,
    members_per_device: int,
    model_parallel: int = 1,
    check_record: str = "",
    acceptance: str = "",
) -> tuple[str, int, str]:
    """(form, group, why): the one mapping both flags resolve to on this backend
    (engine/plan.MemberMapping: its form and members batched at once, 0 for all), and why (the
    record's mesh.member_strategy_why). Raises UsageError for a --member_group the form cannot
    take, or an --acceptance file it cannot read or that was measured elsewhere."""
    decided = decided_form(acceptance, backend) if acceptance else NONE
    strategy, why = resolve_member_strategy(
        strategy_flag, backend, members_per_device, check_record, decided[0]
    )
    form, form_why = resolve_member_map(map_flag, backend, dtype, model_parallel, decided)
    if group and (strategy != "vmap" or member_forms.FORMS_TABLE[form].sequential):
        mapped = form if strategy == "vmap" else f"--member_strategy={strategy}"
        raise UsageError(
            f"--member_group={group}: {mapped} runs the members one at a time; give a jax.vmap "
            "form (--member_map=conv_loop, batched, batched_grouped or grouped)"
        )
    if group and members_per_device % group:
        raise UsageError(
            f"--member_group={group} must divide the {members_per_device} members per device"
        )
    group = group if 0 < group < members_per_device else 0
    if strategy == member_forms.UNROLL:
        form, group = member_forms.UNROLL, 0
    else:
        why = f"{why}; members mapped as {form} ({member_forms.FORMS_TABLE[form].does}): {form_why}"
        why += f"; {group} members at a time (--member_group)" if group else ""
    # Where the record's why took a default, where the measurements behind it are.
    return form, group, f"{why}; {WHY_DOCS}" if WHY_DEFAULT in why else why
