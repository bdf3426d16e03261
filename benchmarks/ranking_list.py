"""A list of N packages (100 by default): the cost of `python -m hpcai_jax.ranking` over the
cost of `check` on the same packages, which it runs once each (docs/ranking.md, "What it
costs").

    python benchmarks/ranking_list.py                 # 100 packages
    python benchmarks/ranking_list.py --packages=20

The packages are copies of the shipped example's centre C (one image classification run, no
weights), each retimed by its own factor and stated as one of 10 systems
(tests/ranking_packages.py, tests/forge.py: consistent in record, MLLOG, flagfile, README and
system.json, so each passes check). Baseline, in the same run and interleaved in halves against
the load of a shared machine: `submission.verify.check` on every package, in this process. The
figure: the whole list (checks, digests, ranking, every page written), in this process.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
SOURCE = ROOT / "docs" / "example_ranking" / "packages" / "centre-c"
RUN = "cpu-c"
SYSTEMS = 10


def make(folder: Path, n: int) -> list[Path]:
    from ranking_packages import variant

    out = []
    for i in range(n):
        k = i % SYSTEMS
        platform, org = f"cpu-bench-{k}", f"Benchmark Centre {k}"
        system = {"system": platform, "organisation": org}
        dest = folder / f"pkg-{i:03d}"
        out.append(variant(SOURCE, dest, RUN, 1 + i / (2 * n), org, platform, system))
    return out


def check_all(packages: list[Path]) -> float:
    from hpcai_jax.submission import verify

    start = time.perf_counter()
    for path in packages:
        assert not verify.check(str(path)), path
    return time.perf_counter() - start


def list_all(folder: Path, out: Path) -> float:
    from hpcai_jax.ranking.__main__ import main

    start = time.perf_counter()
    with open(os.devnull, "w") as sink:
        stdout, sys.stdout = sys.stdout, sink
        try:
            code = main([str(folder), f"--out={out}", "--overwrite"])
        finally:
            sys.stdout = stdout
    assert code == 0
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--packages", type=int, default=100, help="how many packages")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ranking_bench_") as tmp:
        folder = Path(tmp) / "packages"
        start = time.perf_counter()
        packages = make(folder, args.packages)
        made = time.perf_counter() - start
        half = args.packages // 2
        check_s = check_all(packages[:half])
        list_s = list_all(folder, Path(tmp) / "list")
        check_s += check_all(packages[half:])
        size = sum(f.stat().st_size for f in (Path(tmp) / "list").rglob("*") if f.is_file())
    print(f"{args.packages} packages made in {made:.1f} s on {os.cpu_count()} CPUs")
    print(f"check alone (baseline): {check_s:.1f} s, {check_s / args.packages:.3f} s a package")
    print(f"the list:               {list_s:.1f} s, {list_s / args.packages:.3f} s a package")
    print(f"list / check: {list_s / check_s:.2f}; the list's files: {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
