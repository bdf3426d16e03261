"""The data directory's side of the check (docs/node_check.md, Data): how fast this host reads the
configured data set's files, against what the measured step consumes, and whether the limit on
open files allows what a run of that data set keeps open (data/open_files.py's rule).

The read is a sample of the set's files, each read once from its start in large chunks for a
bounded time, with the kernel asked first to drop the file from its page cache
(posix_fadvise DONTNEED), so that a file read a minute ago does not measure memory; a network
file system may keep its own cache, which the note cannot rule out.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from hpcai_jax.data import open_files
from hpcai_jax.nodecheck.budget import Allotment
from hpcai_jax.nodecheck.rows import FAIL, PASS, WARN, Row, judge, not_judged

# Data sets generated in the process: nothing to read, no files held.
GENERATED = ("synthetic", "friedman1", "synthetic_climate")
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # data/fashion_mnist.py's default
CHUNK = 8 << 20
MAX_READ_S = 10.0  # enough for a stable figure on a disk; the item's share may be less
MAX_FILES = 64  # files sampled, spread over the set
EVAL_SPLITS = ("validation", "test")  # data/tfds_source.py's order


def data_directory(dataset: str, data_dir: str) -> Path | None:
    """Where the run would read `dataset` from (None: generated, nothing to read); tfds sets
    under their name in the tfds data directory, as tensorflow-datasets lays them out."""
    if dataset in GENERATED:
        return None
    if dataset == "fashion_mnist":
        return Path(data_dir or FASHION_MNIST_DIR)
    if dataset == "extremeweather":
        return Path(data_dir)
    tfds_dir = data_dir or os.environ.get("TFDS_DATA_DIR", str(Path.home() / "tensorflow_datasets"))
    return Path(tfds_dir) / dataset.split("/")[0]


def tfds_splits(directory: Path) -> dict[str, dict]:
    """The newest prepared version's splits by name ({} where none): shards, examples and bytes,
    from its dataset_info.json (tensorflow-datasets' own description, read without it)."""
    infos = sorted(directory.glob("**/dataset_info.json"))
    if not infos:
        return {}
    try:
        info = json.loads(infos[-1].read_text())
    except (OSError, ValueError):
        return {}
    splits = {}
    for split in info.get("splits", []):
        lengths = [int(n) for n in split.get("shardLengths", [])]
        splits[split.get("name", "")] = {
            "shards": len(lengths),
            "examples": sum(lengths),
            "bytes": int(split.get("numBytes", 0)),
            "dir": infos[-1].parent,
        }
    return splits


def sample_files(directory: Path, limit: int = MAX_FILES) -> list[Path]:
    """Up to `limit` non-empty files under `directory`, spread evenly over their sorted names."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.stat().st_size > 0)
    step = max(1, len(files) // limit)
    return files[::step][:limit]


def read_rate(files: list[Path], seconds: float) -> tuple[int, float]:
    """(bytes, seconds) of reading `files` in turn, each from its start, until `seconds` pass
    or every file is read; each dropped from the page cache first where the kernel allows."""
    buffer = bytearray(CHUNK)
    total, start = 0, time.perf_counter()
    for path in files:
        with open(path, "rb", buffering=0) as f:
            if hasattr(os, "posix_fadvise"):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            while n := f.readinto(buffer):
                total += n
                if time.perf_counter() - start >= seconds:
                    return total, time.perf_counter() - start
    return total, time.perf_counter() - start


NR_OPEN_DEFAULT = 1 << 20  # Linux's fs.nr_open unless changed


def process_file_limit() -> float:
    """The most files a process can open whatever its rlimit (Linux's fs.nr_open): what an
    unlimited rlimit means."""
    try:
        return float(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        return float(NR_OPEN_DEFAULT)


def open_files_row(dataset: str, splits: dict[str, dict], workers: int) -> Row:
    """The limit on open files against what one process of a run of `dataset` holds. A soft
    limit below the need is no fault when the hard one allows it: the run raises it itself."""
    item = "open files limit"
    train = splits.get("train", {}).get("shards", 0)
    held_out = next((splits[s]["shards"] for s in EVAL_SPLITS if s in splits), 0)
    needed = open_files.files_needed(train, held_out, workers)
    ceiling = process_file_limit()
    soft, hard = (min(v, ceiling) for v in open_files.open_file_limits())
    besides = open_files.files_needed(0, 0, workers)  # the runtime's and the workers' own
    what = (
        f"{train} training + {held_out} held-out shards + {besides} besides"
        if train
        else f"no shards (--dataset={dataset}): {besides} besides"
    )
    note = f"soft {soft:g}, hard {hard:g}; a process of the run holds up to {needed} ({what})"
    if hard < needed:
        note += ": raise the hard limit (ulimit -Hn; nofile in /etc/security/limits.conf)"
        return Row(item, FAIL, hard, float(needed), "files", "data/open_files.py", note)
    if soft < needed:
        note += f"; the run raises its soft limit to {needed} itself"
    return Row(item, PASS, max(soft, float(needed)), float(needed), "files", "", note)


def data_rows(
    dataset: str,
    data_dir: str,
    workers: int,
    allotment: Allotment,
    step_examples_per_s: float | None,
) -> list[Row]:
    """The read bandwidth of the data directory (against the step's examples/s on this host ×
    bytes per example, where both are known) and the open-file limit."""
    item = "data read bandwidth"
    directory = data_directory(dataset, data_dir)
    if directory is None:
        return [
            not_judged(item, None, "B/s", f"--dataset={dataset} is generated: no files to read"),
            open_files_row(dataset, {}, workers),
        ]
    if not directory.is_dir():
        return [
            Row(item, WARN, note=f"{directory} does not exist (--dataset={dataset}, --data_dir)"),
            open_files_row(dataset, {}, workers),
        ]
    splits = tfds_splits(directory)
    train = splits.get("train")
    files = sample_files(train["dir"] if train else directory)
    seconds = min(MAX_READ_S, 0.8 * max(allotment.left_s(), 0.0))
    nbytes, took = read_rate(files, seconds)
    rate = nbytes / took if took > 0 else None
    note = f"{nbytes / 1e6:.0f} MB of {len(files)} files under {directory} in {took:.1f} s"
    per_example = train["bytes"] / train["examples"] if train and train["examples"] else None
    limit = open_files_row(dataset, splits, workers)
    if per_example is None or not step_examples_per_s:
        why = "no step rate" if per_example else "no per-example size (not a tfds set)"
        return [not_judged(item, rate, "B/s", f"{note}; not judged: {why}"), limit]
    needed = step_examples_per_s * per_example
    note += f"; the step reads {step_examples_per_s:.4g} examples/s x {per_example / 1e3:.0f} kB"
    return [
        judge(
            item,
            rate,
            needed,
            unit="B/s",
            source="step examples/s on this host x bytes per example (dataset_info.json)",
            pass_at=1.0,
            warn_at=0.0,
            note=note,
        ),
        limit,
    ]
