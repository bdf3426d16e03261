"""Shared test fixtures: small configurations and a runner for `python -m hpcai_jax.main`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hpcai_jax import config as C

ROOT = Path(__file__).resolve().parent.parent


def tiny_config(**overrides) -> C.RunConfig:
    """Fashion-MNIST, resnet_small, a few steps: the smallest real training run."""
    parts = {
        "mesh": C.MeshConfig(ensemble_size=4, members_per_device=1, parallel_degree=2),
        "data": C.DataConfig(train_examples=512, eval_examples=200),
        "train": C.TrainConfig(batch_size=16, steps=3, eval_batch_size=100),
        "optim": C.OptimConfig(lr_schedule="constant"),
        "results": C.ResultsConfig(target_quality=0.9),  # Fashion-MNIST has no official target
    }
    parts.update(overrides)
    return C.RunConfig(**parts).validate()


_ALONE: dict[int, tuple] = {}  # id(setup) → (setup, jitted init, jitted step): one compile each


def train_alone(setup, member: int, steps: int):
    """Member `member` of `setup` trained alone for `steps` steps on one device: plain jit,
    statistics over its whole batch, its own bootstrap indices. The reference the sharded
    ensemble must equal. Every member of a setup shares the two compiled functions."""
    import jax

    from hpcai_jax.engine.state import init_member, member_keys
    from hpcai_jax.engine.step import member_train_step

    if id(setup) not in _ALONE:
        wl, tx = setup.workload, setup.tx
        _ALONE[id(setup)] = (
            setup,
            jax.jit(lambda k: init_member(wl, tx, k)),
            jax.jit(lambda s, b: member_train_step(wl, tx, None, s, b)),
        )
    _, init, step = _ALONE[id(setup)]
    state = init(member_keys(setup.config.train.seed, setup.layout.ensemble_size)[member])
    source = setup.datasets.train
    for t in range(steps):
        state, *_ = step(state, source.read(setup.sampler.step_indices(member, t)))
    return state


def subprocess_env(devices: int = 8, **extra: str) -> dict[str, str]:
    """The environment of a JAX subprocess: the suite's compile flags and cache (conftest), with
    `devices` forced CPU devices."""
    from conftest import FAST_COMPILE

    env = dict(os.environ, JAX_PLATFORMS="cpu", **extra)
    env["XLA_FLAGS"] = f"{FAST_COMPILE} --xla_force_host_platform_device_count={devices}"
    return env


def run_main(*args: str, devices: int = 8, timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs the CLI in a fresh process with `devices` forced CPU devices."""
    env = subprocess_env(devices)
    return subprocess.run(
        [sys.executable, "-m", "hpcai_jax.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
