"""The ensemble transform's state: M members' variables stacked on a leading axis.

Every leaf, the step counter included, has the member axis first, so one PartitionSpec,
P('ensemble'), shards the whole state and per-member transforms never mix members.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.sharding import Mesh

from hpcai_jax.axes import MEMBER_SPEC
from hpcai_jax.engine.loss_scale import LossScale
from hpcai_jax.engine.mesh import sharding
from hpcai_jax.workloads.base import Workload


class EnsembleState(struct.PyTreeNode):
    step: jax.Array  # [M] int32
    params: dict
    model_state: dict  # the model's other collections (BatchNorm's "batch_stats"); may be empty
    opt_state: optax.OptState
    loss_scale: LossScale | None = None  # --dtype=float16 only (engine/loss_scale.py)


def member_keys(seed: int, ensemble_size: int) -> jax.Array:
    """Member m's initialisation key: the m-th split of the run seed's key."""
    return jax.random.split(jax.random.key(seed), ensemble_size)


def dummy_batch(workload: Workload, rows: int = 1) -> dict:
    """Zeros of every field, [rows, ...]: what init traces the model with."""
    return {
        name: jnp.zeros((rows, *shape), dtype)
        for name, (shape, dtype) in workload.spec.fields.items()
    }


def uses_loss_scaling(workload: Workload) -> bool:
    """float16 compute needs a dynamic loss scale; float32 and bfloat16 do not."""
    return getattr(workload, "dtype", "float32") == "float16"


def init_member(
    workload: Workload, tx: optax.GradientTransformation, key: jax.Array
) -> EnsembleState:
    """One member's state, unstacked (step is a scalar): used under vmap, and by references."""
    variables = dict(
        workload.model(None).init(key, workload.inputs(dummy_batch(workload)), train=False)
    )
    params = variables.pop("params")
    return EnsembleState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        model_state=variables,
        opt_state=tx.init(params),
        loss_scale=LossScale.create() if uses_loss_scaling(workload) else None,
    )


def init_state(
    workload: Workload, tx: optax.GradientTransformation, mesh: Mesh, ensemble_size: int, seed: int
) -> EnsembleState:
    """Stacked state, born sharded over the ensemble axis (no host copy of all members)."""

    def init(seed_array):
        keys = jax.random.split(jax.random.key(seed_array), ensemble_size)
        return jax.vmap(lambda k: init_member(workload, tx, k))(keys)

    return jax.jit(init, out_shardings=sharding(mesh, MEMBER_SPEC))(jnp.asarray(seed, jnp.uint32))
