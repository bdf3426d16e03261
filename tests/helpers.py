"""Shared test fixtures: small configurations and a runner for `python -m hpcai_jax.main`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from hpcai_jax import config as C

_LOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d")


def assert_one_line_error(proc, *fragments, code: int = 2):
    """Exit `code` (2: bad input; 65: bad data), one line on stderr besides absl's log lines,
    naming every fragment."""
    assert proc.returncode == code, proc.stderr[-2000:]
    # Progress log lines (absl's "I1202 10:58:23.335358 ..." prefix) may precede the error.
    lines = [
        line for line in proc.stderr.splitlines() if line.strip() and not _LOG_LINE.match(line)
    ]
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith("hpcai_jax: error: ")
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


ROOT = Path(__file__).resolve().parent.parent


def tiny_config(**overrides) -> C.RunConfig:
    """Fashion-MNIST, resnet_small, a few steps: the smallest real training run."""
    parts = {
        "mesh": C.MeshConfig(ensemble_size=4, members_per_device=1, parallel_degree=2),
        "data": C.DataConfig(train_examples=512, eval_examples=200),
        "train": C.TrainConfig(batch_size=16, steps=3, eval_batch_size=100),
        "optim": C.OptimConfig(lr_schedule="constant"),
        "results": C.ResultsConfig(target_quality=0.9),  # Fashion-MNIST has no official target
    }
    parts.update(overrides)
    return C.RunConfig(**parts).validate()


_ALONE: dict[int, tuple] = {}  # id(setup) → (setup, jitted init, jitted step): one compile each


def train_alone(setup, member: int, steps: int):
    """Member `member` of `setup` trained alone for `steps` steps on one device: plain jit,
    statistics over its whole batch, its own bootstrap indices (through the source's training
    read, keys included, where it has one). The reference the sharded ensemble must equal.
    Every member of a setup shares the two compiled functions."""
    import jax

    from hpcai_jax.data.workers import augment_keys
    from hpcai_jax.engine.state import init_member, member_keys
    from hpcai_jax.engine.step import member_train_step

    if id(setup) not in _ALONE:
        wl, tx = setup.workload, setup.tx
        _ALONE[id(setup)] = (
            setup,
            jax.jit(lambda k: init_member(wl, tx, k)),
            jax.jit(lambda s, b: member_train_step(wl, tx, None, s, b)),
        )
    _, init, step = _ALONE[id(setup)]
    state = init(member_keys(setup.config.train.seed, setup.layout.ensemble_size)[member])
    source = setup.datasets.train
    train_reader = getattr(source, "train_reader", None)
    for t in range(steps):
        indices = setup.sampler.step_indices(member, t)
        if train_reader is None:
            batch = source.read(indices)
        else:
            rows = ((member, member + 1), (0, setup.sampler.batch_size))
            batch = train_reader()(indices, augment_keys(setup.sampler, t, rows).reshape(-1, 4))
        state, *_ = step(state, batch)
    return state


class FakeClock:
    """A clock only the test moves. Call it where code takes a clock function, or put it where
    code reads the `time` module (monkeypatch `module.time`): its `perf_counter` and
    `monotonic` read it too."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    perf_counter = monotonic = __call__

    def advance(self, seconds: float) -> None:
        self.now += seconds


def subprocess_env(devices: int = 8, **extra: str) -> dict[str, str]:
    """The environment of a JAX subprocess: the suite's compile flags and cache (conftest), with
    `devices` forced CPU devices."""
    from conftest import FAST_COMPILE

    env = dict(os.environ, JAX_PLATFORMS="cpu", **extra)
    env["XLA_FLAGS"] = f"{FAST_COMPILE} --xla_force_host_platform_device_count={devices}"
    return env


def run_main(*args: str, devices: int = 8, timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs the CLI in a fresh process with `devices` forced CPU devices."""
    env = subprocess_env(devices)
    return subprocess.run(
        [sys.executable, "-m", "hpcai_jax.main", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_in_process(*args: str) -> subprocess.CompletedProcess:
    """The CLI's main in this process, as `python -m hpcai_jax.main ARGS` runs it: flags parsed
    by the CLI's own parser, exit code from its SystemExit, stdout and stderr (absl's log lines
    included, in absl's format) captured. For the command-line contract (one-line errors, exit
    codes) without paying a JAX import and a compile per case; an exception that escapes main
    (which would be a traceback on the command line) propagates to the test."""
    import contextlib
    import io
    import logging as std_logging

    from absl import logging

    from hpcai_jax import flags as hflags
    from hpcai_jax import main as cli

    out, err = io.StringIO(), io.StringIO()
    handler = std_logging.StreamHandler(err)
    handler.setFormatter(logging.PythonFormatter())
    absl_logger = logging.get_absl_logger()
    absl_logger.addHandler(handler)
    verbosity = logging.get_verbosity()
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            hflags.FLAGS.unparse_flags()
            argv = cli._parse(["hpcai_jax.main", *args])
            logging.set_verbosity(logging.INFO)  # as the command line logs (parsing resets it)
            cli.main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        hflags.FLAGS.unparse_flags()
        absl_logger.removeHandler(handler)
        logging.set_verbosity(verbosity)
    return subprocess.CompletedProcess(
        ["hpcai_jax.main", *args], code, out.getvalue(), err.getvalue()
    )


def colour_image(rng, shape: tuple[int, int, int], label: int, image_format: str = "JPEG") -> bytes:
    """An encoded image whose class is its bright colour channel: learnable, and it survives any
    crop. The small tfds sets the tests build are made of these."""
    import io

    import numpy as np
    from PIL import Image

    image = rng.integers(0, 80, shape, dtype=np.uint8)
    image[..., label] += 150
    buf = io.BytesIO()
    options = {"quality": 90} if image_format == "JPEG" else {}
    Image.fromarray(image).save(buf, format=image_format, **options)
    return buf.getvalue()


def three_class_image_info(builder, encoding_format: str = "jpeg"):
    """The DatasetInfo of those sets: an encoded RGB image and one of 3 labels."""
    import tensorflow_datasets as tfds

    return tfds.core.DatasetInfo(
        builder=builder,
        features=tfds.features.FeaturesDict(
            {
                "image": tfds.features.Image(
                    shape=(None, None, 3), encoding_format=encoding_format
                ),
                "label": tfds.features.ClassLabel(num_classes=3),
            }
        ),
    )


def shm_blocks() -> set[str]:
    """Python's shared-memory blocks on this machine (grain's among them): names psm_*."""
    return {name for name in os.listdir("/dev/shm") if name.startswith("psm_")}


def shm_lasting(names: set[str], holds, timeout_s: float = 60.0) -> set[str]:
    """Those of `names` still in /dev/shm once `holds(them)` is true, else after timeout_s.
    Tests running beside this one (other pytest workers) have blocks of their own in flight
    for a moment, and they go; a leaked block stays, so a leak still fails."""
    deadline = time.monotonic() + timeout_s
    while not holds(left := names & shm_blocks()) and time.monotonic() < deadline:
        time.sleep(0.5)  # a poll: a block's unlink by another process has no event to wait on
    return left


def packs_and_passes_check(record_path: Path, folder: Path) -> bool:
    """A run's record packed into `folder`/package (an empty site system.json) passes
    `python -m hpcai_jax.submission check`: what a resumed run after a fault must still do."""
    from hpcai_jax.submission.__main__ import main as submission

    system = folder / "site.json"
    system.write_text("{}")
    package = folder / "package"
    packed = submission(["pack", str(record_path), f"--out={package}", f"--system_json={system}"])
    return packed == 0 and submission(["check", str(package)]) == 0


def check_cli(capsys, *argv) -> tuple[int, list[str], list[str]]:
    """`python -m hpcai_jax.submission ARGV` in process: the exit code, stdout's lines less
    check's "checked ..." verdict lines, stderr's lines."""
    from hpcai_jax.submission.__main__ import main as submission

    code = submission([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, [x for x in out.splitlines() if not x.startswith("checked ")], err.splitlines()


def plan_for(mesh, mapping, members_per_device: int):
    """A step plan (engine/plan.py) on `mesh` for a step built outside setup: its layout read off
    the mesh, a flat float32 all-reduce."""
    from hpcai_jax.axes import DATA, ENSEMBLE, MODEL
    from hpcai_jax.engine.collectives import AllreducePlan
    from hpcai_jax.engine.mesh import MeshLayout
    from hpcai_jax.engine.plan import StepPlan

    shape = mesh.shape
    p = shape[DATA]
    layout = MeshLayout(
        ensemble_size=shape[ENSEMBLE] * members_per_device,
        members_per_device=members_per_device,
        parallel_degree=p,
        num_devices=mesh.devices.size,
        model_parallel=shape.get(MODEL, 1),
    )
    return StepPlan(mesh, layout, mapping, AllreducePlan("flat", "float32", p, p))


def peaks_at_start(dtype: str, bandwidth: tuple[float, str] | None, run_id: str = "") -> dict:
    """The record's `peak_flops` as a run's start takes it: the probes "peaks" and "stream" of
    hpcai_jax/run/probes.py, through their stores, for a model of `dtype`."""
    import types

    from hpcai_jax.run import probes

    model = types.SimpleNamespace(dtype=dtype)
    setup = types.SimpleNamespace(config=types.SimpleNamespace(model=model))
    two = tuple(p for p in probes.PROBES if p.name in ("peaks", "stream"))
    return probes.run(probes.Measuring(setup, None, None, bandwidth, run_id), two).peaks
