"""The compiled ensemble steps: `shard_map` over the (ensemble, data) mesh, members mapped
inside (docs/design.md, facts 1, 2, 10).

Inside shard_map each device sees its local members' state [m_local, ...] and their batch
rows [m_local, B / P_degree, ...]. The loss is averaged over `data` with `pmean` (under shard_map's
replication checks the gradient of data-invariant parameters is then the exact global mean),
and BatchNorm statistics are averaged over `data` inside one member, never across members.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from hpcai_jax.axes import BATCH_SPEC, DATA, ENSEMBLE, EVAL_SPEC, MEMBER_SPEC
from hpcai_jax.data.source import Fields
from hpcai_jax.engine.mesh import MeshLayout
from hpcai_jax.engine.state import EnsembleState
from hpcai_jax.workloads.base import Workload

# How a device runs its several members when --member_strategy=auto, per backend, and why.
MEMBER_STRATEGY_DEFAULTS = {
    "cpu": (
        "unroll",
        "measured on a 2-core CPU by benchmarks/ensemble_vs_loop.py (BUILD_NOTES.md): "
        "vmap turns the members' convolutions into slow grouped convolutions",
    ),
    "gpu": (
        "unroll",
        "not measured on a GPU yet; grouped convolutions from vmap are reported slow "
        "on cuDNN (docs/design.md, fact 10), so the CPU measurement's choice is kept",
    ),
    "tpu": ("unroll", "not measured on a TPU yet; the CPU measurement's choice is kept"),
}


def resolve_member_strategy(
    requested: str, backend: str, members_per_device: int
) -> tuple[str, str]:
    """Returns (strategy, why) for the record."""
    if members_per_device == 1:
        return "unroll", "one member per device: nothing to map over"
    if requested != "auto":
        return requested, "--member_strategy"
    strategy, why = MEMBER_STRATEGY_DEFAULTS.get(backend, MEMBER_STRATEGY_DEFAULTS["cpu"])
    return strategy, f"auto for {backend}: {why}"


class StepMetrics(struct.PyTreeNode):
    """Per-member figures of one step, replicated on every device (readable by any process)."""

    loss: jax.Array  # [M]
    finite: jax.Array  # [M] bool: loss and updated parameters all finite
    metrics: dict  # name → [M]: the workload's training metrics on the step's batch


class EvalCounts(struct.PyTreeNode):
    """One eval batch's counts, replicated on every device."""

    members: jax.Array  # [M, K]: the workload's counts of each member's prediction, valid rows
    ensemble: jax.Array  # [K]: of the voters' mean prediction, on rows with a voter
    scored: jax.Array  # rows with at least one voter
    votes: jax.Array  # votes cast on those rows (÷ scored: voters per example)


def _apply(workload: Workload, model, state: EnsembleState, x: jax.Array, train: bool):
    """(outputs, updated model state) of one member; the state is returned unchanged in eval."""
    variables = {"params": state.params, **state.model_state}
    if not (train and state.model_state):
        return model.apply(variables, x, train=train), state.model_state
    return model.apply(variables, x, train=True, mutable=list(state.model_state))


def member_train_step(
    workload: Workload,
    tx: optax.GradientTransformation,
    axis_name: str | None,
    state: EnsembleState,
    batch: dict,
) -> tuple[EnsembleState, jax.Array, dict, jax.Array]:
    """One member's step on its (local part of the) batch: (state, loss, metrics, finite).

    axis_name=None trains on a batch that lives on one device: the reference for equivalence.
    """
    model = workload.model(axis_name)
    mean = (lambda v: lax.pmean(v, axis_name)) if axis_name else (lambda v: v)
    x = workload.inputs(batch)

    def loss_fn(params):
        outputs, model_state = _apply(workload, model, state.replace(params=params), x, True)
        loss, metrics = workload.loss(outputs, batch)
        return mean(loss), (model_state, metrics)

    (loss, (model_state, metrics)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    # One reduction over the parameters: cheap next to the step, and catches inf/NaN anywhere.
    finite = jnp.isfinite(loss) & jnp.isfinite(optax.tree.norm(params))
    new_state = state.replace(
        step=state.step + 1, params=params, model_state=model_state, opt_state=opt_state
    )
    return new_state, loss, jax.tree.map(mean, metrics), finite


def map_members(fn: Callable, strategy: str, *stacked):
    """Applies fn to each local member: `vmap`, or an unrolled loop whose results are restacked."""
    if strategy == "vmap":
        return jax.vmap(fn)(*stacked)
    count = jax.tree.leaves(stacked)[0].shape[0]
    outs = [fn(*jax.tree.map(lambda x, i=i: x[i], stacked)) for i in range(count)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


METRICS_SCOPE = "member_metrics"  # names the HLO of gather_members (engine/comm.py)


def gather_members(local: jax.Array) -> jax.Array:
    """[m_local] per device → [M] replicated, inside shard_map. A psum of zero-padded slots, since
    all_gather's result counts as device-varying for shard_map's replication check."""
    with jax.named_scope(METRICS_SCOPE):  # its collectives are reporting, not training traffic
        m_local = local.shape[0]
        full = jnp.zeros((m_local * lax.axis_size(ENSEMBLE), *local.shape[1:]), local.dtype)
        full = lax.dynamic_update_slice_in_dim(full, local, lax.axis_index(ENSEMBLE) * m_local, 0)
        return lax.psum(full, ENSEMBLE)


def build_train_step(
    workload: Workload, tx: optax.GradientTransformation, mesh: Mesh, strategy: str
):
    """jit(shard_map(step)) with the state donated: (state, batch) → (state, StepMetrics)."""

    def local_step(state, batch):
        step = lambda s, b: member_train_step(workload, tx, DATA, s, b)  # noqa: E731
        new_state, loss, metrics, finite = map_members(step, strategy, state, batch)
        metrics = jax.tree.map(gather_members, metrics)
        finite = gather_members(finite.astype(jnp.int32)) > 0
        return new_state, StepMetrics(gather_members(loss), finite, metrics)

    # check_vma=True is load-bearing, not a default left alone: with it, shard_map knows the
    # parameters are invariant over `data` and the gradient of the pmean'ed loss comes back
    # psum'ed over `data` (the exact global-batch gradient). Without it the gradient is each
    # device's local one, silently wrong.
    sharded = jax.shard_map(
        local_step,
        mesh=mesh,
        in_specs=(MEMBER_SPEC, BATCH_SPEC),
        out_specs=(MEMBER_SPEC, P()),
        check_vma=True,
    )
    return jax.jit(sharded, donate_argnums=0)


def build_eval_step(workload: Workload, mesh: Mesh, strategy: str):
    """(state, batch [E], valid [E], votes [M, E]) → EvalCounts, replicated.

    The ensemble predicts an example by the mean of the predictions of the members that vote on
    it (votes 1): every kept member on held-out data; on training data, the kept members that
    never trained on the example (the out-of-bag estimate). An example without a voter is not
    scored; padding rows (valid false) have no votes and count for no member.
    """
    model = workload.model(None)

    def local_eval(state, batch, valid, votes):
        x = workload.inputs(batch)

        def member_prediction(s):
            return workload.predict(_apply(workload, model, s, x, False)[0])

        preds = map_members(member_prediction, strategy, state)  # [m_local, e, ...]
        weight = valid.astype(jnp.float32)
        members = jnp.stack([workload.counts(p, batch, weight) for p in preds])
        # where(), not a product: a pruned member's predictions may be NaN.
        mask = votes.reshape(votes.shape + (1,) * (preds.ndim - 2)) > 0
        summed = lax.psum(jnp.sum(jnp.where(mask, preds, 0.0), axis=0), ENSEMBLE)
        voters = lax.psum(jnp.sum(votes, axis=0), ENSEMBLE)
        scored = voters > 0
        mean = summed / jnp.maximum(voters, 1.0).reshape(voters.shape + (1,) * (summed.ndim - 1))
        ensemble = workload.counts(mean, batch, scored.astype(jnp.float32))
        return EvalCounts(
            gather_members(lax.psum(members, DATA)),
            lax.psum(ensemble, DATA),
            lax.psum(jnp.sum(scored, dtype=jnp.int32), DATA),
            lax.psum(jnp.sum(voters), DATA),
        )

    sharded = jax.shard_map(
        local_eval,
        mesh=mesh,
        in_specs=(MEMBER_SPEC, EVAL_SPEC, EVAL_SPEC, BATCH_SPEC),
        out_specs=P(),
        check_vma=True,
    )
    return jax.jit(sharded)


def abstract_batch(mesh: Mesh, layout: MeshLayout, batch_size: int, fields: Fields) -> dict:
    """The training batch's shapes, dtypes and shardings: [M, B, ...] per field."""
    sh = jax.sharding.NamedSharding(mesh, BATCH_SPEC)
    lead = (layout.ensemble_size, batch_size)
    return {
        name: jax.ShapeDtypeStruct((*lead, *shape), dtype, sharding=sh)
        for name, (shape, dtype) in fields.items()
    }


def compile_step(
    step_fn, state, mesh: Mesh, layout: MeshLayout, batch_size: int, fields: Fields
) -> tuple[jax.stages.Compiled, float]:
    """Compiles ahead of timing; state may be concrete or abstract. Returns (compiled, seconds)."""
    start = time.perf_counter()
    compiled = step_fn.lower(state, abstract_batch(mesh, layout, batch_size, fields)).compile()
    return compiled, time.perf_counter() - start
