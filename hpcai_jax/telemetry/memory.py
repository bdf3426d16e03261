"""The compiled steps' memory per device, as XLA's memory analysis gives it: the training
step's for the record, and the evaluation step's compiled without data or state, which is how
docs/scale.md's claim that a device's evaluation memory does not grow with M is measured
(`tests/test_evaluate_scale.py`, `benchmarks/eval_memory.py`)."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
from jax.sharding import NamedSharding

from hpcai_jax.axes import BATCH_SPEC, ENSEMBLE
from hpcai_jax.data.pipeline import eval_layout


def memory_analysis(compiled) -> dict:
    """The compiled step's memory per device (bytes): on an accelerator, the first thing to
    check. Empty where the backend gives no analysis."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend implements it
        return {}
    if m is None:
        return {}
    return {
        "argument_bytes": m.argument_size_in_bytes,
        "output_bytes": m.output_size_in_bytes,
        "alias_bytes": m.alias_size_in_bytes,
        "temp_bytes": m.temp_size_in_bytes,
        "generated_code_bytes": m.generated_code_size_in_bytes,
    }


@dataclasses.dataclass(frozen=True)
class EvalMemory:
    """Bytes per device of one compiled eval step (XLA's figures for the busiest device)."""

    temp_bytes: int
    output_bytes: int
    argument_bytes: int

    @property
    def step_bytes(self) -> int:
        """What the step itself allocates: its temporaries and outputs (arguments are the
        state and the batch, which the run holds anyway)."""
        return self.temp_bytes + self.output_bytes


def eval_step_memory(setup) -> EvalMemory:
    """`setup`'s (engine/setup.RunSetup) eval step at its --eval_batch_size, lowered on
    abstract inputs shaped as data/pipeline.eval_batches reads them, compiled, and measured."""
    size, split = eval_layout(setup.mesh, setup.config.train.eval_batch_size)
    lead = (setup.mesh.shape[ENSEMBLE], size // split)
    read = NamedSharding(setup.mesh, BATCH_SPEC)
    batch = {
        name: jax.ShapeDtypeStruct((*lead, *shape), np.dtype(dtype), sharding=read)
        for name, (shape, dtype) in setup.datasets.eval.spec.fields.items()
    }
    valid = jax.ShapeDtypeStruct(lead, bool, sharding=read)
    votes = jax.ShapeDtypeStruct((setup.layout.ensemble_size, size), np.float32, sharding=read)
    lowered = setup.eval_step.lower(setup.abstract_state, batch, valid, votes, split)
    analysis = lowered.compile().memory_analysis()
    return EvalMemory(
        temp_bytes=int(analysis.temp_size_in_bytes),
        output_bytes=int(analysis.output_size_in_bytes),
        argument_bytes=int(analysis.argument_size_in_bytes),
    )


def small_detector_setup(m: int, members_per_device: int, rows_per_device: int, devices: int):
    """The small detector (faster_rcnn_small on 32-row synthetic climate fields) at M = m on
    `devices` devices, each holding `members_per_device` members and `rows_per_device` held-out
    rows per batch: a device's share is the same at every M (P_degree = devices ×
    members_per_device / m), so only M shows in its memory. Returns (setup, P_degree)."""
    from hpcai_jax import config as C
    from hpcai_jax.engine.setup import build_setup

    degree = devices * members_per_device // m
    config = C.RunConfig(
        mesh=C.MeshConfig(
            ensemble_size=m, members_per_device=members_per_device, parallel_degree=degree
        ),
        model=C.ModelConfig(workload="extreme_weather", model="faster_rcnn_small"),
        data=C.DataConfig(
            dataset="synthetic_climate", image_size=32, train_examples=32, eval_examples=16
        ),
        train=C.TrainConfig(batch_size=8, steps=1, eval_batch_size=rows_per_device * degree),
        optim=C.OptimConfig(lr_schedule="constant", learning_rate=0.1),
        results=C.ResultsConfig(target_quality=0.35),
    ).validate()
    return build_setup(config, devices=jax.devices()[:devices]), degree
