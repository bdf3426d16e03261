"""The test suite's most expensive XLA compilations, with XLA:CPU's fusion emitters on (the
baseline: XLA's default, which the suite used until it turned them off in tests/conftest.py) and
off (the suite's setting), in the same run: where the suite's time goes, and what the setting
saves (BUILD_NOTES, Test suite).

    python benchmarks/suite_compiles.py
    python benchmarks/suite_compiles.py --rounds=2 tests/test_member_map.py

Each round runs the given test files once per setting, alternating, in one pytest process each
(`-p no:xdist`, a fresh compilation cache, as CI starts). tests/conftest.py writes one JSON line
per compile of that process ($HPCAI_JAX_TEST_COMPILE_LOG: the test, the jitted function, the
seconds JAX timed, a persistent-cache hit included). Compiles inside the tests' subprocesses are
not seen. Prints the ten longest compiles per setting (a test's compiles of one function summed,
the median over rounds), each setting's total and the ratio of the totals, and the pytest
processes' CPU seconds. One round is an anecdote: give --rounds=2 or more for a spread.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The files whose compiles took most of the suite's in-process compile time (BUILD_NOTES).
FILES = ("tests/test_member_map.py", "tests/test_extreme_weather.py", "tests/test_train_step.py")
SETTINGS = {"emitters on (baseline)": "1", "emitters off (the suite's)": "0"}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmarks/suite_compiles.py", description=__doc__)
    parser.add_argument("files", nargs="*", default=list(FILES), help="test files to run")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds (>= 1)")
    parser.add_argument("--top", type=int, default=10, help="compiles listed per setting")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.top < 1:
        parser.error("--rounds and --top must be at least 1")
    return args


def run_once(files: list[str], emitters: str, log: Path) -> tuple[int, float]:
    """One pytest process over `files`: its exit code and CPU seconds (its children's too)."""
    env = {**os.environ, "HPCAI_JAX_TEST_FUSION_EMITTERS": emitters}
    env["HPCAI_JAX_TEST_COMPILE_LOG"] = str(log)
    for name in ("HPCAI_JAX_TEST_ENV", "JAX_COMPILATION_CACHE_DIR", "HPCAI_JAX_STARTUP_CACHE"):
        env.pop(name, None)  # conftest sets them afresh: a cold cache, as CI starts
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    proc = subprocess.run([*cmd, *files], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc.returncode, cpu


def read_log(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    compiles = {name: collections.defaultdict(list) for name in SETTINGS}
    totals = {name: [] for name in SETTINGS}
    cpu = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, emitters in SETTINGS.items():
                log = Path(tmp) / f"{r}-{emitters}.jsonl"
                code, seconds = run_once(args.files, emitters, log)
                if code != 0:
                    print(f"suite_compiles: pytest exit {code} with {name}; figures not comparable")
                    return 1
                lines = read_log(log)
                summed = collections.Counter()  # a function compiled twice in a test: its sum
                for line in lines:
                    summed[(line["test"], line["function"])] += line["seconds"]
                for key, seconds_of_key in summed.items():
                    compiles[name][key].append(seconds_of_key)
                totals[name].append(sum(line["seconds"] for line in lines))
                cpu[name].append(seconds)
                print(
                    f"round {r + 1}, {name}: {len(lines)} compiles, {totals[name][-1]:.1f} s, "
                    f"pytest {seconds:.1f} CPU-s"
                )
    for name in SETTINGS:
        print(f"\n{name}: the {args.top} longest (test, function) compiles (median over rounds, s)")
        ranked = sorted(
            ((statistics.median(v), k) for k, v in compiles[name].items()), reverse=True
        )
        for seconds, (test, function) in ranked[: args.top]:
            print(f"  {seconds:7.2f}  {function}  ({test})")
    names = list(SETTINGS)
    for label, figures in (("compile total", totals), ("pytest CPU", cpu)):
        base, ours = (statistics.median(figures[n]) for n in names)
        ratios = [o / b for b, o in zip(figures[names[0]], figures[names[1]], strict=True)]
        print(
            f"\n{label}: baseline {base:.1f} s, the suite's {ours:.1f} s: ratio {ours / base:.2f} "
            f"(per round {min(ratios):.2f} to {max(ratios):.2f}, {args.rounds} round(s))"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
