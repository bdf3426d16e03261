"""Several members on one device: every --member_map form vs unroll vs separate steps vs the ideal.

Trains M members of resnet_small on one device, in one run, for each M in --members and each
per-member batch B in --batch_sizes (docs/members.md, "Measured"):
  vmap:FORM - one ensemble step, the members mapped in one program as --member_map=FORM says
              (every form by default: scan, conv_loop, batched, batched_grouped, grouped)
  unroll    - one ensemble step, an unrolled loop over the members inside it (up to
              --unroll_max members: its program grows with them)
  separate  - M single-member steps, one after another (the baseline): one compiled 1-member
              step run on M members' states
  ideal     - one member at batch M·B: the same images in the fewest, largest kernels, the rate
              no way of running M members can beat by much
Timing rounds are interleaved so that machine noise hits all alike; each figure is the median
over rounds of images/s per member (the ideal's: its images/s over M). A variant whose warm-up
step takes longer than --step_budget_s is reported as too slow and not timed. Then the compile
time (lowering + XLA) of the default form's step at --compile_members members per device.

    python benchmarks/ensemble_vs_loop.py [--members=4,16,64] [--batch_sizes=8,32,128] \
        [--maps=scan,batched] [--rounds=3] [--steps=2] [--compile_members=1,16,64]

Each (M, B) block closes with `ratio vmap/separate: X` (the backend's default form),
`ratio unroll/separate: X` and `ratio batched/separate: X` (the faster of the one-kernel-per-
layer forms, batched and batched_grouped); the last lines are the grid of every form's ratio.
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
from hpcai_jax.engine.member_map import auto_form
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.member_forms import ONE_KERNEL_PER_LAYER, VMAP_FORMS


def _config(members: int, strategy: str, how: str, batch_size: int, seed: int = 0):
    return C.RunConfig(
        mesh=C.MeshConfig(
            ensemble_size=members,
            members_per_device=members,
            parallel_degree=1,
            member_strategy=strategy,
            member_map=how,
        ),
        data=C.DataConfig(train_examples=max(batch_size * 16, 512)),
        train=C.TrainConfig(batch_size=batch_size, steps=1000, seed=seed),
        optim=C.OptimConfig(lr_schedule="constant"),
        results=C.ResultsConfig(target_quality=0.9),
    ).validate()


def _runner(members: int, strategy: str, how: str, batch_size: int, device, states: int = 1):
    """(a closure that runs one training step of `members` members on each of `states` states,
    compiled; the warm-up step's seconds)."""
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

    start = time.perf_counter()
    step()  # warm-up
    return step, time.perf_counter() - start


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


def _variants(m: int, b: int, maps: list[str], args, device) -> tuple[dict, dict]:
    """({name: (step, images per call per member)} to time, {name: why not timed})."""
    wanted = {f"vmap:{how}": (m, "vmap", how, b, 1) for how in maps}
    if m <= args.unroll_max:
        wanted["unroll"] = (m, "unroll", "auto", b, 1)
    wanted["separate"] = (1, "unroll", "auto", b, m)
    wanted["ideal"] = (1, "unroll", "auto", m * b, 1)
    timed, skipped = {}, {}
    for name, (members, strategy, how, batch, states) in wanted.items():
        try:
            step, warm_s = _runner(members, strategy, how, batch, device, states)
        except Exception as e:  # noqa: BLE001 - out of memory: reported, the others go on
            skipped[name] = f"failed: {str(e).splitlines()[0][:120]}"
            continue
        if warm_s > args.step_budget_s:
            skipped[name] = f"too slow: {warm_s:.1f} s a step > --step_budget_s"
            continue
        timed[name] = (step, b)
    if m > args.unroll_max:
        skipped["unroll"] = f"not built: {m} members > --unroll_max={args.unroll_max}"
    return timed, skipped


def _measure(timed: dict, args) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(args.rounds):
        for name, (run_step, per_member) in timed.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                run_step()
            rates[name].append(per_member * args.steps / (time.perf_counter() - start))
    return rates


def _print_block(m: int, b: int, rates: dict, skipped: dict, default_map: str, args) -> dict:
    """The (M, B) block's table and closing ratios; returns {name: ratio to separate}."""
    backend, kind = jax.default_backend(), jax.devices()[0].device_kind
    print(
        f"\n{m} members of resnet_small, batch {b} each, on one {backend} device ({kind}); "
        f"{args.rounds} interleaved rounds of {args.steps} steps"
    )
    med = {name: statistics.median(v) for name, v in rates.items()}
    if "separate" not in med or not np.isfinite(med["separate"]) or med["separate"] <= 0:
        raise SystemExit("no measurement of the separate steps")
    ideal = med.get("ideal")
    print(
        f"{'variant':<22} {'img/s per member (median)':>26} {'min':>8} {'max':>8} "
        f"{'/separate':>10} {'/ideal':>8}"
    )
    for name, values in rates.items():
        of_ideal = f"{med[name] / ideal:>8.2f}" if ideal else f"{'n/a':>8}"
        print(
            f"{name:<22} {med[name]:>26.1f} {min(values):>8.1f} {max(values):>8.1f} "
            f"{med[name] / med['separate']:>10.2f} {of_ideal}"
        )
    for name, why in skipped.items():
        print(f"{name:<22} {why}")
    ratios = {name: med[name] / med["separate"] for name in med}
    default = ratios.get(f"vmap:{default_map}")
    best = max(
        ((ratios[f"vmap:{f}"], f) for f in ONE_KERNEL_PER_LAYER if f"vmap:{f}" in ratios),
        default=None,
    )
    print(f"ratio vmap/separate: {default:.2f}" if default else "ratio vmap/separate: n/a")
    unroll = ratios.get("unroll")
    print(f"ratio unroll/separate: {unroll:.2f}" if unroll else "ratio unroll/separate: n/a")
    if best:
        print(f"ratio batched/separate: {best[0]:.2f} ({best[1]})")
    return ratios


def _print_grid(grid: dict, names: list[str]) -> None:
    print("\nevery variant's images/s per member over separate steps' (median of the rounds):")
    print(f"{'M':>4} {'B':>5} " + " ".join(f"{n.removeprefix('vmap:'):>15}" for n in names))
    for (m, b), ratios in grid.items():
        cells = [f"{ratios[n]:>15.2f}" if n in ratios else f"{'-':>15}" for n in names]
        print(f"{m:>4} {b:>5} " + " ".join(cells))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--members", default="4,16,64", help="members per device")
    parser.add_argument("--batch_sizes", default="8,32,128", help="per-member batches")
    parser.add_argument("--maps", default=",".join(VMAP_FORMS), help="--member_map forms")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--unroll_max", type=int, default=16, help="largest M unroll is built")
    parser.add_argument("--step_budget_s", type=float, default=60.0)
    parser.add_argument(
        "--compile_members", default="1,16,64", help="members per device to compile ('' none)"
    )
    return parser


def main() -> None:
    args = _parser().parse_args()
    device, backend = jax.devices()[0], jax.default_backend()
    default_map = auto_form(backend, strategy=False)
    maps = [m for m in args.maps.split(",") if m]
    if default_map not in maps:
        maps.insert(0, default_map)
    grid = {}
    for m in (int(x) for x in args.members.split(",") if x):
        for b in (int(x) for x in args.batch_sizes.split(",") if x):
            timed, skipped = _variants(m, b, maps, args, device)
            rates = _measure(timed, args)
            grid[(m, b)] = _print_block(m, b, rates, skipped, default_map, args)
    names = [f"vmap:{how}" for how in maps] + ["unroll", "ideal"]
    _print_grid(grid, names)
    if args.compile_members:
        counts = [int(x) for x in args.compile_members.split(",")]
        seconds = {n: _compile_s(n, default_map, 32, device) for n in counts}
        base = seconds[counts[0]]
        print(f"\ncompile time of the vmap step ({default_map}, batch 32), lowering + XLA:")
        for n, s in seconds.items():
            print(f"compile {n} members per device: {s:.2f} s ({s / base:.2f}x {counts[0]})")
    strategy = auto_form(backend, strategy=True)
    print(f"default on {backend}: --member_strategy={strategy}, --member_map={default_map}")


if __name__ == "__main__":
    main()
