"""Compile seconds of the members' initial state: each device's members initialised one after
another (engine/state.build_init: lax.map in a shard_map) against the vmapped program it
replaced, XLA's default flags, no compilation cache, in one process.

    python benchmarks/init_compile.py                 # quickstart's layout and 64 per device
    python benchmarks/init_compile.py --rounds=3 --layouts=4x4x1,64x64x1,16x4x2

A layout is M x members_per_device x P_degree (resnet_small, Fashion-MNIST's shapes); rounds
alternate which program compiles first. Each round compiles both afresh (new functions) and
checks they give the same bits. Figures: docs/design.md, The members' initial state.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layouts", default="4x4x1,64x64x1", help="M x per device x P_degree, ...")
    p.add_argument("--rounds", type=int, default=2)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    layouts = [tuple(int(x) for x in spec.split("x")) for spec in args.layouts.split(",")]
    devices = max(m // per * p for m, per, p in layouts)
    os.environ["XLA_FLAGS"] = (
        f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
    )
    os.environ["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    sys.path.insert(0, str(ROOT))
    print(f"# jax {jax.__version__}, {os.cpu_count()} cores, XLA's default flags", flush=True)
    for layout in layouts:
        if not measure(layout, args.rounds):
            return 1
    return 0


def _programs(layout):
    """{kind: a maker of a function of the seed that compiles on its first call} for `layout`:
    each call of the maker builds a new program, so nothing is cached in the process."""
    import jax
    import jax.numpy as jnp

    from hpcai_jax import config as C
    from hpcai_jax.engine import state
    from hpcai_jax.engine.setup import build_setup

    m, per, p = layout
    config = C.RunConfig(
        mesh=C.MeshConfig(ensemble_size=m, members_per_device=per, parallel_degree=p),
        data=C.DataConfig(train_examples=512, eval_examples=200),
        train=C.TrainConfig(batch_size=16 * p, steps=1, eval_batch_size=100),
        results=C.ResultsConfig(target_quality=0.9),
    ).validate()
    setup = build_setup(config, devices=jax.devices()[: m // per * p], open_data=False)

    def looped():
        return state.build_init(setup.workload, setup.tx, setup.mesh, m)

    def vmapped():
        def init(seed):
            keys = jax.random.split(jax.random.key(seed), m)
            return jax.vmap(lambda k: state.init_member(setup.workload, setup.tx, k))(keys)

        jitted = jax.jit(init, out_shardings=state.shardings(setup.mesh, None))
        return lambda seed: jitted(jnp.asarray(seed, jnp.uint32))

    return {"looped": looped, "vmapped": vmapped}


def measure(layout, rounds: int) -> bool:
    """Prints one layout's line; False where the two programs' states differ."""
    import jax
    import numpy as np

    m, per, p = layout
    makers = _programs(layout)
    seconds = {"looped": [], "vmapped": []}
    for r in range(rounds):
        out = {}
        for kind in ("looped", "vmapped") if r % 2 == 0 else ("vmapped", "looped"):
            init = makers[kind]()
            start = time.perf_counter()
            out[kind] = jax.block_until_ready(init(0))  # compile and one run
            seconds[kind].append(time.perf_counter() - start)
        pairs = zip(jax.tree.leaves(out["looped"]), jax.tree.leaves(out["vmapped"]), strict=True)
        if not all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in pairs):
            print(f"init_compile: {m}x{per}x{p}: the two programs differ", file=sys.stderr)
            return False
    ratios = [a / b for a, b in zip(seconds["looped"], seconds["vmapped"], strict=True)]
    print(
        f"M={m}, {per} per device, P_degree={p} ({m // per * p} devices): looped "
        f"{statistics.median(seconds['looped']):.2f} s, vmapped "
        f"{statistics.median(seconds['vmapped']):.2f} s (medians of {rounds}); "
        f"looped / vmapped {statistics.median(ratios):.2f} "
        f"({min(ratios):.2f}-{max(ratios):.2f}); the same bits",
        flush=True,
    )
    return True


if __name__ == "__main__":
    sys.exit(main())
