"""Flagfiles (hpcai_jax/flagfiles.py): absl's reading, with includes that work from any folder
and one line for a flagfile that cannot be read."""

from __future__ import annotations

import pytest
from absl import flags
from helpers import ROOT, assert_one_line_error, run_in_process

from hpcai_jax import flagfiles
from hpcai_jax.errors import UsageError

CONFIGS = sorted((ROOT / "configs").glob("*.flags"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_from_the_root_the_flags_are_absls(path, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = ["--seed=3", f"--flagfile=configs/{path.name}", "--steps=2"]
    assert flagfiles.expand(argv) == flags.FlagValues().read_flags_from_files(argv, False)


@pytest.mark.parametrize("name", ["ensemble_ablation.flags", "fashion_mnist_bagging.flags"])
def test_an_include_is_found_from_another_folder(name, tmp_path, monkeypatch):
    """Both include configs/quickstart.flags by a path relative to the repository's root."""
    monkeypatch.chdir(tmp_path)
    quickstart = flagfiles.expand([f"--flagfile={ROOT}/configs/quickstart.flags"])
    lines = flagfiles.expand([f"--flagfile={ROOT}/configs/{name}"])
    assert lines[: len(quickstart)] == quickstart and "--model=resnet_small" in lines
    with pytest.raises(flags.Error):  # absl alone: relative to the working directory only
        flags.FlagValues().read_flags_from_files([f"--flagfile={ROOT}/configs/{name}"], False)
    proc = run_in_process(f"--flagfile={ROOT}/configs/{name}", "--dry_run")
    assert proc.returncode == 0, proc.stderr


def test_an_unreadable_flagfile_is_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    proc = run_in_process("--flagfile=nope.flags")
    assert_one_line_error(proc, "--flagfile=nope.flags: cannot read it: No such file")
    assert "ERROR::" not in proc.stderr
    (tmp_path / "site.flags").write_text("# a site's flags\n--flagfile=gone.flags\n")
    with pytest.raises(UsageError, match=r"^--flagfile=gone.flags \(included by site.flags\)"):
        flagfiles.expand(["--flagfile=site.flags"])


def test_a_circular_include_is_skipped_as_absl_skips_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.flags").write_text("--seed=1\n--flagfile=b.flags\n")
    (tmp_path / "b.flags").write_text("--flagfile=a.flags\n// comment\n\n  --steps=2  \n")
    assert flagfiles.expand(["--flagfile=a.flags", "--", "--flagfile=x"]) == [
        "--seed=1",
        "--steps=2",
        "--",
        "--flagfile=x",
    ]
