"""Several members on one device: vmap vs unroll vs separate single-member steps.

Trains M members of resnet_small on one device, in one run, three ways:
  vmap     - one ensemble step, members vmapped (XLA sees grouped convolutions)
  unroll   - one ensemble step, an unrolled loop over the members inside it
  separate - M single-member steps, one after another (the baseline)
Timing rounds are interleaved so that machine noise hits all three alike; each figure is the
median over rounds of images/s per member. Ratios against `separate` are printed last.

    python benchmarks/ensemble_vs_loop.py [--members=4] [--batch_size=128] [--rounds=5] [--steps=8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from hpcai_jax import config as C
from hpcai_jax.data.pipeline import train_batch
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.engine.step import MEMBER_STRATEGY_DEFAULTS, compile_step


def _runner(members: int, strategy: str, batch_size: int, device, seed: int):
    """A closure that runs one training step of `members` members; compiled and warmed up."""
    config = C.RunConfig(
        mesh=C.MeshConfig(
            ensemble_size=members,
            members_per_device=members,
            parallel_degree=1,
            member_strategy=strategy,
        ),
        data=C.DataConfig(train_examples=batch_size * 16),
        train=C.TrainConfig(batch_size=batch_size, steps=1000, seed=seed),
        optim=C.OptimConfig(lr_schedule="constant"),
        results=C.ResultsConfig(target_quality=0.9),
    ).validate()
    setup = build_setup(config, devices=[device])
    state = setup.init_state()
    compiled = compile_step(
        setup.train_step, state, setup.mesh, setup.layout, batch_size, setup.workload.spec.fields
    ).compiled
    batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, members, 0)
    holder = [state]

    def step():
        holder[0], metrics = compiled(holder[0], batch)
        jax.block_until_ready(metrics)

    step()  # warm-up
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    device = jax.devices()[0]
    m, b = args.members, args.batch_size

    ensemble = {s: _runner(m, s, b, device, seed=0) for s in ("vmap", "unroll")}
    singles = [_runner(1, "unroll", b, device, seed=i) for i in range(m)]
    variants = {
        **{s: (lambda f=f: f()) for s, f in ensemble.items()},
        "separate": lambda: [f() for f in singles],
    }

    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, run_step in variants.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                run_step()
            rates[name].append(b * args.steps / (time.perf_counter() - start))

    backend = jax.default_backend()
    default = MEMBER_STRATEGY_DEFAULTS.get(backend, MEMBER_STRATEGY_DEFAULTS["cpu"])[0]
    print(
        f"{m} members of resnet_small, batch {b} each, on one {backend} device "
        f"({device.device_kind}); {args.rounds} interleaved rounds of {args.steps} steps"
    )
    print(f"{'strategy':<10} {'img/s per member (median)':>26} {'min':>8} {'max':>8}")
    for name, values in rates.items():
        print(
            f"{name:<10} {statistics.median(values):>26.1f} {min(values):>8.1f} {max(values):>8.1f}"
        )
    base = statistics.median(rates["separate"])
    for name in ("vmap", "unroll"):
        print(f"ratio {name}/separate: {statistics.median(rates[name]) / base:.2f}")
    print(
        f"default strategy on {backend}: {default} "
        f"({statistics.median(rates[default]) / base:.2f}x separate)"
    )
    if not np.isfinite(base):
        raise SystemExit("no measurement")


if __name__ == "__main__":
    main()
