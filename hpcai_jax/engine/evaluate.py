"""Ensemble evaluation: each member's quality and the bagged ensemble's on the held-out set (the
quality used for VFLOPS), and the out-of-bag estimate on the training set, for any workload.

The ensemble's prediction is the mean of its members' predictions (for classification, softmax
probabilities, whose argmax is the class). Out of bag
(Breiman 1996): every member leaves out ≈ 36.8% of the training set, so each training example
can be predicted by the members that never trained on it; the accuracy of those predictions
estimates the ensemble's generalisation without touching the held-out set.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from flax import struct
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from hpcai_jax.axes import BATCH_SPEC, DATA, ENSEMBLE, EVAL_SPEC
from hpcai_jax.bits import pack_bits
from hpcai_jax.data.pipeline import ReadCache, eval_batches, eval_layout
from hpcai_jax.engine import sharded, subsets
from hpcai_jax.engine.plan import MemberMapping, StepPlan
from hpcai_jax.engine.state import EnsembleState
from hpcai_jax.engine.step import (
    MEMBERS,
    map_members,
    member_model,
    step_specs,
)
from hpcai_jax.workloads.base import Workload

PROGRESS_S = 10.0  # seconds between an evaluation's progress lines

# Called before each eval batch with (batches done, batches in all): the run's hang watchdog
# re-arms there (run/evaluation.py), so a hung device or peer is bounded in an evaluation too.
OnBatch = Callable[[int, int], None]


class EvalCounts(struct.PyTreeNode):
    """One eval batch's counts: each member's on its own devices, the rest replicated."""

    members: jax.Array  # [M, K] sharded over `ensemble`: each member's prediction, valid rows
    ensemble: jax.Array  # [K]: of the voters' mean prediction, on rows with a voter
    scored: jax.Array  # rows with at least one voter
    votes: jax.Array  # votes cast on those rows (÷ scored: voters per example)
    # [S, K]: each sub-ensemble's counts (engine/subsets.py); None without a plan.
    subsets: jax.Array | None = None
    # Per example of this batch (not summed: `_score` keeps them per batch), for workloads with
    # `example_hits`: each member's verdict [M, E] over `ensemble`, the ensemble's [E] and the
    # examples' keys [E], replicated.
    member_hits: jax.Array | None = None
    ensemble_hits: jax.Array | None = None
    keys: jax.Array | None = None


def _voters_mean(local, votes: jax.Array):
    """The voting members' mean of a tree of per-member arrays [m_local, e, ...] → [e, ...],
    over every device of the ensemble axis (votes [m_local, e] are 1 or 0): the voters' sums and
    their count in one reduction over `ensemble`, sized by the batch, never by M."""

    def local_sum(x):
        shape = votes.shape + (1,) * (x.ndim - 2)
        # where(), not a product: a pruned member's predictions may be NaN.
        return jnp.sum(jnp.where(votes.reshape(shape) > 0, x, 0.0), axis=0)

    sums, voters = lax.psum((jax.tree.map(local_sum, local), jnp.sum(votes, axis=0)), ENSEMBLE)
    voters = jnp.maximum(voters, 1.0)
    return jax.tree.map(lambda s: s / voters.reshape(voters.shape + (1,) * (s.ndim - 1)), sums)


def build_eval_step(
    workload: Workload,
    plan: StepPlan,
    masks: np.ndarray | None = None,
):
    """(state, batch, valid, votes [M, E], split) → EvalCounts: the batch and its valid mask as
    read (data/pipeline.EvalBatch, gathered by `gather_read_slices`), the members' counts sharded
    over `ensemble` (a process reads its own members', engine/sharded.py), the rest replicated.

    The ensemble predicts an example from the members that vote on it (votes 1): every kept
    member on held-out data; on training data, the kept members that never trained on the
    example (the out-of-bag estimate), combined by the workload's `eval_predictions(x,
    apply_members, average)`: the mean of their predictions by default, a staged ensemble for a
    detector (shared proposals). An example without a voter is not scored; padding rows (valid
    false) have no votes and count for no member. `masks` [S, M]: sub-ensembles scored too
    (engine/subsets.py); with `example_hits`, each example's verdicts (`_example_hits`)."""
    model, hits = member_model(workload, plan, None), has_example_hits(workload)

    def local_eval(state, batch, valid, votes):
        apply_members = _members_applied(model, plan.mapping, state)
        preds, ensemble = workload.eval_predictions(
            workload.inputs(batch), apply_members, lambda t: _voters_mean(t, votes)
        )
        weight = valid.astype(jnp.float32)
        members = jnp.stack(
            [workload.counts(_member(preds, i), batch, weight) for i in range(votes.shape[0])]
        )
        voters = lax.psum(jnp.sum(votes, axis=0), ENSEMBLE)
        scored = voters > 0
        counts = workload.counts(ensemble, batch, scored.astype(jnp.float32))
        # The members' counts stay on their members' devices (MEMBERS): a device's evaluation
        # memory does not grow with M (docs/scale.md; sub-ensembles aside, subsets.MAX_MEMBERS).
        out = EvalCounts(
            lax.psum(members, DATA),
            lax.psum(counts, DATA),
            lax.psum(jnp.sum(scored, dtype=jnp.int32), DATA),
            lax.psum(jnp.sum(voters), DATA),
        )
        if masks is not None:
            out = out.replace(subsets=_subset_counts(workload, masks, preds, votes, batch))
        if hits:
            out = out.replace(**_example_hits(workload, preds, ensemble, scored, batch))
        return out

    sharded = jax.shard_map(
        local_eval,
        mesh=plan.mesh,
        in_specs=(step_specs(plan.state_specs)[0], EVAL_SPEC, EVAL_SPEC, BATCH_SPEC),
        out_specs=_out_specs(masks is not None, hits),
        check_vma=True,
    )

    def eval_step(state, batch, valid, votes, split):
        batch, valid = gather_read_slices(plan.mesh, split)((batch, valid))
        return sharded(state, batch, valid, votes)

    return jax.jit(eval_step, static_argnames="split")


def _out_specs(subsets: bool, hits: bool) -> EvalCounts:
    """The members' counts and verdicts over `ensemble`, the rest replicated; None: not made."""
    row = P() if hits else None
    return EvalCounts(
        MEMBERS, P(), P(), P(), P() if subsets else None, MEMBERS if hits else None, row, row
    )


def has_example_hits(workload: Workload) -> bool:
    return type(workload).example_hits is not Workload.example_hits


def subset_plan(workload: Workload, m: int, seed: int) -> subsets.SubsetPlan | None:
    """The sub-ensembles scored in every evaluation (engine/subsets.py): None for a workload
    whose ensemble is not the mean of its members' finished predictions (a detector's shared
    proposals would need a staged pass per subset), and above subsets.MAX_MEMBERS."""
    if type(workload).eval_predictions is not Workload.eval_predictions:
        return None
    return subsets.plan(m, seed)


def _subset_counts(workload: Workload, masks: np.ndarray, preds, votes, batch) -> jax.Array:
    """[S, K]: the counts of each sub-ensemble's prediction, the mean over the voting members of
    each row of `masks`, reduced over `ensemble` exactly as the ensemble's is (`_voters_mean`,
    the votes masked), so that the whole set's figure is the ensemble's to the last bit. Scored
    16 subsets at a time: a device holds 16 × its rows × the outputs, whatever M is."""
    m_local = votes.shape[0]
    start = lax.axis_index(ENSEMBLE) * m_local
    local = lax.dynamic_slice_in_dim(jnp.asarray(masks), start, m_local, axis=1)  # [S, m_local]

    def one(mask):
        w = votes * mask[:, None]
        voters = lax.psum(jnp.sum(w, axis=0), ENSEMBLE)
        prediction = _voters_mean(preds, w)
        return workload.counts(prediction, batch, (voters > 0).astype(jnp.float32))

    return lax.psum(lax.map(one, local, batch_size=16), DATA)


def _example_hits(workload: Workload, preds, ensemble, scored, batch) -> dict:
    """Each local member's and the ensemble's verdict on every example of the batch, gathered
    over `data` (uint8, 1: right), and the examples' keys."""
    m_local = jax.tree.leaves(preds)[0].shape[0]
    members = jnp.stack([workload.example_hits(_member(preds, i), batch) for i in range(m_local)])
    ensemble = workload.example_hits(ensemble, batch) & scored

    return {
        "member_hits": _gathered(members.astype(jnp.int32), DATA, axis=1).astype(jnp.uint8),
        "ensemble_hits": _gathered(ensemble.astype(jnp.int32), DATA).astype(jnp.uint8),
        "keys": _gathered(workload.example_keys(batch), DATA),
    }


def _member(preds, i: int):
    """The local member i's predictions from the stacked tree [m_local, ...]."""
    return jax.tree.map(lambda p: p[i], preds)


def _gathered(x: jax.Array, axis_name: str, axis: int = 0) -> jax.Array:
    """x tiled along `axis` over the devices of `axis_name`, in their order, as a sum of each
    device's slice placed in zeros: the result is replicated over the axis by construction,
    which shard_map's replication check sees (it does not for `lax.all_gather`)."""
    n, i = lax.axis_size(axis_name), lax.axis_index(axis_name)
    shape = list(x.shape)
    size, shape[axis] = shape[axis], shape[axis] * n
    placed = lax.dynamic_update_slice_in_dim(jnp.zeros(shape, x.dtype), x, i * size, axis)
    return lax.psum(placed, axis_name)


def _members_applied(model, mapping: MemberMapping, state: EnsembleState):
    """The workload's `apply_members(fn, *stacked)` for the local members of `state`: fn(apply,
    *member_slices) for each member, stacked [m_local, ...], where apply(*args, **kwargs) is
    model.apply with that member's variables."""

    def apply_members(fn, *stacked):
        def one(s, *args):
            variables = {"params": s.params, **s.model_state}
            return fn(lambda *a, **kw: model.apply(variables, *a, **kw), *args)

        return map_members(one, mapping, state, *stacked)

    return apply_members


def gather_read_slices(mesh: Mesh, split: int):
    """[ensemble, E / split] as read (data/pipeline.eval_batches: each device one slice of its
    data block) → [E] over `data`, every member with its whole block: the block's `split` slices
    come from the neighbouring members that read them, by split - 1 collective permutes, so no
    device gathers more than its block whatever M is. The result is the same on every member of
    a data block by construction, which shard_map cannot infer (check_vma off here only)."""

    def gather(tree):
        def one(x):
            x = x[0]
            if split == 1:
                return x
            n, e = mesh.shape[ENSEMBLE], lax.axis_index(ENSEMBLE)
            parts = [x]  # parts[j]: the slice (own + j) % split of this group of `split`
            for j in range(1, split):
                source = [(i // split) * split + (i % split + j) % split for i in range(n)]
                parts.append(lax.ppermute(x, ENSEMBLE, [(s, i) for i, s in enumerate(source)]))
            ordered = jnp.roll(jnp.stack(parts), e % split, axis=0)  # slot k: slice k
            return ordered.reshape(-1, *x.shape[1:])

        return jax.tree.map(one, tree)

    return jax.shard_map(
        gather, mesh=mesh, in_specs=BATCH_SPEC, out_specs=EVAL_SPEC, check_vma=False
    )


@dataclasses.dataclass(frozen=True)
class OutOfBag:
    quality: float | None  # the workload's metric; None when no example had a voter
    scored: int  # examples at least one kept member never trained on
    subset: int  # training examples looked at: the first `subset` of the training set
    mean_voters: float  # kept members voting on a scored example, on average
    why_none: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class EnsembleQuality:
    members: list[float | None]  # every member's held-out quality, pruned ones included
    kept: list[bool]  # members that take part in the ensemble's prediction
    ensemble: float
    examples: int
    oob: OutOfBag | None
    # The workload's further figures (e.g. a detector's mAP@[.5:.95] and per-class AP), for the
    # ensemble and every member; None when the workload has none (`quality_details`).
    details: dict | None = None
    # Per k = 1…M, the first k members' quality and the mean and SD over k-subsets
    # (engine/subsets.py); None without a plan.
    sub_ensembles: list[dict] | None = None
    # The held-out verdicts per example, packed (`_correct`); None for a workload without them.
    correct: dict | None = None

    @property
    def member_mean(self) -> float | None:
        """Mean over the kept members: a pruned member is not part of what the ensemble is."""
        kept = [a for a, k in zip(self.members, self.kept, strict=True) if k and a is not None]
        return float(np.mean(kept)) if kept else None


@jax.jit
def _add(total, counts):
    """Sums a batch's counts into the running total on the devices, in float32 as the host did:
    the members' counts never leave their devices before the end."""
    return jax.tree.map(lambda a, b: a + b, total, counts)


def _score(setup, state, source, indices: np.ndarray | None, votes_of, on_batch=None, rows=None):
    """Runs the eval step over `indices` of `source` (None: all of it); votes_of(members, rows) →
    float32 votes [len(members), len(rows)] for a member range and example indices (-1: padding),
    called for the blocks this process's devices hold. Returns the counts summed over batches on
    the devices (EvalCounts: the members' sharded over `ensemble`, the rest replicated).
    `on_batch` (OnBatch) is called before each batch. A list `rows` receives each batch's
    (example indices, member hits, ensemble hits, keys), left on the devices."""
    m = setup.layout.ensemble_size
    sharding = NamedSharding(setup.mesh, BATCH_SPEC)
    limit = int(setup.config.data.eval_cache_mib * 2**20)
    cache = setup.read_caches.setdefault(id(source), ReadCache(limit)) if limit else None
    total = None
    batch_size = setup.config.train.eval_batch_size
    size, _ = eval_layout(setup.mesh, batch_size)
    batches = -(-(len(source) if indices is None else len(indices)) // size)
    progress = _Progress(batches)
    for done, item in enumerate(eval_batches(source, setup.mesh, batch_size, indices, cache)):
        if on_batch is not None:
            on_batch(done, batches)
        progress.tick()

        def block(index, rows=item.rows):
            (m0, m1, _), (r0, r1, _) = index[0].indices(m), index[1].indices(len(rows))
            return votes_of(range(m0, m1), rows[r0:r1])

        votes = jax.make_array_from_callback((m, len(item.rows)), sharding, block, dtype=np.float32)
        counts = setup.eval_step(state, item.batch, item.valid, votes, item.split)
        if rows is not None and counts.member_hits is not None:
            rows.append((item.rows, counts.member_hits, counts.ensemble_hits, counts.keys))
        counts = counts.replace(member_hits=None, ensemble_hits=None, keys=None)
        total = counts if total is None else _add(total, counts)
    return total


class _Progress:
    """A line every PROGRESS_S while an evaluation runs (process 0): a long held-out pass is
    otherwise a silent minute."""

    def __init__(self, batches: int):
        self._batches, self._done = batches, 0
        self._start = self._last = time.perf_counter()

    def tick(self) -> None:
        now = time.perf_counter()
        if self._done and now - self._last >= PROGRESS_S and jax.process_index() == 0:
            left = (now - self._start) / self._done * (self._batches - self._done)
            logging.info(
                "evaluating: batch %d of %d, ETA %.0f s", self._done + 1, self._batches, left
            )
            self._last = now
        self._done += 1


def _member_figures(workload, counts, details: bool) -> list:
    """[M] (quality, details or None) of every member: each computed by the process that owns
    the member, from its own shard of the counts, then combined over the processes as M small
    values (a collective: every process calls it)."""
    owner, me = sharded.owners(counts), jax.process_index()
    mine = {
        member: [workload.quality(c), workload.quality_details(c) if details else None]
        for member, c in sharded.local(counts).items()
        if owner[member] == me
    }
    return sharded.gather_owned_json(mine, owner, me)


def evaluate(
    setup,
    state,
    pruned: frozenset[int] = frozenset(),
    oob: bool = True,
    on_batch: OnBatch | None = None,
) -> EnsembleQuality | None:
    """None for synthetic data, which has no held-out set worth a quality figure. Pruned members
    still get their own quality but take no part in the ensemble's prediction. Without `oob`
    (evaluations during training) the out-of-bag estimate is skipped. `on_batch`: called before
    each batch of either pass."""
    source = setup.datasets.eval if setup.datasets else None
    if source is None:
        return None
    m, workload = setup.layout.ensemble_size, setup.workload
    kept = np.asarray([i not in pruned for i in range(m)])

    def held_out_votes(members: range, rows: np.ndarray) -> np.ndarray:
        return (kept[list(members), None] & (rows >= 0)[None]).astype(np.float32)

    rows: list = []
    counts = _score(setup, state, source, None, held_out_votes, on_batch, rows)
    ensemble = np.asarray(counts.ensemble)
    ensemble_details = workload.quality_details(ensemble)
    figures = _member_figures(workload, counts.members, ensemble_details is not None)
    details = (
        {"ensemble": ensemble_details, "members": [d for _, d in figures]}
        if ensemble_details is not None
        else None
    )
    return EnsembleQuality(
        members=[q for q, _ in figures],
        kept=kept.tolist(),
        ensemble=workload.quality(ensemble),
        examples=len(source),
        oob=out_of_bag(setup, state, kept, on_batch) if oob else None,
        details=details,
        sub_ensembles=_sub_ensembles(setup, counts),
        correct=_correct(rows, len(source), m) if rows else None,
    )


def _sub_ensembles(setup, counts: EvalCounts) -> list[dict] | None:
    plan = getattr(setup, "subset_plan", None)
    if plan is None or counts.subsets is None:
        return None
    figures = [setup.workload.quality(c) for c in np.asarray(counts.subsets)]
    return subsets.summarize(plan, figures)


def _correct(rows: list, n: int, m: int) -> dict:
    """The held-out verdicts of every member and of the ensemble, each example at its index in
    the held-out set, packed (`pack_bits`), and the SHA-256 of the examples' keys in that order:
    two records' verdicts pair up when their counts and digests agree (report/paired.py). A
    member's come from the process that owns it (a collective)."""
    owner, me = sharded.owners(rows[0][1]), jax.process_index()
    mine = {i: np.zeros(n, bool) for i in range(m) if owner[i] == me}
    ensemble, keys = np.zeros(n, bool), np.zeros(n, np.int32)
    for index, member_hits, ensemble_hits, batch_keys in rows:
        real = index >= 0
        for i, hits in sharded.local(member_hits).items():
            if i in mine:
                mine[i][index[real]] = hits[real] > 0
        ensemble[index[real]] = np.asarray(ensemble_hits.addressable_data(0))[real] > 0
        keys[index[real]] = np.asarray(batch_keys.addressable_data(0))[real]
    packed = {i: pack_bits(hits) for i, hits in mine.items()}
    return {
        "examples": n,
        "order_sha256": hashlib.sha256(keys.astype("<i4").tobytes()).hexdigest(),
        "ensemble": pack_bits(ensemble),
        "members": sharded.gather_owned_json(packed, owner, me),
    }


def out_of_bag(setup, state, kept: np.ndarray, on_batch: OnBatch | None = None) -> OutOfBag | None:
    """The out-of-bag quality on the first --oob_examples training examples (0: skipped)."""
    train, sampler = setup.datasets.train, setup.sampler
    subset = min(setup.config.data.oob_examples, len(train))
    if subset == 0:
        return None

    def oob_votes(members: range, rows: np.ndarray) -> np.ndarray:
        valid = rows >= 0
        safe = np.where(valid, rows, 0)
        return np.stack([kept[i] & valid & sampler.out_of_bag(i, safe) for i in members]).astype(
            np.float32
        )

    counts = _score(setup, state, train, np.arange(subset), oob_votes, on_batch)
    scored = int(np.asarray(counts.scored))
    if scored == 0:
        return OutOfBag(
            None,
            0,
            subset,
            0.0,
            f"every kept member trained on every one of the {subset} examples "
            f"(--bootstrap={sampler.method})",
        )
    return OutOfBag(
        setup.workload.quality(np.asarray(counts.ensemble)),
        scored,
        subset,
        float(np.asarray(counts.votes)) / scored,
    )
