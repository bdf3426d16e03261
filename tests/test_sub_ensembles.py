"""Sub-ensembles of one run (engine/subsets.py) and the per-example verdicts a record keeps for
paired tests (engine/evaluate.py `_correct`): the plan's arithmetic here, and in one compiled
setup the figures against ensembles evaluated directly from the same members."""

from __future__ import annotations

import hashlib
import itertools
import math

import numpy as np
import pytest
from helpers import tiny_config

from hpcai_jax.bits import pack_bits, unpack_bits
from hpcai_jax.engine import subsets
from hpcai_jax.engine.evaluate import evaluate


def test_plan_holds_every_subset_where_there_are_few_and_draws_the_rest():
    plan = subsets.plan(8, seed=3)
    assert plan.exhaustive == [math.comb(8, k) <= 32 for k in range(1, 9)]
    assert plan.exhaustive == [True, True, False, False, False, True, True, True]
    for k in range(1, 9):
        first = plan.masks[plan.first[k - 1]]
        assert first.tolist() == [1.0] * k + [0.0] * (8 - k)
        drawn = [tuple(np.flatnonzero(plan.masks[r])) for r in plan.drawn[k - 1]]
        assert all(len(s) == k for s in drawn)
        if plan.exhaustive[k - 1]:
            assert sorted(drawn) == list(itertools.combinations(range(8), k))
        else:
            assert len(drawn) == 32 and len(set(drawn)) > 16
    # The rows are distinct subsets, and the plan is the seed's alone.
    assert len({tuple(r) for r in plan.masks.tolist()}) == len(plan.masks)
    again, other = subsets.plan(8, seed=3), subsets.plan(8, seed=4)
    np.testing.assert_array_equal(again.masks, plan.masks)
    assert other.drawn[3] != plan.drawn[3] or not np.array_equal(other.masks, plan.masks)
    assert subsets.plan(subsets.MAX_MEMBERS + 1, seed=0) is None


def test_summary_takes_the_first_k_and_the_spread_over_subsets():
    plan = subsets.plan(3, seed=0)  # every k exhaustive: 3, 3, 1 subsets
    quality = {(0,): 0.5, (1,): 0.6, (2,): 0.7, (0, 1): 0.65, (0, 2): 0.75, (1, 2): 0.8}
    quality[(0, 1, 2)] = 0.9
    figures = [quality[tuple(np.flatnonzero(r))] for r in plan.masks]
    summary = subsets.summarize(plan, figures)
    assert [e["first"] for e in summary] == [0.5, 0.65, 0.9]
    assert summary[0]["random_mean"] == pytest.approx(0.6)
    assert summary[0]["random_sd"] == pytest.approx(np.std([0.5, 0.6, 0.7]))  # the population's
    assert summary[1]["random_mean"] == pytest.approx(0.7333333333)
    assert summary[2] == {
        "k": 3,
        "first": 0.9,
        "random_mean": 0.9,
        "random_sd": 0.0,
        "subsets": 1,
        "exhaustive": True,
    }
    drawn = subsets.plan(8, seed=0)
    figures = [float(r.sum()) for r in drawn.masks]  # a subset's "quality": its size
    entry = subsets.summarize(drawn, figures)[3]
    assert entry["random_mean"] == 4.0 and entry["random_sd"] == 0.0 and not entry["exhaustive"]


def test_packed_bits_round_trip():
    hits = np.random.default_rng(0).random(37) < 0.5
    np.testing.assert_array_equal(unpack_bits(pack_bits(hits), 37), hits)
    assert len(pack_bits(np.ones(10_000, bool))) == 1668  # 1,250 bytes in base64


@pytest.mark.slow
def test_sub_ensembles_equal_the_ensembles_evaluated_directly():
    """Every subset of a 4-member ensemble (all exhaustive) scored in one pass equals the
    ensemble of those members evaluated alone (the others pruned); the verdicts agree with
    the counts and the digest with the held-out labels."""
    from hpcai_jax.engine.setup import build_setup

    setup = build_setup(tiny_config())
    state = setup.init_state()
    quality = evaluate(setup, state, oob=False)
    every = range(4)

    def direct(subset) -> float:
        pruned = frozenset(i for i in every if i not in subset)
        return evaluate(setup, state, pruned, oob=False).ensemble

    entries = quality.sub_ensembles
    assert [e["k"] for e in entries] == [1, 2, 3, 4]
    assert entries[0]["first"] == quality.members[0]
    assert entries[-1]["first"] == quality.ensemble
    for k, entry in enumerate(entries, 1):
        assert entry["first"] == direct(range(k))
        figures = [direct(s) for s in itertools.combinations(every, k)]
        assert entry["exhaustive"] and entry["subsets"] == len(figures)
        assert entry["random_mean"] == pytest.approx(np.mean(figures), abs=1e-12)
        assert entry["random_sd"] == pytest.approx(np.std(figures), abs=1e-12)
    correct, n = quality.correct, quality.examples
    assert correct["examples"] == n == 200
    for i, member in enumerate(correct["members"]):
        assert unpack_bits(member, n).sum() == round(quality.members[i] * n)
    assert unpack_bits(correct["ensemble"], n).sum() == round(quality.ensemble * n)
    labels = setup.datasets.eval.read(np.arange(n))["label"].astype("<i4")
    assert correct["order_sha256"] == hashlib.sha256(labels.tobytes()).hexdigest()


@pytest.mark.slow
def test_a_regression_ensemble_is_its_last_sub_ensemble_to_the_bit():
    """R² sums float32 errors: the whole set's and member 0's figures are the ensemble's and the
    member's to float32's rounding of those sums (a two-process run differs in the 6th digit of
    an R² of 0.04), and the workload has no per-example verdict."""
    from hpcai_jax import config as C
    from hpcai_jax.engine.setup import build_setup

    config = tiny_config(
        model=C.ModelConfig(workload="regression", model="mlp"),
        data=C.DataConfig(dataset="friedman1", train_examples=256, eval_examples=64),
        mesh=C.MeshConfig(ensemble_size=8, members_per_device=2, parallel_degree=2),
    )
    setup = build_setup(config)
    quality = evaluate(setup, setup.init_state(), oob=False)
    entries = quality.sub_ensembles
    assert entries[-1]["first"] == pytest.approx(quality.ensemble, rel=1e-4)
    assert entries[0]["first"] == pytest.approx(quality.members[0], rel=1e-4)
    assert entries[3]["first"] != pytest.approx(quality.ensemble, rel=1e-4)  # not the same figure
    assert quality.correct is None
