"""The step plan: every choice the compiled steps make, resolved once by setup
(engine/setup.py) and passed whole to the train step, the eval step, the counting program and
the members' model. Nothing downstream re-decides or defaults one of them (docs/design.md).
The choices themselves, and which one `auto` takes per backend: engine/member_map.py."""

from __future__ import annotations

import dataclasses

from jax.sharding import Mesh

from hpcai_jax import member_forms
from hpcai_jax.engine.collectives import AllreducePlan
from hpcai_jax.engine.mesh import MeshLayout
from hpcai_jax.ops.member_conv import MemberConv


@dataclasses.dataclass(frozen=True)
class MemberMapping:
    """How a device runs its members: `form` (hpcai_jax/member_forms.py's table); `group`, how many a jax.vmap form batches
    at once (0: all of them), the groups one after another; `written_out`, loops over members
    written out (the counting program: cost analysis counts a loop's body once)."""

    form: str
    group: int = 0
    written_out: bool = False

    # The form's row of hpcai_jax/member_forms.py's table: what it does, how it is counted.
    row: member_forms.MemberForm = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.form not in member_forms.FORMS_TABLE:
            raise ValueError(f"member mapping {self.form!r} not in {member_forms.FORMS}")
        object.__setattr__(self, "row", member_forms.FORMS_TABLE[self.form])

    @property
    def strategy(self) -> str:
        """--member_strategy's value: `unroll`, or `vmap` for every jax.vmap form."""
        return member_forms.UNROLL if self.row.unrolled else "vmap"

    @property
    def conv(self) -> MemberConv:
        """The convolution the members' models are built with (ops/member_conv.py)."""
        return MemberConv(self.row.formulation, self.written_out)

    @property
    def recorded(self) -> str:
        """The record's mesh.member_mapping: the form, `form/k` under --member_group=k."""
        return f"{self.form}/{self.group}" if self.group else self.form

    def has_loop(self, members: int) -> bool:
        """Whether the step loops over members (cost analysis then counts one trip)."""
        if self.row.loops:
            return True
        return self.row.mapped and 0 < self.group < members

    def loop_trips(self, members: int) -> int:
        """How often the step's loop over members runs in all (1: no loop): each member once
        where members run in a loop, each group once under --member_group."""
        if not self.has_loop(members):
            return 1
        return members if self.row.loops else members // self.group

    def counting(self) -> MemberMapping | None:
        """The mapping of the program XLA's cost analysis counts, or None where the compiled
        step's own count holds (unroll, grouped): under the other jax.vmap forms, the members
        in a loop written out, each convolution lax's own, whatever the form runs. Cost
        analysis counts a loop's body once, and the batched products of im2col multiply the
        padding's zeros as well: the FLOPs are the model's, one count for every form."""
        if self.row.counted == "compiled":
            return None
        return dataclasses.replace(SCAN, written_out=True)

    def update(self) -> MemberMapping:
        """The optimizer update's mapping: plain jax.vmap (no convolution), or the loop."""
        return self if self.row.unrolled else GROUPED


SCAN = MemberMapping(member_forms.SEQUENTIAL)
GROUPED = MemberMapping(member_forms.XLA_BATCHED)
UNROLL = MemberMapping(member_forms.UNROLL)


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """mesh and layout; how a device runs its members (`mapping`, one Literal form); how a
    member's gradient is summed over `data` (`allreduce`); the state's per-leaf PartitionSpecs
    (`state_specs`, an EnsembleState of them under --model_parallel, else None)."""

    mesh: Mesh
    layout: MeshLayout
    mapping: MemberMapping
    allreduce: AllreducePlan
    state_specs: object = None

    @property
    def conv(self) -> MemberConv:
        """The convolution the members' model is built with (ops/member_conv.py)."""
        return self.mapping.conv

    @property
    def model_parallel(self) -> int:
        return self.layout.model_parallel

    def counting(self) -> StepPlan | None:
        """The plan of the program XLA's cost analysis counts (MemberMapping.counting), or
        None where the compiled step's own count holds."""
        mapping = self.mapping.counting()
        return None if mapping is None else dataclasses.replace(self, mapping=mapping)
