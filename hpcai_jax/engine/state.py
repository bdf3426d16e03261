"""The ensemble transform's state: M members' variables stacked on a leading axis.

Every leaf, the step counter included, has the member axis first, so one PartitionSpec,
P('ensemble'), shards the whole state and per-member transforms never mix members.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from hpcai_jax.axes import ENSEMBLE, MEMBER_SPEC, member_spec
from hpcai_jax.engine.mesh import sharding
from hpcai_jax.engine.optimizer import LossScale
from hpcai_jax.errors import UsageError
from hpcai_jax.workloads.base import Workload


class EnsembleState(struct.PyTreeNode):
    step: jax.Array  # [M] int32
    params: dict
    model_state: dict  # the model's other collections (BatchNorm's "batch_stats"); may be empty
    opt_state: optax.OptState
    loss_scale: LossScale | None = None  # --dtype=float16 only (engine/optimizer.py)


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
    return workload.dtype == "float16"


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


def abstract_state(
    workload: Workload, tx: optax.GradientTransformation, ensemble_size: int
) -> EnsembleState:
    """The stacked state's shapes and dtypes, without computing it."""
    return jax.eval_shape(
        lambda: jax.vmap(lambda k: init_member(workload, tx, k))(member_keys(0, ensemble_size))
    )


def state_specs(
    workload: Workload, tx: optax.GradientTransformation, ensemble_size: int, model_parallel: int
):
    """Every state leaf's PartitionSpec (axes.member_spec); None without --model_parallel (one
    prefix spec, MEMBER_SPEC, serves). Raises UsageError for a workload that cannot be split or
    a layer whose output features do not divide by P_model."""
    if model_parallel == 1:
        return None
    if workload.split_model(None, model_parallel) is None:
        raise UsageError(
            f"--model_parallel={model_parallel}: --workload={workload.name} has no tensor-"
            "parallel model (only --workload=image_classification's ResNets)"
        )
    shapes = abstract_state(workload, tx, ensemble_size)
    for path, leaf in jax.tree_util.tree_flatten_with_path((shapes.params, shapes.model_state))[0]:
        if leaf.ndim >= 2 and leaf.shape[-1] % model_parallel:
            name = "/".join(str(getattr(k, "key", k)) for k in path[1:])
            raise UsageError(
                f"--model_parallel={model_parallel}: layer {name} has {leaf.shape[-1]} output "
                f"features, not divisible by {model_parallel}"
            )
    return jax.tree.map(lambda leaf: member_spec(leaf, model_parallel), shapes)


def shardings(mesh: Mesh, specs):
    """NamedShardings of `state_specs` (a tree, or None: MEMBER_SPEC for every leaf)."""
    if specs is None:
        return sharding(mesh, MEMBER_SPEC)
    return jax.tree.map(
        lambda spec: sharding(mesh, spec), specs, is_leaf=lambda x: isinstance(x, P)
    )


# build_init's loop over a device's own members: keys in, state out, each device its block.
_PER_DEVICE = {"in_specs": MEMBER_SPEC, "out_specs": MEMBER_SPEC}


def build_init(
    workload: Workload,
    tx: optax.GradientTransformation,
    mesh: Mesh,
    ensemble_size: int,
    specs=None,
):
    """The jitted seed → stacked state, born sharded over the ensemble axis and over `model` as
    `specs` says; a device's several members initialised one after another: the vmap's bits at
    about half its compile (docs/design.md, The members' initial state). Built once per setup."""
    member = functools.partial(init_member, workload, tx)
    local = jax.vmap(member)
    if specs is None and ensemble_size > mesh.shape[ENSEMBLE]:
        local = jax.shard_map(functools.partial(jax.lax.map, member), mesh=mesh, **_PER_DEVICE)

    def init(seed_array):
        return local(jax.random.split(jax.random.key(seed_array), ensemble_size))

    jitted = jax.jit(init, out_shardings=shardings(mesh, specs))
    return lambda seed: jitted(jnp.asarray(seed, jnp.uint32))
