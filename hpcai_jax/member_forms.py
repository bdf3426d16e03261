"""How a device runs its several members, one row per form (docs/members.md): the flags'
choices, the step plan, the step, the setup's memory check, the acceptance and the benchmark
read this table, so that a new form is a row here (and, for a new way to batch convolutions, a
formulation in ops/member_conv.py). Pure Python: the configuration imports it without JAX.
"""

from __future__ import annotations

import dataclasses

UNROLL = "unroll"  # --member_strategy=unroll: a Python loop inside the step, no mapping
SEQUENTIAL = "scan"  # whole members one after another: also the counting program's form
# The form a split member (--model_parallel) and int8 keep: XLA's own batching of lax's
# convolutions (engine/member_map.resolve_member_map).
XLA_BATCHED = "grouped"


@dataclasses.dataclass(frozen=True)
class MemberForm:
    """One way to run a device's members.

    name: the record's mesh.member_mapping and, but for `unroll`, a --member_map choice.
    formulation: the member convolutions' (ops/member_conv.FORMULATIONS); None: lax's own.
    members: how the step takes the members: `python` (written out, one copy per member),
      `loop` (whole members one after another), `vmap` (jax.vmap, groups under --member_group).
    counted: `compiled`, XLA counts the compiled step itself; `written_out`, the counting
      program with the members' loop written out (engine/plan.MemberMapping.counting).
    one_kernel_per_layer: every layer one kernel for all the members (the acceptance weighs
      these against the others).
    memory_checked: its largest layer's batched slices are checked against the device's
      memory before compiling (engine/member_memory.py).
    does: what it does, as the record's member_strategy_why says it.
    default_on: the backends whose `auto` picks it (--member_strategy for `unroll`,
      --member_map for the others).
    """

    name: str
    formulation: str | None
    members: str
    counted: str
    does: str
    one_kernel_per_layer: bool = False
    memory_checked: bool = False
    default_on: tuple[str, ...] = ()

    # Derived from `members` and `formulation` once, at import: plain attributes, so that
    # reading them runs nothing of this module on the step's path (tests/test_step_path.py).
    sequential: bool = dataclasses.field(init=False)  # whole members one after another
    mapped: bool = dataclasses.field(init=False)  # jax.vmap; --member_group: k at a time
    unrolled: bool = dataclasses.field(init=False)  # one copy of the program per member
    # The step loops over the members, each once (cost analysis counts one trip): whole
    # members in a loop, or each convolution a loop over them.
    loops: bool = dataclasses.field(init=False)

    def __post_init__(self):
        derived = {
            "sequential": self.members == "loop",
            "mapped": self.members == "vmap",
            "unrolled": self.members == "python",
            "loops": self.members == "loop" or self.formulation == "loop",
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)


FORMS_TABLE: dict[str, MemberForm] = {
    f.name: f
    for f in (
        MemberForm(UNROLL, None, "python", "compiled", "", default_on=("gpu", "tpu")),
        MemberForm(
            SEQUENTIAL,
            "loop",
            "loop",
            "written_out",
            "sequential: whole members one after another in a loop",
            default_on=("cpu",),
        ),
        MemberForm(
            "conv_loop",
            "loop",
            "vmap",
            "written_out",
            "batched layers, each convolution a loop over the members",
            default_on=("gpu", "tpu"),
        ),
        MemberForm(
            "batched",
            "im2col",
            "vmap",
            "written_out",
            "one kernel per layer, convolutions as batched products",
            one_kernel_per_layer=True,
            memory_checked=True,
        ),
        MemberForm(
            "batched_grouped",
            "grouped_vjp",
            "vmap",
            "written_out",
            "one kernel per layer, k×k convolutions as one grouped convolution",
            one_kernel_per_layer=True,
        ),
        MemberForm(
            XLA_BATCHED, None, "vmap", "compiled", "plain jax.vmap, XLA's grouped convolutions"
        ),
    )
}
FORMS = tuple(FORMS_TABLE)
VMAP_FORMS = tuple(n for n in FORMS if n != UNROLL)  # the --member_map choices
ONE_KERNEL_PER_LAYER = tuple(n for n in FORMS if FORMS_TABLE[n].one_kernel_per_layer)
