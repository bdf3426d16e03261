"""Resident memory of a bootstrap sampler walking ImageNet-size epoch orders.

A sampler keeps each member's sample (uint16 counts) and at most `sampler.ORDERS_KEPT` epoch
orders per member (int64, 10 MB a member at 1,281,167 examples), so that its memory after 64
epochs, in every data worker, is what it was after one; this benchmark measures whether it is
(figures, and the baseline: `benchmarks/README.md`).

Walks --members members through --epochs epochs (one step per epoch, which builds that
epoch's order) and prints the process's resident set size (VmRSS) after epoch 1 and after the
last epoch, and their ratio.

    python benchmarks/sampler_memory.py [--examples=1281167] [--members=2] [--epochs=64]
"""

from __future__ import annotations

import argparse
import json
import time

from hpcai_jax.data.sampler import ORDERS_KEPT, BootstrapSampler


def rss_bytes() -> int:
    """The process's resident set size now (Linux /proc)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1_281_167)
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=256)
    args = parser.parse_args()
    sampler = BootstrapSampler("with_replacement", args.examples, args.batch_size, seed=0)
    start, base = time.perf_counter(), rss_bytes()
    first = None
    for epoch in range(args.epochs):
        for member in range(args.members):
            sampler.step_indices(member, epoch * sampler.steps_per_epoch)
        if epoch == 0:
            first = rss_bytes()
    last = rss_bytes()
    order_mb = args.examples * 8 / 1e6
    print(
        json.dumps(
            {
                "examples": args.examples,
                "members": args.members,
                "epochs": args.epochs,
                "orders_kept_per_member": ORDERS_KEPT,
                "one_order_mb": round(order_mb, 1),
                "rss_before_mb": round(base / 1e6, 1),
                "rss_epoch_1_mb": round(first / 1e6, 1),
                f"rss_epoch_{args.epochs}_mb": round(last / 1e6, 1),
                "ratio": round(last / first, 3),
                "seconds": round(time.perf_counter() - start, 1),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
