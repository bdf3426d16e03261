"""Two paths, each held to docs/design.md's list of it. One training step reads in nine files: docs/design.md names them on its line "The step's
path:", and this checks the line against the code. The trainer's call of one step (`Trainer.step`:
the batch, then the ensemble step, traced here as its first call would) is followed with a
profile hook; every function of the package it runs must be in a named module, every named
module must be on the path, and the modules stay within nine files and 2,100 lines. And the
path from `python -m hpcai_jax.main` to the first update, on every thread (tests/trace_path.py),
within the ceilings docs/design.md states ("The path from `main()`")."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types

import pytest
from helpers import ROOT, subprocess_env, tiny_config

from hpcai_jax import config as C
from hpcai_jax.data.pipeline import Prefetcher
from hpcai_jax.engine.setup import build_setup
from hpcai_jax.run import trainer

# Eight files and 2,000 lines until the typed step plan (engine/plan.py) joined the path; flax's
# examples/imagenet: 5 files, 975 lines.
MAX_MODULES, MAX_LINES = 9, 2100


def step_path() -> list[str]:
    """The modules docs/design.md's "The step's path:" line names, in its order."""
    lines = [
        line
        for line in (ROOT / "docs" / "design.md").read_text().splitlines()
        if line.startswith("The step's path:")
    ]
    assert len(lines) == 1, lines
    named = lines[0].removeprefix("The step's path:").strip().rstrip(".")
    return [re.sub(r"[`*]", "", p).strip() for p in named.split(",")]


class _Traced:
    """Stands for the compiled step: traces the jitted step for the state and batch it is
    given (what a first call does before compiling), and hands the state back."""

    def __init__(self, jitted):
        self.jitted = jitted

    def __call__(self, state, batch):
        self.jitted.trace(state, batch)
        return state, None


def modules_on_the_path(setup) -> set[str]:
    """The package's modules whose functions run, on the trainer's thread, from the trainer's
    call of one step to the updated state."""
    state = setup.init_state()
    one = trainer.Trainer(setup, None, 0.0, None)
    one.batches = Prefetcher(trainer._batches(setup), 0, setup.total_steps, 1)
    one.measured = types.SimpleNamespace(compiled=_Traced(setup.train_step))
    package = str(ROOT / "hpcai_jax") + "/"
    seen: set[str] = set()

    def profile(frame, event, arg):
        path = frame.f_code.co_filename
        if event == "call" and path.startswith(package):
            seen.add("hpcai_jax/" + path.removeprefix(package))

    sys.setprofile(profile)
    try:
        one.step(state)
    finally:
        sys.setprofile(None)
        one.batches.close()
    return seen


def test_the_named_modules_exist_and_stay_within_nine_files_and_2100_lines():
    path = step_path()
    assert path[0] == "hpcai_jax/run/trainer.py"  # from the loop's call ...
    assert "hpcai_jax/engine/step.py" in path  # ... through the step to the updated state
    assert len(path) == len(set(path)) <= MAX_MODULES, path
    missing = [p for p in path if not (ROOT / p).is_file()]
    assert not missing, missing
    lines = sum(len((ROOT / p).read_text().splitlines()) for p in path)
    assert lines <= MAX_LINES, f"the step's path is {lines} lines"


# One member per device (an unrolled step) and two (the members mapped by `lax.map`, their
# convolutions in ops/member_conv.py's loop forms): the path of the quickstart's CPU run.
LAYOUTS = {
    "unroll": C.MeshConfig(ensemble_size=4, members_per_device=1, parallel_degree=2),
    "vmap-scan": C.MeshConfig(ensemble_size=4, members_per_device=2, parallel_degree=4),
}


@pytest.fixture(scope="module")
def seen_per_layout() -> dict[str, set[str]]:
    return {
        name: modules_on_the_path(build_setup(tiny_config(mesh=mesh)))
        for name, mesh in LAYOUTS.items()
    }


def test_the_step_runs_inside_the_named_modules_only(seen_per_layout):
    """Each layout's step stays inside the named modules, and the two together use them all
    (the unrolled step never reads the members' mapping: engine/plan.py)."""
    path = set(step_path())
    for layout, seen in seen_per_layout.items():
        assert seen <= path, f"{layout} leaves the named modules: {sorted(seen - path)}"
    seen = set().union(*seen_per_layout.values())
    assert seen == path, f"named but not on the path: {sorted(path - seen)}"


# The path from main(): today's figures as ceilings (docs/design.md), each raised only with its
# reason here; the goal is 16 files, 3,500 lines and 800 lines of settings. Lines: 13,600 until
# the hooks' typed input (StepInfo, Services: run/hooks.py) took 13,648; 13,662 with every
# hook's schedule in the registry (ProgressLine.due). 71 files and 13,836 lines with the
# start-up measurements kept per host (flops/host_cache.py: a test suite's or a sweep's runs
# measure them once). 75 files, 15,334 lines and 1,570 of settings with the safety of issue 63:
# main's own flagfile reader (flagfiles.py), the outputs recognised by content before any is
# replaced (records/owned.py, run/kept_weights.py's full-disk path), Ctrl-C answered from a
# thread (run/interrupt.py), the training flags' cross rules (config.py) and the sweep plan's
# fingerprint (records/train.py, read by config.py); 15,358 with the STREAM rule sets' settings
# and the sweep plan's point, the member forms' table taking 95 lines off.
MAIN_FILES, MAIN_LINES, SETTINGS_LINES = 75, 15_400, 1_600
SETTINGS = ("main.py", "flags.py", "settings.py", "config.py", "fields.py")


def main_path() -> set[str]:
    """The modules docs/design.md's "The path from main(), ..." lines name."""
    named = set()
    for line in (ROOT / "docs" / "design.md").read_text().splitlines():
        if line.startswith("- The path from main(), "):
            named |= set(re.findall(r"`(hpcai_jax/[^`]+\.py)`", line))
    return named


def _lines(paths) -> int:
    return sum(len((ROOT / p).read_text().splitlines()) for p in paths)


@pytest.mark.slow
def test_the_path_from_main_is_the_one_design_names_within_its_ceilings(tmp_path):
    out = tmp_path / "seen.json"
    flags = ["--flagfile=configs/quickstart.flags", f"--results_dir={tmp_path / 'results'}"]
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "trace_path.py"), str(out), *flags],
        cwd=ROOT,
        env=subprocess_env(devices=1, PYTHONPATH=str(ROOT)),  # this checkout's package
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and out.is_file(), done.stderr[-2000:]
    traced = json.loads(out.read_text())
    assert traced["package"] == str(ROOT / "hpcai_jax") + "/", traced["package"]
    seen, named = set(traced["modules"]), main_path()
    assert "hpcai_jax/data/sampler.py" in seen  # the prefetch thread's, followed
    assert seen <= named, f"on the path, not in docs/design.md: {sorted(seen - named)}"
    assert seen == named, f"in docs/design.md, not on the path: {sorted(named - seen)}"
    assert len(seen) <= MAIN_FILES and _lines(seen) <= MAIN_LINES, (len(seen), _lines(seen))
    settings = _lines(f"hpcai_jax/{name}" for name in SETTINGS)
    assert settings <= SETTINGS_LINES, settings
