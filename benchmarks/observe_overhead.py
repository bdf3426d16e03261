"""What TensorBoard curves cost an unprofiled run: step time with the writer on vs off.

Runs the real training loop (run/trainer.py, hooks and all) in this process, alternately with
--tensorboard and --notensorboard, --rounds pairs, the order of each pair swapped every round so
that drift hits both alike; compiled steps come from a persistent compilation cache after the
first run. Each run's figure is its record's median step time; the ratio is off / on (1.0: no
cost; the issue's bar is >= 0.99). Then the writer alone: seconds per scalar, the bound the
interleaved runs cannot resolve under a shared machine's noise. docs/observe.md has the writer.

    python benchmarks/observe_overhead.py [--rounds=4] [--steps=60] [--members=4] \
        [--batch_size=32] [--dataset=fashion_mnist]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import jax
from absl import logging

from hpcai_jax import config as C
from hpcai_jax.run.trainer import train_and_evaluate
from hpcai_jax.telemetry.events import EventLog


def _config(args, results_dir: str, name: str, tensorboard: bool) -> C.RunConfig:
    return C.RunConfig(
        mesh=C.MeshConfig(ensemble_size=args.members, members_per_device=None),
        data=C.DataConfig(
            dataset=args.dataset, train_examples=args.batch_size * args.steps, eval_examples=256
        ),
        train=C.TrainConfig(
            batch_size=args.batch_size, steps=args.steps, log_every=10, eval_every_epochs=0
        ),
        optim=C.OptimConfig(lr_schedule="constant"),
        results=C.ResultsConfig(
            results_dir=results_dir,
            run_name=name,
            keep_weights=False,
            tensorboard=tensorboard,
            target_quality=0.9,
        ),
    ).validate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--dataset", default="fashion_mnist")
    args = parser.parse_args()
    logging.set_verbosity(logging.WARNING)
    out = tempfile.mkdtemp(prefix="observe_overhead_")
    jax.config.update("jax_compilation_cache_dir", f"{out}/cache")
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    train_and_evaluate(_config(args, out, "warm", True))  # fills the compilation cache
    medians: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for on in (True, False) if r % 2 == 0 else (False, True):
            record = train_and_evaluate(_config(args, out, f"r{r}-{on}", on)).record
            median = record.timing.step_s.median_s
            medians[on].append(median)
            board = record.observe.tensorboard if record.observe else None
            written = board.scalars_written if board else None
            print(
                f"round {r} tensorboard {'on ' if on else 'off'}: median step {median * 1e3:.2f} ms"
                f" over {record.timing.timed_steps} steps"
                + (f", {written} scalars written" if on else "")
            )
    write_s = _scalar_cost(out)
    on, off = statistics.median(medians[True]), statistics.median(medians[False])
    pairs = [b / a for a, b in zip(medians[True], medians[False], strict=True)]
    print(
        f"median step: tensorboard on {on * 1e3:.2f} ms, off {off * 1e3:.2f} ms; speed on/off "
        f"{off / on:.4f} (per round {', '.join(f'{p:.3f}' for p in pairs)}); "
        f"{jax.device_count()} {jax.devices()[0].platform} device(s)"
    )
    print(
        f"the writer alone: {write_s * 1e6:.1f} us per scalar; 2 per step = "
        f"{2 * write_s / on:.2e} of the step (the bound the interleaved runs cannot resolve)"
    )


def _scalar_cost(out: str, n: int = 20000) -> float:
    """Seconds per scalar written by the run's EventLog, buffered as in a run."""
    log = EventLog.open(f"{out}/alone")
    start = time.perf_counter()
    for i in range(n):
        log.scalar("train/loss", 1.0 / (i + 1), i)
    seconds = (time.perf_counter() - start) / n
    log.close()
    return seconds


if __name__ == "__main__":
    main()
