"""Table 2's system options on one small workload, in one run: each option's step time and
held-out quality after a short run relative to the default (data parallel, flat all-reduce,
float32), and what its collectives move per step per device, by mesh axis and by collective
and element type, read from the HLO (telemetry/comm.py): the payload (each collective's result)
as the program wrote it (before XLA's passes) and as this backend runs it (XLA:CPU widens
bf16/f16 reductions to f32), and the wire bytes (ring algorithms over each collective's group)
of the compiled program.

Run: python benchmarks/table2_options.py [--devices 8] [--steps 20]
Compare the ratios of one run only (docs/design.md, fact 11: ±30% between runs on 2 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time


@dataclasses.dataclass(frozen=True)
class Option:
    allreduce: str = "flat"
    group: int | None = None  # None: derived (--allreduce_group_size=auto)
    comm: str = "float32"
    dtype: str = "float32"
    model_parallel: int = 1

    @property
    def name(self) -> str:
        mp = f" model×{self.model_parallel}" if self.model_parallel > 1 else ""
        return f"{self.allreduce}/{self.comm}/{self.dtype}{mp}"


OPTIONS = [
    Option(),
    Option(comm="bfloat16"),
    Option(comm="float16"),
    Option(comm="int8"),
    Option("hierarchical", 2),
    Option("hierarchical", 2, "bfloat16"),
    Option("2d_torus"),
    Option(dtype="bfloat16"),
    Option(dtype="float16"),
    Option(dtype="int8"),
    Option(model_parallel=2),
]


def _kinds(table: dict[str, int]) -> str:
    return " ".join(f"{k}:{v:,d}" for k, v in sorted(table.items())) or "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"

    import jax

    from hpcai_jax import config as C
    from hpcai_jax.data.pipeline import train_batch
    from hpcai_jax.engine.evaluate import evaluate
    from hpcai_jax.engine.setup import build_setup
    from hpcai_jax.telemetry.comm import comm_volume

    rows = []
    for opt in OPTIONS:
        config = C.RunConfig(
            mesh=C.MeshConfig(
                2,
                1,
                args.devices // 2 // opt.model_parallel,
                model_parallel=opt.model_parallel,
                allreduce=opt.allreduce,
                allreduce_group_size=opt.group,
                grad_allreduce_dtype=opt.comm,
            ),
            model=C.ModelConfig(dtype=opt.dtype),
            data=C.DataConfig(train_examples=1024, eval_examples=500),
            train=C.TrainConfig(batch_size=32, steps=args.steps, eval_batch_size=100),
            optim=C.OptimConfig(lr_schedule="constant"),
            results=C.ResultsConfig(target_quality=0.9),
        ).validate()
        setup = build_setup(config)
        state = setup.init_state()
        batches = [
            train_batch(setup.datasets.train, setup.sampler, setup.mesh, 2, t)
            for t in range(args.steps)
        ]
        lowered = setup.train_step.lower(state, batches[0])
        written = comm_volume(lowered.as_text(dialect="hlo"), setup.mesh)
        compiled = lowered.compile()
        moved = comm_volume(compiled.as_text(), setup.mesh)
        times = []
        for batch in batches:
            start = time.perf_counter()
            state, metrics = compiled(state, batch)
            jax.block_until_ready(metrics.loss)
            times.append(time.perf_counter() - start)
        quality = evaluate(setup, state)
        rows.append((opt, statistics.median(times[2:]), quality.ensemble, written, moved))

    base_t, base_q = rows[0][1], rows[0][2]
    print(
        f"{args.steps} steps, M = 2, {args.devices} CPU devices; quality = ensemble top-1 on "
        f"500 held-out Fashion-MNIST images\n"
    )
    print(
        f"{'option (allreduce/comm/compute)':34} {'step ms':>8} {'× def':>6} {'top-1':>6} "
        f"{'− def':>6} {'data pay B':>10} {'data wire B':>11} {'model pay B':>11} "
        f"{'model wire B':>12}"
    )
    for opt, t, q, _, moved in rows:
        pay, wire = moved.payload_bytes, moved.wire_bytes
        print(
            f"{opt.name:34} {t * 1e3:8.1f} {t / base_t:6.2f} {q:6.3f} {q - base_q:+6.3f} "
            f"{pay['data']:10,d} {wire['data']:11,d} {pay['model']:11,d} {wire['model']:12,d}"
        )
    print("\nbytes per step per device by collective and element type (data axis; model axis)")
    for opt, _, _, written, moved in rows:
        print(f"{opt.name}")
        for label, table in (
            ("  written", written.by_collective),
            ("  compiled", moved.by_collective),
            ("  wire", moved.wire_by_collective),
        ):
            print(f"{label:10} {_kinds(table.get('data', {}))}; {_kinds(table.get('model', {}))}")


if __name__ == "__main__":
    sys.exit(main())
