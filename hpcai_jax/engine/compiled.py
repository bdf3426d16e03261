"""A step compiled ahead of timing: its abstract batch, the lowering and compile timed apart
from the steps, and the same step lowered again with its members' loops written out for XLA's
cost analysis (xla_cost.py), which counts a loop's body once."""

from __future__ import annotations

import dataclasses
import time

import jax
from jax.sharding import Mesh

from hpcai_jax.axes import BATCH_SPEC
from hpcai_jax.data.source import Fields
from hpcai_jax.engine.mesh import MeshLayout


def abstract_batch(mesh: Mesh, layout: MeshLayout, batch_size: int, fields: Fields) -> dict:
    """The training batch's shapes, dtypes and shardings: [M, B, ...] per field."""
    sh = jax.sharding.NamedSharding(mesh, BATCH_SPEC)
    lead = (layout.ensemble_size, batch_size)
    return {
        name: jax.ShapeDtypeStruct((*lead, *shape), dtype, sharding=sh)
        for name, (shape, dtype) in fields.items()
    }


@dataclasses.dataclass(frozen=True)
class StepBuild:
    """A compiled step, how long lowering and compiling took, and the lowered program (whose
    FLOPs count where the compiled one calls libraries: xla_cost.py). `counted`: the same step
    with its loops over members written out, lowered for cost analysis only (None: no loops)."""

    compiled: jax.stages.Compiled
    seconds: float
    lowered: jax.stages.Lowered
    counted: jax.stages.Lowered | None = None


def compile_step(
    step_fn,
    state,
    mesh: Mesh,
    layout: MeshLayout,
    batch_size: int,
    fields: Fields,
    compiler_options: dict | None = None,
    count_fn=None,
) -> StepBuild:
    """Compiles ahead of timing; state may be concrete or abstract.
    `compiler_options`: XLA options for this compile only (a setting measured against another).
    `count_fn`: the step built again for cost analysis (RunSetup.count_step), lowered with its
    members' loops written out; not part of the timed compile."""
    batch = abstract_batch(mesh, layout, batch_size, fields)
    start = time.perf_counter()
    lowered = step_fn.lower(state, batch)
    compiled = (
        lowered.compile(compiler_options=compiler_options)
        if compiler_options
        else lowered.compile()
    )
    seconds = time.perf_counter() - start
    counted = count_lowered(count_fn, state, mesh, layout, batch_size, fields)
    return StepBuild(compiled, seconds, lowered, counted)


def count_lowered(count_fn, state, mesh: Mesh, layout: MeshLayout, batch_size: int, fields):
    """`count_fn` (RunSetup.count_step: its loops over members written out) lowered for XLA's
    cost analysis; None without one."""
    if count_fn is None:
        return None
    return count_fn.lower(state, abstract_batch(mesh, layout, batch_size, fields))


def compile_abstract_step(setup, compiler_options: dict | None = None, count: bool = False):
    """`setup`'s train step (engine/setup.RunSetup) compiled for its abstract state, without
    initialising any (FLOP accounting, the node check's fit); with `count`, also lowered with
    its members' loops written out."""
    return compile_step(
        setup.train_step,
        setup.abstract_state,
        setup.mesh,
        setup.layout,
        setup.config.train.batch_size,
        setup.workload.spec.fields,
        compiler_options,
        setup.count_step if count else None,
    )
