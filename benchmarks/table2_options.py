"""Table 2's communication and precision options on one small workload, in one run: each
option's step time relative to the default (flat, float32) and the bytes its gradient collectives
move per step per device, read from the compiled HLO (engine/comm.py).

Run: python benchmarks/table2_options.py [--devices 8] [--steps 20]
Compare the ratios of one run only (docs/design.md, fact 11: ±30% between runs on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


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
    from hpcai_jax.engine.comm import comm_volume
    from hpcai_jax.engine.setup import build_setup

    options = [
        ("flat", 0, "float32", "float32"),
        ("flat", 0, "bfloat16", "float32"),
        ("flat", 0, "float16", "float32"),
        ("flat", 0, "int8", "float32"),
        ("hierarchical", 2, "float32", "float32"),
        ("hierarchical", 2, "bfloat16", "float32"),
        ("2d_torus", 0, "float32", "float32"),
        ("flat", 0, "float32", "bfloat16"),
        ("flat", 0, "float32", "float16"),
    ]
    rows = []
    for mode, group, comm, dtype in options:
        config = C.RunConfig(
            mesh=C.MeshConfig(
                2,
                1,
                args.devices // 2,
                allreduce=mode,
                allreduce_group_size=group,
                grad_allreduce_dtype=comm,
            ),
            model=C.ModelConfig(dtype=dtype),
            data=C.DataConfig(train_examples=1024, eval_examples=100),
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
        compiled = setup.train_step.lower(state, batches[0]).compile()
        volume = comm_volume(compiled.as_text(), setup.mesh)
        times = []
        for batch in batches:
            start = time.perf_counter()
            state, metrics = compiled(state, batch)
            jax.block_until_ready(metrics.loss)
            times.append(time.perf_counter() - start)
        rows.append(
            (
                f"{mode}/{comm}/{dtype}",
                statistics.median(times[2:]),
                volume.bytes_per_step["data"],
                float(metrics.loss.mean()),
            )
        )
    base = rows[0][1]
    print(
        f"{'allreduce/comm dtype/compute dtype':36} {'step ms':>8} {'× default':>9} "
        f"{'data bytes/step':>15} {'final loss':>10}"
    )
    for name, t, nbytes, loss in rows:
        print(f"{name:36} {t * 1e3:8.1f} {t / base:9.2f} {nbytes:15,d} {loss:10.4f}")


if __name__ == "__main__":
    sys.exit(main())
