"""Bootstrap samples: right statistics, deterministic per (seed, member, epoch), distinct otherwise."""

import numpy as np
import pytest

from hpcai_jax.sampler import BootstrapSampler, epoch_indices

N = 100_000


def test_with_replacement_draws_63_percent_distinct():
    indices = epoch_indices("with_replacement", N, seed=0, member=0, epoch=0)
    assert len(indices) == N
    assert abs(len(np.unique(indices)) / N - (1 - np.exp(-1))) < 0.01  # 0.632


def test_poisson_counts_have_mean_one():
    indices = epoch_indices("poisson", N, seed=0, member=0, epoch=0)
    counts = np.bincount(indices, minlength=N)
    assert abs(counts.mean() - 1.0) < 0.01
    assert abs(counts.var() - 1.0) < 0.02  # Poisson(1): variance 1 too
    assert abs((counts == 0).mean() - np.exp(-1)) < 0.01


def test_none_is_a_permutation():
    indices = epoch_indices("none", N, seed=0, member=0, epoch=0)
    np.testing.assert_array_equal(np.sort(indices), np.arange(N))


@pytest.mark.parametrize("method", ["with_replacement", "poisson", "none"])
def test_deterministic_and_distinct_across_members_and_epochs(method):
    base = epoch_indices(method, N, seed=3, member=1, epoch=2)
    np.testing.assert_array_equal(base, epoch_indices(method, N, seed=3, member=1, epoch=2))
    for other in [dict(seed=3, member=2, epoch=2), dict(seed=3, member=1, epoch=3),
                  dict(seed=4, member=1, epoch=2)]:
        assert not np.array_equal(base[:1000], epoch_indices(method, N, **other)[:1000])


def test_steps_cut_each_epoch_into_equal_batches():
    sampler = BootstrapSampler("poisson", num_examples=1000, batch_size=64, seed=0)
    assert sampler.steps_per_epoch == 15
    full = np.concatenate([sampler.step_indices(0, t) for t in range(15)])
    assert len(full) == 15 * 64
    np.testing.assert_array_equal(full, sampler._epoch(0, 0))
    # Step 15 starts epoch 1, a new sample.
    assert not np.array_equal(sampler.step_indices(0, 15), sampler.step_indices(0, 0))
    block = sampler.block(range(1, 3), 4, slice(8, 16))
    assert block.shape == (2, 8)
    np.testing.assert_array_equal(block[1], sampler.step_indices(2, 4)[8:16])
