"""The compiled ensemble steps: `shard_map` over the (ensemble, data) mesh, members mapped
inside (docs/design.md, facts 1, 2, 10).

Inside shard_map each device sees its local members' state [m_local, ...] and their batch
rows [m_local, B / P_degree, ...]. The loss is averaged over `data` with `pmean`, and BatchNorm
statistics are averaged over `data` inside one member, never across members. The train step's
gradient sum over `data` is explicit (engine/collectives.py), so its dtype and communication
mode are the ones the record names (docs/system_options.md).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from hpcai_jax.axes import BATCH_SPEC, DATA, ENSEMBLE, MEMBER_SPEC, MODEL
from hpcai_jax.engine import optimizer as loss_scale
from hpcai_jax.engine.collectives import AllreducePlan, reduce_gradients
from hpcai_jax.engine.plan import MemberMapping, StepPlan
from hpcai_jax.engine.state import EnsembleState
from hpcai_jax.workloads.base import Workload


class StepMetrics(struct.PyTreeNode):
    """Per-member figures of one step, sharded over `ensemble` like the members themselves: the
    step has no collective between two members, so no member waits for another (a process reads
    its own members' shards: run/member_figures.py)."""

    loss: jax.Array  # [M]
    finite: jax.Array  # [M] bool: loss and updated parameters all finite
    metrics: dict  # name → [M]: the workload's training metrics on the step's batch
    skipped: jax.Array | None = None  # [M]: steps skipped on float16 overflow, over the run
    input_finite: jax.Array | None = None  # [M] bool: the member's batch held no NaN/inf


def map_members(fn: Callable, mapping: MemberMapping, *stacked):
    """fn applied to each local member's slices of `stacked`, results stacked [m_local, ...],
    as `mapping` says (engine/member_map.py): a loop, jax.vmap (in groups), or under `unroll` a
    Python loop. fn's model must be built with the mapping's convolution (`member_model`)."""
    if mapping.row.sequential:
        return mapping.conv.loop(fn, *stacked)
    if mapping.row.mapped:
        return _in_groups(jax.vmap(fn), mapping, *stacked)
    count = jax.tree.leaves(stacked)[0].shape[0]
    outs = [fn(*jax.tree.map(lambda x, i=i: x[i], stacked)) for i in range(count)]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *outs)


def _in_groups(fn: Callable, mapping: MemberMapping, *stacked):
    """fn (batched over members) on groups of `mapping.group` members one after another (a
    loop, written out where the mapping says); on all of them at once where group is 0."""
    m, group = jax.tree.leaves(stacked)[0].shape[0], mapping.group
    if not 0 < group < m:
        return fn(*stacked)
    split = jax.tree.map(lambda x: x.reshape(m // group, group, *x.shape[1:]), stacked)
    out = mapping.conv.loop(fn, *split)
    return jax.tree.map(lambda x: x.reshape(m, *x.shape[2:]), out)


def _apply(workload: Workload, model, state: EnsembleState, x: jax.Array, train: bool):
    """(outputs, updated model state) of one member; the state is returned unchanged in eval."""
    variables = {"params": state.params, **state.model_state}
    if not (train and state.model_state):
        return model.apply(variables, x, train=train), state.model_state
    return model.apply(variables, x, train=True, mutable=list(state.model_state))


def member_model(workload: Workload, plan: StepPlan, axis_name: str | None):
    """The module one device runs for a member under `plan`: the whole member, built with the
    plan's convolution, or its share of a member split over `model` (--model_parallel,
    models/resnet.py, whose convolutions keep lax's: engine/member_map.resolve_member_map)."""
    if plan.model_parallel == 1:
        return workload.model(axis_name, plan.conv.conv_general_dilated)
    return workload.split_model(axis_name, plan.model_parallel)


def member_gradients(workload: Workload, model, axis_name: str | None, state: EnsembleState, batch):
    """One member's (loss, gradient, model state, metrics) on its (local part of the) batch.

    With an axis name the parameters are cast device-varying over it first, so the gradient that
    comes back is this device's share of the global-batch gradient (the loss is pmean'ed), and
    its sum over the axis is left to `collectives.reduce_gradients`: the reduction is explicit,
    in the dtype and mode the plan names. Under --dtype=float16 the gradient is of the loss
    times the member's loss scale (unscaled by `member_update`). `model`: `member_model`'s,
    built once with the step rather than inside its trace.
    """
    mean = (lambda v: lax.pmean(v, axis_name)) if axis_name else (lambda v: v)
    x = workload.inputs(batch)
    scale = state.loss_scale.scale if state.loss_scale is not None else None

    def loss_fn(params):
        outputs, model_state = _apply(workload, model, state.replace(params=params), x, True)
        loss, metrics = workload.loss(outputs, batch)
        loss = mean(loss)
        scaled = loss * scale if scale is not None else loss
        return scaled, (loss, model_state, metrics)

    params = lax.pcast(state.params, axis_name, to="varying") if axis_name else state.params
    (_, (loss, model_state, metrics)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return loss, grads, model_state, jax.tree.map(mean, metrics)


def _everywhere(ok: jax.Array, model_axis: str | None) -> jax.Array:
    """A flag true on every device of a member split over `model_axis` (None: not split)."""
    if model_axis is None:
        return ok
    return lax.pmin(ok.astype(jnp.int32), model_axis) > 0


def member_update(
    tx: optax.GradientTransformation,
    state: EnsembleState,
    grads,
    model_state: dict,
    model_axis: str | None = None,
) -> tuple[EnsembleState, jax.Array]:
    """Applies one member's summed gradient: (state, parameters finite).

    With a loss scale the gradient is unscaled first, and a step whose gradient is not finite
    leaves the member's state as it was (parameters, optimizer state, BatchNorm statistics, step
    counter): only the loss scale halves and counts it. Under
    --model_parallel each device holds a slice of the member (`model_axis`): the finite flags
    are agreed over it, so that its devices skip or keep a step together.
    """
    ls = state.loss_scale
    if ls is not None:
        grads = jax.tree.map(lambda g: g / ls.scale, grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    step = state.step + 1
    if ls is not None:
        ok = _everywhere(loss_scale.all_finite(grads), model_axis)
        params, opt_state, model_state, step = loss_scale.keep_if(
            ok,
            (params, opt_state, model_state, step),
            (state.params, state.opt_state, state.model_state, state.step),
        )
        ls = ls.adjust(ok)
    new_state = state.replace(
        step=step,
        params=params,
        model_state=model_state,
        opt_state=opt_state,
        loss_scale=ls,
    )
    # One reduction over the parameters: cheap next to the step, and catches inf/NaN anywhere.
    return new_state, _everywhere(jnp.isfinite(optax.tree.norm(params)), model_axis)


def member_train_step(
    workload: Workload,
    tx: optax.GradientTransformation,
    axis_name: str | None,
    state: EnsembleState,
    batch: dict,
) -> tuple[EnsembleState, jax.Array, dict, jax.Array]:
    """One member's step on a batch that lives on one device: (state, loss, metrics, finite).

    The single-device reference the sharded step is checked against (axis_name=None); with an
    axis name the gradient would be a local share, so `build_train_step` reduces it in between.
    """
    if axis_name is not None:
        raise ValueError("member_train_step is the one-device reference; see build_train_step")
    model = workload.model(None)
    loss, grads, model_state, metrics = member_gradients(workload, model, None, state, batch)
    new_state, finite = member_update(tx, state, grads, model_state)
    return new_state, loss, metrics, finite & jnp.isfinite(loss)


# Names the HLO of collectives that report rather than train (telemetry/comm.py counts them apart).
METRICS_SCOPE = "member_metrics"

# The phases a profile's reader looks for (docs/observe.md): named scopes of the step's HLO,
# which a trace's device events carry (telemetry/profile.py maps them where the backend names
# its events by HLO instruction, as XLA:CPU does).
FORWARD_BACKWARD_SCOPE = "members_forward_backward"
UPDATE_SCOPE = "optimizer_update"


def allreduce_scope(axis: str) -> str:
    """The gradient reduction's scope over one mesh axis."""
    return f"grad_allreduce_{axis}"


# A per-member vector [M] stays on its members' devices (sharded over `ensemble`, one copy per
# device of the member): gathering it in the step would make every member wait for every other.
MEMBERS = P(ENSEMBLE)


def step_specs(state_specs):
    """(state, local gradients [M, P_degree, ...], model state) specs. Without a tree of
    per-leaf specs (no --model_parallel) one prefix spec shards every leaf's member axis."""
    if state_specs is None:
        return MEMBER_SPEC, BATCH_SPEC, MEMBER_SPEC
    grads = jax.tree.map(
        lambda spec: P(ENSEMBLE, DATA, *spec[1:]),
        state_specs.params,
        is_leaf=lambda x: isinstance(x, P),
    )
    return state_specs, grads, state_specs.model_state


def _local_gradients(workload: Workload, plan: StepPlan):
    """shard_map: (state, batch) → (every device's local gradients [M, P_degree, ...], model
    state, loss [M], metrics {name: [M]}): the first half of the train step."""
    state_spec, grads_spec, model_state_spec = step_specs(plan.state_specs)
    data = _axis_if_spread(plan.mesh, DATA)
    model = member_model(workload, plan, data)

    def local_gradients(state, batch):
        step = lambda s, b: member_gradients(workload, model, data, s, b)  # noqa: E731
        # The gradient needs no optimizer state: a loop over members does not carry it.
        needed = state.replace(opt_state=None, step=None)
        with jax.named_scope(FORWARD_BACKWARD_SCOPE):
            loss, grads, model_state, metrics = map_members(step, plan.mapping, needed, batch)
        # [m_local, 1, ...]: each device's share goes out on its own row of `data`.
        grads = jax.tree.map(lambda g: g[:, None], grads)
        return grads, model_state, loss, metrics, _inputs_finite(batch, data)

    # check_vma=True is load-bearing: it types the parameters invariant over `data` until
    # member_gradients casts them varying, so BatchNorm's and the loss's pmean transpose
    # correctly and the gradient is each device's exact share of the global-batch gradient.
    # With one device per member its batch is not split: typed invariant over `data`, so the
    # member's figures need no collective to leave the shard_map.
    return jax.shard_map(
        local_gradients,
        mesh=plan.mesh,
        in_specs=(state_spec, BATCH_SPEC if data else MEMBER_SPEC),
        out_specs=(grads_spec, model_state_spec, MEMBERS, MEMBERS, MEMBERS),
        check_vma=True,
    )


def _axis_if_spread(mesh: Mesh, axis: str) -> str | None:
    """`axis`, or None where it has one device: a member on one device communicates nothing
    (XLA keeps an all-reduce of one-device groups, and a multi-process CPU run then waits in it
    for the other processes' steps: tests/test_multiprocess.py, the stalled-process test)."""
    return axis if mesh.shape[axis] > 1 else None


def _inputs_finite(batch: dict, data: str | None) -> jax.Array:
    """[m_local] bool: every floating-point value of each member's batch is finite. One
    reduction per field, so that a NaN that came in with the data is told apart from one the
    member produced (run/progress.py names the examples); integer fields (JPEG pixels,
    labels) cannot hold one."""
    fields = [x for x in jax.tree.leaves(batch) if jnp.issubdtype(x.dtype, jnp.inexact)]
    m_local = jax.tree.leaves(batch)[0].shape[0]
    if not fields:  # nothing to check, nothing to communicate
        return jnp.ones((m_local,), bool)
    ok = jnp.ones((m_local,), jnp.int32)
    for x in fields:
        ok = ok & jnp.all(jnp.isfinite(x), axis=tuple(range(1, x.ndim))).astype(jnp.int32)
    if data is not None:
        with jax.named_scope(METRICS_SCOPE):
            ok = lax.pmin(ok, data)  # the member's batch is spread over `data`
    return ok > 0


def _summed(plan: AllreducePlan, grads):
    """This device's local gradients [m_local, 1, ...] summed over `data` as `plan` says →
    [m_local, ...]; inside a shard_map with check_vma=False. One device per member: nothing to
    sum, nothing to send (whatever the plan's communication dtype)."""
    local = jax.tree.map(lambda g: g[:, 0], grads)
    return local if plan.parallel_degree == 1 else reduce_gradients(plan, local)


def build_train_step(workload: Workload, tx: optax.GradientTransformation, plan: StepPlan):
    """jit of two shard_maps with the state donated: (state, batch) → (state, StepMetrics).

    The first computes every device's local gradients, the members mapped as the plan says;
    the second sums them over `data` as its all-reduce plan says (engine/collectives.py) and
    updates the members. The plan's `state_specs` (a tree of PartitionSpecs,
    axes.member_spec) are needed when the mesh's `model` axis splits the members.
    """
    gradients = _local_gradients(workload, plan)
    update = _update(tx, plan)

    def train_step(state, batch):
        grads, model_state, loss, metrics, inputs_ok = gradients(state, batch)
        new_state, finite, skipped = update(state, grads, model_state)
        finite = finite & jnp.isfinite(loss)
        return new_state, StepMetrics(loss, finite, metrics, skipped, inputs_ok)

    return jax.jit(train_step, donate_argnums=0)


def build_update_step(tx: optax.GradientTransformation, plan: StepPlan):
    """jit: (state, local gradients [M, P_degree, ...], model state) → (state, finite [M],
    skipped [M] or None, both sharded over `ensemble`): the train step's second half alone, so that a test can hand it local
    gradients of its own (a NaN on one device) and read the members' flags."""
    return jax.jit(_update(tx, plan))


def _update(tx: optax.GradientTransformation, plan: StepPlan):
    """shard_map: (state, local gradients, model state) → (state, finite [M], skipped [M]),
    the flags sharded over `ensemble`."""
    pm = plan.model_parallel
    if pm > 1 and plan.state_specs is None:
        raise ValueError("a mesh with a model axis needs the state's per-leaf specs")
    model_axis = MODEL if pm > 1 else None
    state_spec, grads_spec, model_state_spec = step_specs(plan.state_specs)
    mapping = plan.mapping.update()

    def local_update(state, grads, model_state):
        with jax.named_scope(allreduce_scope(DATA)):
            grads = _summed(plan.allreduce, grads)
        step = lambda s, g, ms: member_update(tx, s, g, ms, model_axis)  # noqa: E731
        with jax.named_scope(UPDATE_SCOPE):
            new_state, finite = map_members(step, mapping, state, grads, model_state)
        skipped = None if new_state.loss_scale is None else new_state.loss_scale.skipped
        return new_state, finite, skipped

    # check_vma=False: jax 0.10 has no grouped psum under it (collectives.py). Nothing here is
    # differentiated, and every device of a member ends with the same summed gradient.
    return jax.shard_map(
        local_update,
        mesh=plan.mesh,
        in_specs=(state_spec, grads_spec, model_state_spec),
        out_specs=(state_spec, MEMBERS, MEMBERS),
        check_vma=False,
    )


def build_gradient_step(workload: Workload, plan: StepPlan):
    """jit: (state, batch) → (local, summed), both [M, P_degree, ...] per parameter: every
    device's local gradient, and every device's copy of its member's gradient after the
    reduction over `data` — what the train step's update receives (still times the loss scale
    under --dtype=float16). The same local-gradient shard_map and reduction code as
    `build_train_step`, without the update: the check of each all-reduce mode and dtype."""
    _, grads_spec, _ = step_specs(plan.state_specs)
    gradients = _local_gradients(workload, plan)
    summed = jax.shard_map(
        lambda g: jax.tree.map(lambda x: x[:, None], _summed(plan.allreduce, g)),
        mesh=plan.mesh,
        in_specs=(grads_spec,),
        out_specs=grads_spec,
        check_vma=False,
    )

    def gradient_step(state, batch):
        local = gradients(state, batch)[0]
        return local, summed(local)

    return jax.jit(gradient_step)
