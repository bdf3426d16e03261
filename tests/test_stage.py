"""`python -m hpcai_jax.data.stage SRC DST`: the node-local copy of tfds data (docs/reliability.md,
Data at scale). Byte equality, what is and is not copied, idempotence, resumption, the checksum
re-copy, the lock between concurrent stages, and each bad SRC or DST."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import ROOT, colour_image, three_class_image_info

from hpcai_jax.data import stage
from hpcai_jax.locks import PathLock

SET = "foo/1.0.0"  # the prepared set's version directory in the fake tree
RATE = re.compile(r": \d+ of \d+ files, .+ of .+ \(\d+%\), [\d.]+ MB/s, ETA \d+m\d\ds$")
FINAL = re.compile(r": copied (\d+) files, \d+ bytes \(.+\) in [\d.]+ s, [\d.]+ MB/s; ")


def make_tree(src: Path) -> dict[str, bytes]:
    """A tfds-like data directory: one prepared set (a shard, nested files, its info), tfds's
    download cache and a build in progress (neither staged); the files a stage must copy."""
    rng = np.random.default_rng(0)
    files = {
        f"{SET}/foo-train.array_record-00000-of-00001": rng.bytes(300_000),
        f"{SET}/sub/deeper/extra.json": b'{"a": 1}\n',
        f"{SET}/features.json": b"{}\n",
        f"{SET}/dataset_info.json": b'{"name": "foo"}\n',
    }
    others = {
        "downloads/manual/archive.tar": b"not staged",
        "bar/incomplete.ABC_1.0.0/dataset_info.json": b"{}",
        "bar/2.0.0.incompleteXYZ/dataset_info.json": b"{}",
    }
    for rel, data in {**files, **others}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    return files


def tree_of(dst: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(dst)): p.read_bytes()
        for p in sorted(dst.rglob("*"))
        if p.is_file() and p.name != stage.MANIFEST
    }


def run_stage(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hpcai_jax.data.stage", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        **kwargs,
    )


def copied(output: str) -> int:
    """The number of files the final line says were copied."""
    if "nothing to copy" in output:
        assert "copied 0 files" in output
        return 0
    (count,) = FINAL.findall(output)
    return int(count)


@pytest.mark.slow
def test_stage_copies_the_prepared_sets_byte_for_byte_and_then_nothing(tmp_path):
    files = make_tree(tmp_path / "src")
    dst = tmp_path / "node" / "tfds"
    first = run_stage(tmp_path / "src", dst, "--progress_s=0", "--threads=2")
    assert first.returncode == 0, first.stderr
    assert tree_of(dst) == files  # and neither downloads/ nor the builds in progress
    lines = first.stdout.splitlines()
    assert sum(bool(RATE.search(line)) for line in lines) == len(files)  # one per file here
    assert copied(lines[-1]) == len(files) and lines[-1].startswith(str(dst))
    assert sorted(os.listdir(dst)) == [stage.MANIFEST, "foo"]  # no lock, no partial file
    stamps = {p: p.stat().st_mtime_ns for p in dst.rglob("*")}

    second = run_stage(tmp_path / "src", dst)
    assert second.returncode == 0, second.stderr
    assert copied(second.stdout) == 0 and "4 files" in second.stdout
    assert {p: p.stat().st_mtime_ns for p in dst.rglob("*")} == stamps  # not even the manifest


def test_an_interrupted_or_damaged_copy_is_completed(tmp_path):
    files = make_tree(tmp_path / "src")
    dst = tmp_path / "dst"
    assert stage.stage(tmp_path / "src", dst, out=lambda line: None) == len(files)
    shard = dst / next(iter(files))
    stamp = shard.stat().st_mtime_ns
    with open(shard, "r+b") as f:  # damaged since, its time stamp kept: the size tells
        f.truncate(1000)
    os.utime(shard, ns=(stamp, stamp))
    partial = dst / SET / ("features.json" + stage._PARTIAL)  # left by a killed stage
    partial.write_bytes(b"{")
    source_info = tmp_path / "src" / SET / "dataset_info.json"  # the source prepared again
    files[f"{SET}/dataset_info.json"] = b'{"name": "foo", "v": 2}\n'
    source_info.write_bytes(files[f"{SET}/dataset_info.json"])
    lines = []
    assert stage.stage(tmp_path / "src", dst, out=lines.append) == 2
    assert tree_of(dst) == files and not partial.exists()
    assert "removed 1 partial file(s)" in lines[0]


def test_a_copy_whose_checksum_differs_is_made_again_then_fails(tmp_path, monkeypatch):
    files = make_tree(tmp_path / "src")
    real, reads = stage.file_sha256, []

    def once_wrong(path):
        reads.append(Path(path).name)
        return "0" * 64 if len(reads) == 1 else real(path)

    monkeypatch.setattr(stage, "file_sha256", once_wrong)
    order = []
    stage.stage(tmp_path / "src", tmp_path / "dst", threads=1, out=order.append)
    assert tree_of(tmp_path / "dst") == files
    assert len(reads) == len(files) + 1  # the first file was read back twice
    assert reads[-1].startswith(
        "dataset_info.json"
    )  # last: a partial stage is no prepared set to tfds

    monkeypatch.setattr(stage, "file_sha256", lambda path: "0" * 64)
    with pytest.raises(stage.CopyFailed, match=r"2 tries") as failed:
        stage.stage(tmp_path / "src", tmp_path / "again", out=lambda line: None)
    assert failed.value.exit_code == 1
    assert tree_of(tmp_path / "again") == {}  # no file that looks complete, no partial one


@pytest.mark.slow
def test_concurrent_stages_on_one_node_copy_once(tmp_path):
    """Both start while a third holds DST's lock (so both wait); when it is released, exactly
    one copies and the other finds the copy complete. Without the lock both would copy."""
    files = make_tree(tmp_path / "src")
    dst = tmp_path / "dst"
    dst.mkdir()
    holder = PathLock(str(dst / stage._LOCK))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "hpcai_jax.data.stage", tmp_path / "src", dst],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for proc in procs:  # each is waiting
            assert "waiting for it" in proc.stdout.readline()
    finally:
        holder.release()
    outputs = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert sorted(copied(out) for out, _ in outputs) == [0, len(files)]
    assert tree_of(dst) == files


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "src", "dst", "message"),
    [
        (None, "missing", "dst", "SRC={src}: not found; expected a tensorflow-datasets"),
        ("file", "file", "dst", "SRC={src}: not a directory"),
        ("empty", "empty", "dst", "SRC={src}: no prepared data set inside"),
        ("tree", "src", "src/foo/staged", "DST={dst}: inside SRC={src}"),
        ("tree", "src", "src", "DST={dst}: inside SRC={src}"),
        ("tree", "src", "file", "DST={dst}: not a directory"),
        ("tree", "src", "file/sub", "DST={dst}: cannot create the directory (Not a directory)"),
    ],
)
def test_a_bad_src_or_dst_ends_in_one_line(tmp_path, make, src, dst, message):
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty" / "downloads").mkdir(parents=True)
    if make == "tree":
        make_tree(tmp_path / "src")
    src, dst = tmp_path / src, tmp_path / dst
    before = sorted(tmp_path.rglob("*"))
    result = run_stage(src, dst)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("hpcai_jax.data.stage: error: ")
    assert message.format(src=src, dst=dst) in lines[0]
    assert sorted(tmp_path.rglob("*")) == before  # nothing created, nothing removed


def test_not_enough_space_is_refused_before_copying(tmp_path, monkeypatch, capsys):
    make_tree(tmp_path / "src")
    dst = tmp_path / "dst"
    monkeypatch.setattr(stage.shutil, "disk_usage", lambda path: SimpleNamespace(free=0))
    assert stage.main([str(tmp_path / "src"), str(dst)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and f"DST={dst}: not enough free space: 4 files need 300.0 kB" in err[0]
    assert not dst.exists()  # made for the stage, removed with its lock: no trace


def test_a_staged_tfds_set_reads_as_the_original(tmp_path):
    """A real array_record set, built here: tfds opens the copy and reads the same records."""
    import tensorflow_datasets as tfds

    class StageImages(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return three_class_image_info(self, "png")

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(12, 0), "test": self._generate_examples(6, 1)}

        def _generate_examples(self, n, seed):
            rng = np.random.default_rng(seed)
            for i in range(n):
                yield i, {"image": colour_image(rng, (8, 8, 3), i % 3, "PNG"), "label": i % 3}

    src = tmp_path / "tensorflow_datasets"
    StageImages(data_dir=str(src), file_format="array_record").download_and_prepare()
    dst = tmp_path / "local"
    assert stage.stage(src, dst, out=lambda line: None) == 4  # 2 shards, features, info

    def records(data_dir):
        source = tfds.data_source("stage_images", split="train", data_dir=str(data_dir))
        return [(r["label"], r["image"].tobytes()) for r in source]

    assert records(dst) == records(src)
