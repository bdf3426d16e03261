"""Runs a tier of the suite many times under load and counts each test's passes: the flake hunt
of CONTRIBUTING.md (Tests), in CI's own conditions (2 pytest workers, plus CPU burners on the
cores they share). Not a benchmark and not run by CI: a developer runs it before landing a
change to a timing-sensitive test.

    python benchmarks/flake_hunt.py --runs=20 -m multiprocess
    python benchmarks/flake_hunt.py --runs=20 --burners=1 -k killed tests/test_multiprocess.py

It prints one line per round (passed, failed, seconds), then each test's passes out of the
rounds it ran in, and exits 1 if any test failed in any round. Each round's JUnit XML and
output are kept under --out for the failures' tracebacks.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BURN = "while True: pass"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="benchmarks/flake_hunt.py",
        description="Run a tier of the suite N times under load; count every test's passes.",
    )
    parser.add_argument("--runs", type=int, default=20, help="rounds (default 20)")
    parser.add_argument(
        "--burners", type=int, default=1, help="busy-loop processes beside pytest (default 1)"
    )
    parser.add_argument("--workers", type=int, default=2, help="pytest -n (default 2, as CI)")
    parser.add_argument("-m", dest="marker", default="", help="pytest -m expression")
    parser.add_argument("-k", dest="keyword", default="", help="pytest -k expression")
    parser.add_argument("--out", default="/tmp/flake_hunt", help="where each round's files go")
    parser.add_argument("paths", nargs="*", help="test files or node ids (default: tests/)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.burners < 0 or args.workers < 1:
        parser.error("--runs and --workers must be >= 1, --burners >= 0")
    return args


def pytest_command(args: argparse.Namespace, junit: Path) -> list[str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", f"--junitxml={junit}"]
    if args.workers > 1:
        command += ["-n", str(args.workers), "--dist", "loadfile"]
    if args.marker:
        command += ["-m", args.marker]
    if args.keyword:
        command += ["-k", args.keyword]
    return command + (args.paths or ["tests"])


def outcomes(junit: Path) -> dict[str, bool]:
    """Each test case of a JUnit XML file: passed (or skipped) True, failed or errored False."""
    if not junit.exists():
        return {}
    cases = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        cases[name] = not any(case.find(tag) is not None for tag in ("failure", "error"))
    return cases


def hunt(args: argparse.Namespace) -> dict[str, list[bool]]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[bool]] = collections.defaultdict(list)
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(args.burners)]
    try:
        for round_ in range(1, args.runs + 1):
            junit = out / f"round{round_}.xml"
            start = time.monotonic()
            with open(out / f"round{round_}.log", "w") as log:
                proc = subprocess.run(
                    pytest_command(args, junit), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
                )
            cases = outcomes(junit)
            for name, ok in cases.items():
                results[name].append(ok)
            failed = sorted(n for n, ok in cases.items() if not ok)
            print(
                f"round {round_}/{args.runs}: {len(cases) - len(failed)} passed, "
                f"{len(failed)} failed, rc {proc.returncode}, "
                f"{time.monotonic() - start:.0f} s" + "".join(f"\n  FAILED {n}" for n in failed),
                flush=True,
            )
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    return results


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    results = hunt(args)
    print(f"\n{len(results)} tests, {args.runs} rounds, {args.burners} burner(s):")
    for name, runs in sorted(results.items()):
        print(f"{sum(runs)}/{len(runs)}  {name}")
    return 0 if results and all(all(runs) for runs in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
