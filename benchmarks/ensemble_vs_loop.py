"""Several members on one device: the mapped members (vmap) vs unroll vs separate steps.

Trains M members of resnet_small on one device, in one run, three ways (docs/members.md):
  vmap     - one ensemble step, the members mapped in one program (--member_map: the backend's
             default, or each of --maps)
  unroll   - one ensemble step, an unrolled loop over the members inside it
  separate - M single-member steps, one after another (the baseline): one compiled 1-member step
             run on M members' states
Timing rounds are interleaved so that machine noise hits all alike; each figure is the median
over rounds of images/s per member. Then the compile time (lowering + XLA) of the vmap step at
--compile_members members per device, against the 1-member step's, each compiled in a fresh
process state (no cache).

    python benchmarks/ensemble_vs_loop.py [--members=4,16] [--maps=scan,batched] \
        [--batch_size=128] [--rounds=3] [--steps=4] [--compile_members=1,16,64]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from hpcai_jax import config as C
from hpcai_jax.data.pipeline import train_batch
from hpcai_jax.engine.compiled import compile_step
from hpcai_jax.engine.member_map import (
    MEMBER_MAP_DEFAULTS,
    MEMBER_STRATEGY_DEFAULTS,
)
from hpcai_jax.engine.setup import build_setup


def _config(members: int, strategy: str, how: str, batch_size: int, seed: int = 0):
    return C.RunConfig(
        mesh=C.MeshConfig(
            ensemble_size=members,
            members_per_device=members,
            parallel_degree=1,
            member_strategy=strategy,
            member_map=how,
        ),
        data=C.DataConfig(train_examples=batch_size * 16),
        train=C.TrainConfig(batch_size=batch_size, steps=1000, seed=seed),
        optim=C.OptimConfig(lr_schedule="constant"),
        results=C.ResultsConfig(target_quality=0.9),
    ).validate()


def _runner(members: int, strategy: str, how: str, batch_size: int, device, states: int = 1):
    """A closure that runs one training step of `members` members on each of `states` states
    (separate steps: one compiled step, several members' states); compiled and warmed up."""
    setup = build_setup(_config(members, strategy, how, batch_size), devices=[device])
    holder = [setup.init_state() for _ in range(states)]
    compiled = compile_step(
        setup.train_step,
        holder[0],
        setup.mesh,
        setup.layout,
        batch_size,
        setup.workload.spec.fields,
    ).compiled
    batch = train_batch(setup.datasets.train, setup.sampler, setup.mesh, members, 0)

    def step():
        for i in range(states):
            holder[i], metrics = compiled(holder[i], batch)
        jax.block_until_ready(metrics)

    step()  # warm-up
    return step


def _compile_s(members: int, how: str, batch_size: int, device) -> float:
    """Seconds to lower and compile the vmap step of `members` members, from abstract state."""
    setup = build_setup(_config(members, "vmap", how, batch_size), devices=[device])
    jax.clear_caches()
    return compile_step(
        setup.train_step,
        setup.abstract_state,
        setup.mesh,
        setup.layout,
        batch_size,
        setup.workload.spec.fields,
    ).seconds


def _measure(m: int, maps: list[str], args, device) -> dict[str, list[float]]:
    variants = {f"vmap:{how}": _runner(m, "vmap", how, args.batch_size, device) for how in maps}
    variants["unroll"] = _runner(m, "unroll", "auto", args.batch_size, device)
    variants["separate"] = _runner(1, "unroll", "auto", args.batch_size, device, states=m)
    rates: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, run_step in variants.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                run_step()
            rates[name].append(args.batch_size * args.steps / (time.perf_counter() - start))
    return rates


def _print_rates(m: int, rates: dict[str, list[float]], default_map: str, args) -> None:
    backend, kind = jax.default_backend(), jax.devices()[0].device_kind
    print(
        f"\n{m} members of resnet_small, batch {args.batch_size} each, on one {backend} device "
        f"({kind}); {args.rounds} interleaved rounds of {args.steps} steps"
    )
    print(f"{'strategy':<16} {'img/s per member (median)':>26} {'min':>8} {'max':>8}")
    for name, values in rates.items():
        median = statistics.median(values)
        print(f"{name:<16} {median:>26.1f} {min(values):>8.1f} {max(values):>8.1f}")
    med = {name: statistics.median(v) for name, v in rates.items()}
    if not all(np.isfinite(v) and v > 0 for v in med.values()):
        raise SystemExit("no measurement")
    for name in rates:
        if name.startswith("vmap:") and name != f"vmap:{default_map}":
            print(f"ratio {name}/separate: {med[name] / med['separate']:.2f}")
    vmap = med[f"vmap:{default_map}"]
    print(f"ratio vmap/unroll: {vmap / med['unroll']:.2f}")
    print(f"ratio vmap/separate: {vmap / med['separate']:.2f}")
    print(f"ratio unroll/separate: {med['unroll'] / med['separate']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", default="4,16", help="members per device, comma-separated")
    parser.add_argument(
        "--maps", default="", help="--member_map forms to time (default: the backend's)"
    )
    parser.add_argument("--batch_size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument(
        "--compile_members", default="1,16,64", help="members per device to compile ('' none)"
    )
    args = parser.parse_args()
    device = jax.devices()[0]
    backend = jax.default_backend()
    default_map = MEMBER_MAP_DEFAULTS.get(backend, MEMBER_MAP_DEFAULTS["cpu"])[0]
    maps = [m for m in args.maps.split(",") if m] or [default_map]
    if default_map not in maps:
        maps.insert(0, default_map)
    for m in (int(x) for x in args.members.split(",") if x):
        _print_rates(m, _measure(m, maps, args, device), default_map, args)
    if args.compile_members:
        counts = [int(x) for x in args.compile_members.split(",")]
        seconds = {n: _compile_s(n, default_map, args.batch_size, device) for n in counts}
        base = seconds[counts[0]]
        print(f"\ncompile time of the vmap step ({default_map}), lowering + XLA, no cache:")
        for n, s in seconds.items():
            print(f"compile {n} members per device: {s:.2f} s ({s / base:.2f}x {counts[0]})")
    strategy = MEMBER_STRATEGY_DEFAULTS.get(backend, MEMBER_STRATEGY_DEFAULTS["cpu"])[0]
    print(f"default on {backend}: --member_strategy={strategy}, --member_map={default_map}")


if __name__ == "__main__":
    main()
