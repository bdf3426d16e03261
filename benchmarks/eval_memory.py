"""The detector's evaluation memory per device at M = 8, 16, 32 and 64 on 8 devices.

docs/scale.md claims that a device's evaluation memory does not grow with M: each device keeps
its own members' counts, where the step once gathered every member's [M, K] counts onto every
device (41 MiB at M = 8 grew to 191 MiB at M = 64). This measures the claim with XLA's
`memory_analysis` of the compiled eval step (telemetry/memory.py), holding a device's share
fixed (--members_per_device members, --rows rows per batch), so that only M and P_degree change
(P_degree = 8 × members per device / M). The baseline is the smallest M, measured in the same
run; each row prints its ratio to it.

    python benchmarks/eval_memory.py [--members=8,16,32,64] [--members_per_device=8] [--rows=2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

DEVICES = 8

if "jax" not in sys.modules:  # 8 CPU devices unless the caller chose its own
    os.environ.setdefault("XLA_FLAGS", f"--xla_force_host_platform_device_count={DEVICES}")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="8,16,32,64", help="the values of M, comma-separated")
    parser.add_argument("--members_per_device", type=int, default=8, help="a device's members")
    parser.add_argument("--rows", type=int, default=2, help="held-out rows per device per batch")
    args = parser.parse_args()
    members = [int(m) for m in args.members.split(",")]
    per = args.members_per_device
    bad = [m for m in members if (DEVICES * per) % m or m % per]
    if bad:
        parser.error(
            f"--members={args.members}: each M must divide {DEVICES} × --members_per_device and "
            f"be a multiple of it (not {bad})"
        )

    import jax

    from hpcai_jax.telemetry.memory import eval_step_memory, small_detector_setup

    if jax.device_count() != DEVICES:
        parser.error(f"needs {DEVICES} devices, found {jax.device_count()} (XLA_FLAGS set?)")
    print(
        f"detector eval step per device, {args.members_per_device} members and {args.rows} rows "
        f"per device per batch, {DEVICES} {jax.devices()[0].device_kind} devices"
    )
    print(
        f"{'M':>4} {'P_degree':>8} {'temp MiB':>9} {'output MiB':>10} {'step MiB':>9} "
        f"{'vs first':>8} {'compile s':>9}"
    )
    first = None
    for m in members:
        setup, degree = small_detector_setup(m, per, args.rows, DEVICES)
        start = time.perf_counter()
        memory = eval_step_memory(setup)
        seconds = time.perf_counter() - start
        first = first or memory.step_bytes
        print(
            f"{m:>4} {degree:>8} {memory.temp_bytes / 2**20:>9.2f} "
            f"{memory.output_bytes / 2**20:>10.2f} {memory.step_bytes / 2**20:>9.2f} "
            f"{memory.step_bytes / first:>8.3f} {seconds:>9.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
