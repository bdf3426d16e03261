"""The compiled ensemble steps: `shard_map` over the (ensemble, data) mesh, members mapped
inside (docs/design.md, facts 1, 2, 10).

Inside shard_map each device sees its local members' state [m_local, ...] and their batch
rows [m_local, B / P_degree, ...]. The loss is averaged over `data` with `pmean` (under shard_map's
replication checks the gradient of data-invariant parameters is then the exact global mean),
and BatchNorm statistics are averaged over `data` inside one member, never across members.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from hpcai_jax.ensemble import EnsembleState
from hpcai_jax.mesh import BATCH_SPEC, DATA, ENSEMBLE, EVAL_SPEC, MEMBER_SPEC, MeshLayout
from hpcai_jax.workload import ClassificationWorkload

# How a device runs its several members when --member_strategy=auto, per backend, and why.
MEMBER_STRATEGY_DEFAULTS = {
    "cpu": ("unroll", "measured on a 2-core CPU by benchmarks/ensemble_vs_loop.py (BUILD_NOTES.md): "
                      "vmap turns the members' convolutions into slow grouped convolutions"),
    "gpu": ("unroll", "not measured on a GPU yet; grouped convolutions from vmap are reported slow "
                      "on cuDNN (docs/design.md, fact 10), so the CPU measurement's choice is kept"),
    "tpu": ("unroll", "not measured on a TPU yet; the CPU measurement's choice is kept"),
}


def resolve_member_strategy(requested: str, backend: str, members_per_device: int) -> tuple[str, str]:
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
    accuracy: jax.Array  # [M], on the training batch
    finite: jax.Array  # [M] bool: loss and updated parameters all finite


class EvalCounts(struct.PyTreeNode):
    """One eval batch's counts, replicated on every device."""

    member_correct: jax.Array  # [M]: each member's correct predictions, every labelled row
    ensemble_correct: jax.Array  # scored rows the ensemble predicts right
    scored: jax.Array  # rows with at least one voter
    votes: jax.Array  # votes cast on those rows (÷ scored: voters per example)


def member_train_step(workload: ClassificationWorkload, tx: optax.GradientTransformation,
                      axis_name: str | None, state: EnsembleState, images: jax.Array,
                      labels: jax.Array) -> tuple[EnsembleState, jax.Array, jax.Array, jax.Array]:
    """One member's SGD step on its (local part of the) batch.

    axis_name=None trains on a batch that lives on one device: the reference for equivalence.
    """
    model = workload.model if axis_name else workload.local_model
    mean = (lambda v: lax.pmean(v, axis_name)) if axis_name else (lambda v: v)
    x = workload.preprocess(images)

    def loss_fn(params):
        logits, updates = model.apply({"params": params, "batch_stats": state.batch_stats}, x,
                                      train=True, mutable=["batch_stats"])
        return mean(workload.loss(logits, labels)), (updates["batch_stats"], logits)

    (loss, (batch_stats, logits)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    accuracy = mean(jnp.mean((jnp.argmax(logits, -1) == labels).astype(jnp.float32)))
    params = optax.apply_updates(state.params, updates)
    # One reduction over the parameters: cheap next to the step, and catches inf/NaN anywhere.
    finite = jnp.isfinite(loss) & jnp.isfinite(optax.tree.norm(params))
    new_state = state.replace(step=state.step + 1, params=params, batch_stats=batch_stats,
                              opt_state=opt_state)
    return new_state, loss, accuracy, finite


def map_members(fn: Callable, strategy: str, *stacked):
    """Applies fn to each local member: `vmap`, or an unrolled loop whose results are restacked."""
    if strategy == "vmap":
        return jax.vmap(fn)(*stacked)
    count = jax.tree.leaves(stacked)[0].shape[0]
    outs = [fn(*jax.tree.map(lambda x, i=i: x[i], stacked)) for i in range(count)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


def gather_members(local: jax.Array) -> jax.Array:
    """[m_local] per device → [M] replicated, inside shard_map. A psum of zero-padded slots, since
    all_gather's result counts as device-varying for shard_map's replication check."""
    m_local = local.shape[0]
    full = jnp.zeros((m_local * lax.axis_size(ENSEMBLE), *local.shape[1:]), local.dtype)
    full = lax.dynamic_update_slice_in_dim(full, local, lax.axis_index(ENSEMBLE) * m_local, 0)
    return lax.psum(full, ENSEMBLE)


def build_train_step(workload: ClassificationWorkload, tx: optax.GradientTransformation,
                     mesh: Mesh, strategy: str):
    """jit(shard_map(step)) with the state donated: (state, images, labels) → (state, metrics)."""

    def local_step(state, images, labels):
        step = lambda s, x, y: member_train_step(workload, tx, DATA, s, x, y)  # noqa: E731
        new_state, loss, accuracy, finite = map_members(step, strategy, state, images, labels)
        figures = (loss, accuracy, finite.astype(jnp.int32))
        loss, accuracy, finite = (gather_members(f) for f in figures)
        return new_state, StepMetrics(loss, accuracy, finite.astype(jnp.int32) > 0)

    # check_vma=True is load-bearing, not a default left alone: with it, shard_map knows the
    # parameters are invariant over `data` and the gradient of the pmean'ed loss comes back
    # psum'ed over `data` (the exact global-batch gradient). Without it the gradient is each
    # device's local one, silently wrong.
    sharded = jax.shard_map(local_step, mesh=mesh, in_specs=(MEMBER_SPEC, BATCH_SPEC, BATCH_SPEC),
                            out_specs=(MEMBER_SPEC, P()), check_vma=True)
    return jax.jit(sharded, donate_argnums=0)


def build_eval_step(workload: ClassificationWorkload, mesh: Mesh, strategy: str):
    """(state, images [E], labels [E], votes [M, E]) → EvalCounts, replicated.

    The ensemble predicts an example by the argmax of the mean softmax probabilities of the
    members that vote on it (votes 1): every kept member on held-out data; on training data, the
    kept members that never trained on the example (the out-of-bag estimate). An example without
    a voter is not scored. Padding rows carry label -1 and no votes, so they never count.
    """

    def local_eval(state, images, labels, votes):
        x = workload.preprocess(images)

        def member_probs(s):
            logits = workload.local_model.apply({"params": s.params, "batch_stats": s.batch_stats},
                                                x, train=False)
            return jax.nn.softmax(logits, axis=-1)

        probs = map_members(member_probs, strategy, state)  # [m_local, e, C]
        member_correct = jnp.sum(jnp.argmax(probs, -1) == labels[None], axis=1)
        # where(), not a product: a pruned member's probabilities may be NaN. The argmax of the
        # voters' sum is that of their mean.
        summed = lax.psum(jnp.sum(jnp.where(votes[..., None] > 0, probs, 0.0), axis=0), ENSEMBLE)
        voters = lax.psum(jnp.sum(votes, axis=0), ENSEMBLE)
        scored = voters > 0
        ensemble_correct = jnp.sum(scored & (jnp.argmax(summed, -1) == labels))
        member_correct = gather_members(lax.psum(member_correct, DATA))
        return EvalCounts(member_correct, lax.psum(ensemble_correct, DATA),
                          lax.psum(jnp.sum(scored, dtype=jnp.int32), DATA),
                          lax.psum(jnp.sum(voters), DATA))

    sharded = jax.shard_map(local_eval, mesh=mesh,
                            in_specs=(MEMBER_SPEC, EVAL_SPEC, EVAL_SPEC, BATCH_SPEC),
                            out_specs=P(), check_vma=True)
    return jax.jit(sharded)


@dataclasses.dataclass(frozen=True)
class CompiledTrainStep:
    compiled: jax.stages.Compiled
    layout: MeshLayout
    mesh: Mesh
    num_devices: int
    member_strategy: str
    member_strategy_why: str
    compile_s: float


def abstract_batch(mesh: Mesh, layout: MeshLayout, batch_size: int,
                   image_shape: tuple[int, ...]) -> tuple[jax.ShapeDtypeStruct, jax.ShapeDtypeStruct]:
    sh = jax.sharding.NamedSharding(mesh, BATCH_SPEC)
    m = layout.ensemble_size
    return (jax.ShapeDtypeStruct((m, batch_size, *image_shape), jnp.uint8, sharding=sh),
            jax.ShapeDtypeStruct((m, batch_size), jnp.int32, sharding=sh))


def compile_step(step_fn, state, mesh: Mesh, layout: MeshLayout, batch_size: int,
                 image_shape: tuple[int, ...]) -> tuple[jax.stages.Compiled, float]:
    """Compiles ahead of timing; state may be concrete or abstract. Returns (compiled, seconds)."""
    start = time.perf_counter()
    compiled = step_fn.lower(state, *abstract_batch(mesh, layout, batch_size, image_shape)).compile()
    return compiled, time.perf_counter() - start


def compile_train_step(config, devices=None) -> CompiledTrainStep:
    """The whole-ensemble training step for `config`, compiled without initialising any state
    (for FLOP accounting)."""
    from hpcai_jax.assemble import assemble

    setup = assemble(config, devices=devices, open_data=False)
    compiled, seconds = compile_step(setup.train_step, setup.abstract_state, setup.mesh,
                                     setup.layout, config.train.batch_size,
                                     setup.workload.spec.image_shape)
    return CompiledTrainStep(compiled=compiled, layout=setup.layout, mesh=setup.mesh,
                             num_devices=setup.layout.num_devices,
                             member_strategy=setup.member_strategy,
                             member_strategy_why=setup.member_strategy_why, compile_s=seconds)
