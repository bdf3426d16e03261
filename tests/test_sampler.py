"""Bootstrap samples: one fixed sample per member for the whole run, reshuffled every epoch."""

import pickle

import numpy as np
import pytest

from hpcai_jax.data.sampler import ORDERS_KEPT, BootstrapSampler, epoch_indices, member_counts

N = 100_000
ONE_MINUS_1_OVER_E = 1 - np.exp(-1)  # 0.632


def test_with_replacement_draws_63_percent_distinct():
    indices = epoch_indices("with_replacement", N, seed=0, member=0, epoch=0)
    assert len(indices) == N
    assert abs(len(np.unique(indices)) / N - ONE_MINUS_1_OVER_E) < 0.01


def test_poisson_counts_have_mean_one():
    counts = member_counts("poisson", N, seed=0, member=0)
    assert abs(counts.mean() - 1.0) < 0.01
    assert abs(counts.var() - 1.0) < 0.02  # Poisson(1): variance 1 too
    assert abs((counts == 0).mean() - np.exp(-1)) < 0.01
    np.testing.assert_array_equal(
        np.bincount(epoch_indices("poisson", N, seed=0, member=0, epoch=3), minlength=N), counts
    )


def test_none_is_a_permutation():
    indices = epoch_indices("none", N, seed=0, member=0, epoch=0)
    np.testing.assert_array_equal(np.sort(indices), np.arange(N))


@pytest.mark.parametrize("method", ["with_replacement", "poisson"])
def test_a_members_sample_is_the_same_in_every_epoch(method):
    # The multiset (distinct indices and their counts) of epochs 0, 1 and 7 is identical; only the
    # order changes.
    epochs = [epoch_indices(method, N, seed=3, member=1, epoch=e) for e in (0, 1, 7)]
    counts = [np.bincount(e, minlength=N) for e in epochs]
    for c in counts[1:]:
        np.testing.assert_array_equal(c, counts[0])
    assert not np.array_equal(epochs[0], epochs[1])
    assert not np.array_equal(epochs[1], epochs[2])


@pytest.mark.parametrize("method", ["with_replacement", "poisson"])
def test_ten_epochs_still_see_63_percent(method):
    sampler = BootstrapSampler(method, num_examples=60_000, batch_size=128, seed=0)
    seen = np.concatenate([sampler.step_indices(0, t) for t in range(10 * sampler.steps_per_epoch)])
    assert abs(len(np.unique(seen)) / 60_000 - ONE_MINUS_1_OVER_E) < 0.01
    assert sampler.distinct_fraction(0) == pytest.approx(len(np.unique(seen)) / 60_000, abs=0.005)


@pytest.mark.parametrize("method", ["with_replacement", "poisson", "none"])
def test_deterministic_and_distinct_across_members_and_seeds(method):
    base = epoch_indices(method, N, seed=3, member=1, epoch=2)
    np.testing.assert_array_equal(base, epoch_indices(method, N, seed=3, member=1, epoch=2))
    for other in [
        dict(seed=3, member=2, epoch=2),
        dict(seed=3, member=1, epoch=3),
        dict(seed=4, member=1, epoch=2),
    ]:
        assert not np.array_equal(base[:1000], epoch_indices(method, N, **other)[:1000])


@pytest.mark.parametrize("method", ["with_replacement", "poisson"])
def test_two_members_samples_differ_like_independent_bootstraps(method):
    a = member_counts(method, N, seed=0, member=0) > 0
    b = member_counts(method, N, seed=0, member=1) > 0
    jaccard = np.sum(a & b) / np.sum(a | b)
    # Two independent samples that each hold 63.2% of the data: 0.632² / (2·0.632 − 0.632²) ≈ 0.46.
    p = ONE_MINUS_1_OVER_E
    assert jaccard == pytest.approx(p * p / (2 * p - p * p), abs=0.01)


def test_out_of_bag_is_what_the_member_never_trains_on():
    sampler = BootstrapSampler("with_replacement", num_examples=5000, batch_size=50, seed=1)
    seen = np.unique(
        np.concatenate([sampler.step_indices(2, t) for t in range(3 * sampler.steps_per_epoch)])
    )
    oob = sampler.out_of_bag(2, np.arange(5000))
    assert not np.any(oob[seen])
    np.testing.assert_array_equal(np.flatnonzero(~oob), seen)


def test_steps_cut_each_epoch_into_equal_batches():
    sampler = BootstrapSampler("poisson", num_examples=1000, batch_size=64, seed=0)
    assert sampler.steps_per_epoch == 15
    full = np.concatenate([sampler.step_indices(0, t) for t in range(15)])
    assert len(full) == 15 * 64
    np.testing.assert_array_equal(full, sampler._epoch(0, 0))
    # Step 15 starts epoch 1: the same sample in another order.
    assert not np.array_equal(sampler.step_indices(0, 15), sampler.step_indices(0, 0))
    block = sampler.block(range(1, 3), 4, slice(8, 16))
    assert block.shape == (2, 8)
    np.testing.assert_array_equal(block[1], sampler.step_indices(2, 4)[8:16])


def test_keeps_at_most_two_epoch_orders_per_member_on_the_instance():
    """Memory is O(one epoch) per member (benchmarks/sampler_memory.py measures it at ImageNet
    size): walking 10 epochs leaves the last ORDERS_KEPT orders, still correct; an equal sampler
    (another run in the process) shares nothing; a pickled one (a data worker) carries no
    cache and reads the same indices."""
    sampler = BootstrapSampler("with_replacement", num_examples=1000, batch_size=100, seed=3)
    twin = BootstrapSampler("with_replacement", num_examples=1000, batch_size=100, seed=3)
    assert sampler == twin and hash(sampler) == hash(twin)
    for epoch in range(10):
        for member in range(3):
            sampler.step_indices(member, epoch * sampler.steps_per_epoch)
    assert {m: [e for e, _ in kept] for m, kept in sampler._orders.items()} == {
        m: list(range(10 - ORDERS_KEPT, 10)) for m in range(3)
    }
    assert twin._orders == {} and twin._counts == {}
    np.testing.assert_array_equal(
        sampler.step_indices(1, 9 * 10 + 3),
        epoch_indices("with_replacement", 1000, 3, 1, 9)[300:400],
    )
    copy = pickle.loads(pickle.dumps(sampler))
    assert copy == sampler and copy._orders == {} and copy._counts == {}
    np.testing.assert_array_equal(copy.step_indices(2, 57), sampler.step_indices(2, 57))
