"""Sets up JAX for the whole suite before it starts: 8 host CPU devices, so meshes have 8
devices in every test; fast compiles; one compilation cache for every process of the run.

The suite's time is compilation: on these tiny models XLA:CPU spends most of a step's compile in
LLVM's optimisation passes, which buy nothing at test sizes. The tests compile at backend
optimisation level 0 (3-6× faster here, same programs, same results within float tolerance)
and with XLA:CPU's classic elemental emitters instead of its fusion emitters, which take most of
what is left of a compile at level 0 (BUILD_NOTES, Test suite); benchmarks and real runs keep
XLA's defaults. The persistent cache lets a subprocess that compiles a program another test
already compiled (the CLI tests run the same configurations) load it instead. Subprocesses
inherit both through the environment (`helpers.subprocess_env`), and pyproject.toml's warning
filters as PYTHONWARNINGS: a deprecation a CLI run reaches fails its test as one in the test
process does.
"""

import atexit
import os
import shutil
import tempfile

FAST_COMPILE = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    " --xla_cpu_use_fusion_emitters=false"
)
# benchmarks/suite_compiles.py: the suite's compiles with XLA:CPU's fusion emitters on (its
# baseline), and a JSON line per compile of the test processes written to this file.
if os.environ.get("HPCAI_JAX_TEST_FUSION_EMITTERS") == "1":
    FAST_COMPILE = FAST_COMPILE.replace("emitters=false", "emitters=true")
COMPILE_LOG = os.environ.get("HPCAI_JAX_TEST_COMPILE_LOG", "")
# pyproject.toml's filterwarnings in -W form (literal message prefix and module): keep in step.
SUBPROCESS_WARNINGS = (
    "error::DeprecationWarning,"
    "ignore:'VariableState' was removed:DeprecationWarning:qwix._src.utils.flax_util"
)

if "HPCAI_JAX_TEST_ENV" not in os.environ:  # set once, by the first process (xdist's controller)
    os.environ["HPCAI_JAX_TEST_ENV"] = "1"
    os.environ["XLA_FLAGS"] = (
        f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE} --xla_force_host_platform_device_count=8"
    ).strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["PYTHONWARNINGS"] = ",".join(
        w for w in (os.environ.get("PYTHONWARNINGS", ""), SUBPROCESS_WARNINGS) if w
    )
    if "JAX_COMPILATION_CACHE_DIR" not in os.environ:  # one of ours: removed when the run ends
        cache = tempfile.mkdtemp(prefix="hpcai_jax_test_xla_cache_")
        os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
    # Every program cached, however quick its compile (JAX's default keeps those of 1 s or more
    # only): the suite compiles many small programs more than once (BUILD_NOTES, Test suite).
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    # The start-up measurements (matmul peaks, STREAM, the cross-check's counts) taken by the
    # suite's first training run and read by every later one (hpcai_jax/flops/host_cache.py);
    # the tests of those measurements call them directly, which measures.
    if "HPCAI_JAX_STARTUP_CACHE" not in os.environ:
        kept = tempfile.mkdtemp(prefix="hpcai_jax_test_startup_")
        os.environ["HPCAI_JAX_STARTUP_CACHE"] = kept
        atexit.register(shutil.rmtree, kept, ignore_errors=True)


# Fixtures below import from the tests' own modules, which import JAX: only after the set-up.
import json  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402

# The smallest real command-line training run (Fashion-MNIST, resnet_small, 4 members on 8
# devices, 4 steps): one run of it serves every test that reads a training record or an MLLOG.
TINY = [
    "--ensemble_size=4",
    "--members_per_device=2",
    "--parallel_degree=4",
    "--batch_size=16",
    "--steps=4",
    "--train_examples=512",
    "--eval_examples=300",
    "--eval_batch_size=128",
    "--log_every=2",
    "--lr_schedule=constant",
    "--model=resnet_small",
    "--target_quality=0.9",
]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """The tiny run through the real CLI, in a subprocess, once per test session (xdist's
    workers share it: the first to ask runs it, under a file lock), on 32 training examples (2
    epochs, the ensemble evaluated after each): its completed process, record (run id
    `real-train`), results folder and MLLOG path (whose folder did not exist before)."""
    import fcntl
    import subprocess

    from helpers import run_main

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "tiny_run"
    log = folder / "logs" / "run.mllog"
    with open(shared / "tiny_run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "returncode").exists():
            folder.mkdir(exist_ok=True)
            proc = run_main(
                *TINY,
                "--train_examples=32",  # 2 epochs of 2 steps: Eq. 6 needs a completed epoch
                "--eval_every_epochs=1",
                f"--results_dir={folder}/r",
                "--run_name=real-train",
                f"--mllog={log}",
                "--submission_org=Test Org",
                "--submission_platform=8 CPU devices",
                "--submission_status=onprem",
            )
            (folder / "stdout").write_text(proc.stdout)
            (folder / "stderr").write_text(proc.stderr)
            (folder / "returncode").write_text(str(proc.returncode))
    proc = subprocess.CompletedProcess(
        "hpcai_jax.main",
        int((folder / "returncode").read_text()),
        (folder / "stdout").read_text(),
        (folder / "stderr").read_text(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads(Path(folder / "r" / "real-train.json").read_text())
    return SimpleNamespace(proc=proc, record=record, results=folder / "r", mllog=log)


# The files that take longest, longest first: xdist's workers take whole files in collection
# order, so starting the long ones first keeps one worker from finishing a long file alone at
# the end (longest-first scheduling). Measured by .ci/run's --durations; order only, no skips.
LONGEST_FIRST = [
    "test_acceptance.py",
    "test_reliability.py",
    "test_multiprocess.py",
    "test_member_independence.py",
    "test_checkpoint_fallback.py",
    "test_watchdog.py",
    "test_interrupt.py",  # SIGINT at each start-up phase: 61 s alone (issue 66's profile)
    "test_evaluate_scale.py",
    "test_train_step.py",
    "test_member_map.py",
    "test_sweep.py",
    "test_extreme_weather.py",
    "test_step_path.py",  # 42 s of test-seconds in issue 66's fresh-clone run
    "test_model_parallel.py",
    "test_flops_crosscheck.py",
    "test_loss_scale.py",
    "test_int8.py",
    "test_faster_rcnn.py",
    "test_report.py",
    "test_data.py",
]


# The tiers (CONTRIBUTING.md, Tests): the inner loop, `pytest -m "not slow and not
# multiprocess"`, starts no Python or shell process and compiles no whole model. A test that
# does is marked in its file (`slow`, or `multiprocess` for a job of several JAX processes); a
# test that reads the shared CLI run (`tiny_run`, directly or through a fixture) is `slow` here.
TIERS = ("slow", "multiprocess")
SHELLS = {"bash", "sh", "dash", "zsh"}


def pytest_configure(config):
    """With $HPCAI_JAX_TEST_COMPILE_LOG: every XLA compile of this process (a persistent cache
    hit included, as JAX times it), with its test and function, one JSON line each."""
    if not COMPILE_LOG:
        return
    import jax

    def logged(event: str, seconds: float, **kwargs) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0]
            line = {"test": test, "function": kwargs.get("fun_name", ""), "seconds": seconds}
            with open(COMPILE_LOG, "a") as f:
                f.write(json.dumps(line) + "\n")

    jax.monitoring.register_event_duration_secs_listener(logged)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects
def pytest_collection_modifyitems(items):
    for item in items:
        if "tiny_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: order kept within


def pytest_terminal_summary(terminalreporter, config):
    """With --durations (.ci/run), the test-seconds of the slowest files too (set-up, call and
    tear-down, module fixtures included): what LONGEST_FIRST's order is measured by."""
    if not config.option.durations:
        return
    seconds: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) and hasattr(report, "duration"):
                path = report.nodeid.split("::")[0]
                seconds[path] = seconds.get(path, 0.0) + report.duration
    slowest = sorted(seconds.items(), key=lambda kv: -kv[1])[:12]
    terminalreporter.write_sep("=", f"slowest {len(slowest)} files (test-seconds)")
    for path, s in slowest:
        terminalreporter.write_line(f"{s:8.1f}s {path}")


def starts_a_process(args) -> str | None:
    """The program of a command if it is a Python or shell process (the CLI, a tool of ours, a
    launch or benchmark script), else None: other programs (git, nvidia-smi, ps) cost little."""
    import shlex
    import sys

    argv = shlex.split(args) if isinstance(args, str) else [str(a) for a in args]
    if not argv:
        return None
    program = os.path.basename(argv[0])
    if (
        argv[0] == sys.executable
        or program.startswith("python")
        or program in SHELLS
        or program.endswith((".sh", ".sbatch", ".py"))
    ):
        return program
    try:  # a script run by its #! line (a fake tool the test wrote)
        with open(argv[0], "rb") as f:
            first = f.readline(200)
    except OSError:
        return None
    interpreter = first[2:].split()[:2] if first.startswith(b"#!") else []
    if any(os.path.basename(w.decode()).startswith(("python", *SHELLS)) for w in interpreter):
        return program
    return None


def process_guard(item):
    """Patches subprocess.Popen so that an unmarked test (its fixtures included) fails at the
    moment it would start a Python or shell process, naming it; returns the undo."""
    import subprocess

    if any(item.get_closest_marker(name) for name in TIERS):
        return lambda: None
    execute = subprocess.Popen._execute_child

    def guarded(popen, args, *rest, **kw):
        program = starts_a_process(args)
        if program is not None:
            pytest.fail(
                f"{item.nodeid} starts a process ({program}) but is not marked "
                f"{' or '.join(TIERS)} (tests/conftest.py, CONTRIBUTING.md)",
                pytrace=False,
            )
        return execute(popen, args, *rest, **kw)

    subprocess.Popen._execute_child = guarded
    return lambda: setattr(subprocess.Popen, "_execute_child", execute)


def _handlers_left(before: dict) -> str:
    """Puts back SIGINT's and SIGTERM's handlers as `before` holds them; names those that were
    not ("" when none)."""
    import signal

    left = {s: h for s in before if (h := signal.getsignal(s)) is not before[s]}
    for s in left:
        signal.signal(s, before[s])
    return ", ".join(f"{signal.Signals(s).name}: {h!r}" for s, h in left.items())


def _handlers() -> dict:
    import signal

    return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}


@pytest.fixture(scope="module", autouse=True)
def signal_handlers_kept_by_the_module(request):
    """The same across a test file, its module fixtures included (set up before any test's own
    check): what a file leaves behind is put back, with a warning naming the file."""
    import warnings

    before = _handlers()
    yield
    if named := _handlers_left(before):
        warnings.warn(f"{request.node.nodeid} left signal handlers behind ({named})", stacklevel=1)


@pytest.fixture(autouse=True)
def signal_handlers_kept(request):
    """A test leaves SIGINT's and SIGTERM's handlers as it found them: one left behind made a
    later test in the same worker (whichever file followed it there) see no KeyboardInterrupt.
    A leak is put back, and fails the test that left it, naming the handler."""
    before = _handlers()
    yield
    if named := _handlers_left(before):
        pytest.fail(f"{request.node.nodeid} left signal handlers behind ({named})", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    undo = process_guard(item)  # over the test's setup (its fixtures), call and teardown
    try:
        yield
    finally:
        undo()
