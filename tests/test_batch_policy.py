"""--batch_policy (engine/mesh.resolved_batch): the member's batch and peak learning rate as P_degree
grows, under the paper's fixed batch per device and under today's fixed batch per member."""

from __future__ import annotations

import dataclasses

import pytest

from hpcai_jax import config as C
from hpcai_jax.engine.mesh import resolved_batch
from hpcai_jax.engine.optimizer import peak_learning_rate
from hpcai_jax.errors import UsageError


def _config(policy: str) -> C.RunConfig:
    return C.RunConfig(
        train=C.TrainConfig(batch_size=32, batch_policy=policy),
        optim=C.OptimConfig(learning_rate=0.4, lr_reference_batch=128, warmup_epochs=0.2),
        results=C.ResultsConfig(target_quality=0.9),
    ).validate()


@pytest.mark.parametrize(
    "policy, batches, rates",
    [
        ("per_member", [32, 32, 32, 32], [0.1, 0.1, 0.1, 0.1]),
        ("per_device", [32, 64, 128, 256], [0.1, 0.2, 0.4, 0.8]),
    ],
)
def test_member_batch_and_learning_rate_for_p_degree(policy, batches, rates):
    """per_device: batch and peak rate × P_degree (the linear rule, relative to P_degree 1),
    warm-up epochs kept; per_member: both unchanged (each device gets batch / P_degree)."""
    got = []
    for p in (1, 2, 4, 8):
        resolved = resolved_batch(_config(policy), p)
        assert resolved.optim == _config(policy).optim  # warm-up and the base rate unchanged
        got.append(
            (
                resolved.train.batch_size,
                peak_learning_rate(resolved.optim, resolved.train.batch_size),
            )
        )
    assert [b for b, _ in got] == batches
    assert [lr for _, lr in got] == pytest.approx(rates)


def test_resolving_twice_changes_nothing():
    """The engine's view says per_member, so a setup built from a setup's config (the FLOP
    cross-check, a re-evaluation) does not multiply the batch again."""
    once = resolved_batch(_config("per_device"), 4)
    assert (once.train.batch_size, once.train.batch_policy) == (128, "per_member")
    assert resolved_batch(once, 4) == once


def test_the_record_states_the_policy_as_given():
    """RunSetup.recorded_config: the record's config re-runs as it ran (per_device, 32)."""
    from hpcai_jax.engine.setup import RunSetup

    given = _config("per_device")
    fake = RunSetup.__new__(RunSetup)
    object.__setattr__(fake, "config", resolved_batch(given, 2))
    object.__setattr__(fake, "given_train", given.train)
    assert fake.recorded_config.train == given.train
    assert fake.recorded_config.to_dict()["train"]["batch_policy"] == "per_device"


def test_an_unknown_policy_is_refused_naming_the_flag():
    bad = dataclasses.replace(_config("per_member"), train=C.TrainConfig(batch_policy="per_node"))
    with pytest.raises(
        UsageError, match=r"--batch_policy='per_node': expected one of per_member, per_device"
    ):
        bad.validate()
