"""`check --reevaluate` and `check --rerun_steps` (issue 35, docs/submission.md §3): the session's
tiny run keeps its weights; packed with them, they give the log's figures again and a re-run of
its flagfile its FLOPs per step. A quality raised to a count (which `check` alone passes) fails
--reevaluate naming the member; weights that are not the run's fail the digest; a clock scaled
within the peak (which `check` alone passes) fails --rerun_steps --same_system; bad input is one
line, exit 2. One package serves the module; the re-run and the re-evaluation of one flagfile
and one set of weights are done once and reused by the checks that follow."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import forge
import numpy as np
import pytest
from helpers import check_cli
from test_forgery import quality_raised_to_a_count, times_scaled_within_the_peak

from hpcai_jax import records
from hpcai_jax.run import kept_weights
from hpcai_jax.submission.__main__ import main

RUN = "real-train"


_cli = check_cli


@pytest.fixture(scope="module")
def package(tiny_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reevaluate") / "package"
    assert (
        main(["pack", str(tiny_run.results / f"{RUN}.json"), f"--out={out}", "--with_weights"]) == 0
    )
    return out


@pytest.fixture
def forged(package, tmp_path, capsys) -> forge.Forged:
    capsys.readouterr()
    return forge.copy_of(package, tmp_path, RUN)


def test_the_run_keeps_its_weights_and_logs_their_digest(tiny_run, package):
    kept = (
        tiny_run.results / f"{RUN}{kept_weights.SUFFIX}"
    )  # no --checkpoint_dir: beside the record
    line = next(
        json.loads(x[9:]) for x in tiny_run.mllog.read_text().splitlines() if "weights_digest" in x
    )
    assert line["metadata"]["path"] == str(kept) and line["metadata"]["kept"] == "beside the record"
    tree = kept_weights.load(package / f"{RUN}{kept_weights.SUFFIX}")
    assert kept_weights.digest(tree) == (line["value"], line["metadata"]["arrays"])
    assert kept_weights.digest(kept_weights.load(kept))[0] == line["value"]
    m = records.read(tiny_run.record).mesh.ensemble_size
    assert all(a.shape[0] == m for _, a in kept_weights.named(tree))  # stacked [M, ...]
    assert {name.split("/")[0] for name, _ in kept_weights.named(tree)} == {"params", "model_state"}


def test_reevaluate_and_a_rerun_give_the_runs_figures(package, tiny_run, capsys):
    code, out, err = _cli(capsys, "check", package, "--reevaluate", "--rerun_steps=2")
    assert (code, out[-1], err) == (0, "PASS", []), out
    record = records.read(tiny_run.record)
    q, per_step = record.quality, record.flops.per_step
    rerun, reevaluated = out[0], out[1]
    assert rerun.startswith(f"measured: run {RUN}: re-run for 2 steps on 8 cpu devices (the run's")
    assert f"flops.per_step {per_step:.6g} (the record's {per_step:.6g})" in rerun
    assert reevaluated.startswith(f"measured: run {RUN}: re-evaluated {RUN}.weights on 8 cpu")
    figures = ", ".join(f"{v:.6g}" for v in q.members)
    assert f"ensemble {q.ensemble:.6g} (the log's {q.ensemble:.6g})" in reevaluated
    assert f"members [{figures}] (the record's [{figures}])" in reevaluated


def test_a_quality_raised_to_a_count_fails_reevaluate_naming_the_member(forged, tiny_run, capsys):
    quality_raised_to_a_count(forged)  # counts of the 300 examples: check alone passes them
    code, out, err = _cli(capsys, "check", forged.folder, "--reevaluate")
    assert code == 1 and not err, out
    real = records.read(tiny_run.record).quality
    how = f"re-evaluated from {RUN}.weights on 8 cpu devices"
    assert (
        f"run {RUN}: {RUN}.mllog eval_accuracy 0.95 (the final evaluation) "
        f"!= {real.ensemble:.6g} {how}" in "\n".join(out)
    )
    for i, member in enumerate(real.members):
        line = f"run {RUN}: {RUN}.json quality.members[{i}] 0.95 != {member:.6g} {how}"
        assert any(x.startswith(line) and "± 1 of the 300 held-out examples" in x for x in out)


def test_weights_that_are_not_the_runs_fail_the_digest(forged, capsys):
    folder = forged.folder / f"{RUN}{kept_weights.SUFFIX}"
    tree = kept_weights.load(folder)
    name, first = kept_weights.named(tree)[0]
    first[(0,) * first.ndim] += np.asarray(1e-3, first.dtype)  # one value of one member
    shutil.rmtree(folder)
    kept_weights.save(folder, tree)
    code, out, err = _cli(capsys, "check", forged.folder, "--reevaluate")
    assert code == 1 and not err
    digest = forge.Forged(forged.folder, RUN).one("weights_digest")["value"]
    assert [line for line in out if "sha256" in line] == [
        f"run {RUN}: {RUN}.weights sha256 {kept_weights.digest(tree)[0]} != {RUN}.mllog "
        f"weights_digest {digest}: not the weights the run kept"
    ]


def test_a_clock_scaled_within_the_peak_fails_the_same_system_rerun(forged, capsys):
    times_scaled_within_the_peak(forged)  # 2.5 to 8 times faster, MFU 0.9: check alone passes
    code, out, err = _cli(capsys, "check", forged.folder, "--rerun_steps=2", "--same_system")
    assert code == 1 and not err, out
    failures = [line for line in out if "timing.step_s.median_s" in line]
    assert len(failures) == 1 and failures[0].startswith(f"run {RUN}: {RUN}.json timing.step_s")
    assert "by more than --same_system allows (the re-run at most 25% slower" in failures[0]


def test_bad_input_is_one_line_exit_2(package, tiny_run, tmp_path, capsys):
    def refused(*argv, names: str) -> None:
        code, out, err = _cli(capsys, "check", *argv)
        assert (code, out, len(err)) == (2, [], 1), (out, err)
        assert err[0].startswith("hpcai_jax.submission: error: ") and names in err[0], err

    refused(package, "--rerun_steps=0", names="--rerun_steps=0: expected a number of steps >= 1")
    refused(package, "--same_system", names="--same_system: only with --rerun_steps")
    # A bad value is named before the package is read, even where there is none.
    refused(tmp_path, "--rerun_steps=0", names="--rerun_steps=0: expected a number of steps")
    refused(package, f"--data_dir={tmp_path}", names=f"--data_dir={tmp_path}: only with")
    bare = tmp_path / "bare"
    shutil.copytree(package, bare, ignore=shutil.ignore_patterns(f"*{kept_weights.SUFFIX}"))
    refused(bare, "--reevaluate", names=f"{bare / RUN}.weights: missing: --reevaluate needs")
    train_only = tmp_path / "train-only"  # Fashion-MNIST without its held-out split
    train_only.mkdir()
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        (train_only / name).symlink_to(Path("/usr/share/datasets/fashion-mnist") / name)
    refused(
        package,
        "--reevaluate",
        f"--data_dir={train_only}",
        names=f"--data_dir={train_only}: Fashion-MNIST file t10k-images-idx3-ubyte.gz not found",
    )
    # pack --with_weights of a run whose log names no weights: nothing written.
    runs = tmp_path / "runs"
    runs.mkdir()
    log = runs / "run.mllog"
    log.write_text(
        "".join(
            x + "\n" for x in tiny_run.mllog.read_text().splitlines() if "weights_digest" not in x
        )
    )
    (runs / f"{RUN}.json").write_text(json.dumps(dict(tiny_run.record, mllog=str(log))))
    code, out, err = _cli(
        capsys, "pack", runs / f"{RUN}.json", f"--out={tmp_path / 'p'}", "--with_weights"
    )
    assert (code, out, len(err)) == (2, [], 1) and "has no weights_digest" in err[0], err
    assert not (tmp_path / "p").exists()
