"""The node check's record (`--mode=check`); `nodecheck/runner.py` builds it from the items' sections.
docs/node_check.md explains the rows, docs/record.md lists the fields."""

from __future__ import annotations

from hpcai_jax.records.envelope import Record
from hpcai_jax.records.fields import field
from hpcai_jax.records.schema import section
from hpcai_jax.records.train import Memory


@section
class System:
    backend: str = field("JAX's default backend")
    device_kind: str = field("the devices' kind")
    device_count: int = field("devices of the job", "devices")
    local_device_count: int = field("devices of process 0", "devices")
    process_count: int = field("JAX processes", "processes")
    nodes: list[str] = field("the job's nodes, sorted")
    node_of_process: list[str] = field("each process's node, by process index")
    peaks_row: str | None = field("the datasheet row of the device kind; None where unknown")
    memory_bandwidth: list | None = field(
        "[bytes/s, source] of one device's memory by datasheet; None where unknown"
    )
    link: list | None = field(
        "[bytes/s, source] of the intra-node link by datasheet; None where unknown"
    )
    host_cores: int = field("CPU cores this process may run on", "cores")
    host_memory_bytes: int | None = field("the host's memory", "B")


@section
class CollectivePoint:
    axis: str = field("the group of devices measured: intra_node (inside a node) or inter_node")
    op: str = field("the collective: all_reduce, all_gather or reduce_scatter")
    n: int = field("devices of one group", "devices")
    size_bytes: int = field("the message: the whole array's bytes", "B")
    count: int = field("float32 elements of the whole array")
    iters: int = field("calls timed")
    time_s: float = field("one call on average, the slowest process's", "s")
    algbw: float = field("size_bytes / time_s, as nccl-tests defines it", "B/s")
    busbw: float = field(
        "algbw × the collective's bus factor, as nccl-tests defines it (docs/node_check.md)",
        "B/s",
    )
    wrong: int | None = field(
        "nccl-tests' #wrong: elements of the out-of-place result that differ from the analytic "
        "value; None in records written before it"
    )
    in_place_iters: int | None = field("in-place calls timed (the input buffer donated)")
    in_place_time_s: float | None = field("one in-place call on average", "s")
    in_place_algbw: float | None = field("size_bytes / in_place_time_s", "B/s")
    in_place_busbw: float | None = field("in_place_algbw × the bus factor", "B/s")
    in_place_wrong: int | None = field("#wrong of the in-place result")


@section
class StepConfig:
    model: str = field("the model of the step measured")
    dtype: str = field("its dtype")
    ensemble_size: int = field("members", "members")
    batch_size: int = field("examples per member per step", "examples")
    image_size: int = field("the input size (0: the data set's)")


@section
class TrainStep:
    config: StepConfig = field("what was built")
    compile_s: float = field("compiling the step", "s")
    build_s: float = field("set-up, initial state and compile", "s")
    step_s: list[float] = field("each timed step", "s")
    examples_per_s_per_device: float | None = field(
        "M × batch / median step / devices", "examples/s"
    )
    flops_per_step: float = field("the step's FLOPs, all devices (as FLOPS counts them)", "FLOP")
    flops_source: str = field("xla_cost_analysis or analytic")
    flops_per_s_per_device: float | None = field("flops_per_step / median step / devices", "FLOP/s")
    xla_over_analytic: float | None = field("XLA's count / the analytic walk")
    finite: bool = field("every timed step's loss was finite")
    joules: float | None = field("energy over the timed steps, where counted", "J")
    memory: Memory | None = field(
        "the compiled step's memory per device; `{}` where the backend gives none", none_as={}
    )


@section
class MemberStrategy:
    winner: str = field("unroll or vmap: the lower median step time")
    backend: str = field("where it was measured (a training run on another backend refuses it)")
    device_kind: str = field("the device it was measured on")
    members_per_device: int = field("members per device in the comparison", "members")
    batch_size: int = field("examples per member per step", "examples")
    model: str = field("the model compared")
    step_s: dict[str, float] = field("strategy → its median step time", "s")


@section
class CheckRow:
    item: str = field("what was checked, e.g. stream triad per device")
    status: str = field("PASS, WARN or FAIL, or n/a where a row is measured but not judged (a CPU)")
    measured: float | None = field("the figure measured (unit in `unit`)")
    expected: float | None = field("what it is judged against")
    unit: str = field("the unit of measured and expected")
    source: str = field("where expected comes from: a datasheet, a figure of this machine class")
    note: str = field("why the status is what it is, or what the budget cut")
    ratio: float | None = field("measured / expected")


@section
class Budget:
    budget_s: float = field("`--check_budget_s`", "s")
    used_s: dict[str, float] = field("what each item used, by item", "s")
    wall_s: float = field("the check's wall time", "s")


@section
class CheckSection:
    system: System = field("devices, nodes and this host")
    collectives: list[CollectivePoint] = field("every collective measured, size by size")
    train_step: TrainStep | None = field(
        "the flagship training step measured; `{}` when the budget left it out", none_as={}
    )
    member_strategy: MemberStrategy | None = field(
        "unroll against vmap, for `--member_strategy=auto --check_record`; `{}` when the budget "
        "left it out",
        none_as={},
    )
    rows: list[CheckRow] = field("one row per item, in the order checked")
    verdict: str = field("FAIL when a row failed, else WARN when one warned, else PASS")
    budget: Budget = field("the time budget and its use (docs/node_check.md)")


@section
class CheckRecord(Record):
    check: CheckSection = field("the node check's items and verdict")
