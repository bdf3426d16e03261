"""The open-file rule (docs/reliability.md, Data at scale): what a tfds run keeps open per
process, the soft limit raised to it, and one line when the hard limit is too low."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import ROOT, colour_image, three_class_image_info

from hpcai_jax import config as C
from hpcai_jax.data import open_files
from hpcai_jax.data.open_files import BASE, PER_WORKER, files_needed
from hpcai_jax.errors import UsageError


def test_files_needed_counts_the_most_demanding_process(monkeypatch):
    # ImageNet: 1,024 training and 64 validation shards; 7 workers per process.
    assert files_needed(1024, 64, 7) == 1024 + 64 + BASE + 7 * PER_WORKER
    assert files_needed(1024, 64, 7) > 1024  # a common soft limit: it must be raised
    # --data_workers=0: the training process's own reader opens the training shards again.
    assert files_needed(1024, 64, 0) == 2 * 1024 + 64 + BASE
    monkeypatch.setattr(open_files, "_cores", lambda: 12)  # the default: at most one per core
    assert files_needed(1024, 64, -1) == files_needed(1024, 64, 12)


def run_limited(code: str, soft: int, hard: int) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter started with those open-file limits."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
    )


@pytest.mark.slow
def test_the_soft_limit_is_raised_for_the_process_and_what_it_starts():
    result = run_limited(
        """
        import json, os, subprocess, sys
        from hpcai_jax.data.open_files import ensure_open_file_limit, open_file_limits

        def open_many(n):  # True when n more files could be opened
            fds = []
            try:
                for _ in range(n):
                    fds.append(os.open(os.devnull, os.O_RDONLY))
                return True
            except OSError:
                return False
            finally:
                for fd in fds:
                    os.close(fd)

        before = open_file_limits(), open_many(1500)
        now = ensure_open_file_limit(1600, "--dataset=x")
        child = subprocess.run(
            [sys.executable, "-c", "import resource as r; print(r.getrlimit(r.RLIMIT_NOFILE)[0])"],
            capture_output=True, text=True, check=True,
        ).stdout
        print(json.dumps([before, now, open_file_limits(), open_many(1500), int(child)]))
        """,
        soft=256,
        hard=2048,
    )
    assert result.returncode == 0, result.stderr
    before, now, after, opened, child = json.loads(result.stdout)
    assert before == [[256, 2048], False]  # the fault: 1,500 files do not open
    assert now == 1600 and after == [1600, 2048] and opened
    assert child == 1600  # the data workers inherit it


@pytest.mark.slow
def test_a_hard_limit_too_low_ends_in_one_line():
    result = run_limited(
        """
        import sys
        from hpcai_jax.data.open_files import ensure_open_file_limit
        from hpcai_jax.errors import tool_main

        what = "--dataset=imagenet2012 (1024 training and 64 held-out shards)"
        sys.exit(tool_main("hpcai_jax", lambda argv: ensure_open_file_limit(2000, what), []))
        """,
        soft=256,
        hard=512,
    )
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0] == (
        "hpcai_jax: error: --dataset=imagenet2012 (1024 training and 64 held-out shards) keeps "
        "up to 2000 files open in one process, but the hard limit on open files is 512 "
        "(ulimit -Hn): raise it to at least 2000 (nofile in /etc/security/limits.conf; under "
        "SLURM, LimitNOFILE= of the slurmd service)"
    )


def test_opening_a_tfds_set_checks_the_limit_for_its_shards(tmp_path, monkeypatch):
    """The call site: open_datasets asks for its splits' shards (1 and 1 here), and a hard
    limit below the need ends the run before any worker starts."""
    import tensorflow_datasets as tfds

    from hpcai_jax.data.datasets import open_datasets

    class OpenFilesImages(tfds.core.GeneratorBasedBuilder):
        VERSION = tfds.core.Version("1.0.0")

        def _info(self):
            return three_class_image_info(self, "png")

        def _split_generators(self, dl_manager):
            return {"train": self._generate_examples(6), "test": self._generate_examples(3)}

        def _generate_examples(self, n):
            rng = np.random.default_rng(n)
            for i in range(n):
                yield i, {"image": colour_image(rng, (8, 8, 3), i % 3, "PNG"), "label": i % 3}

    OpenFilesImages(data_dir=str(tmp_path), file_format="array_record").download_and_prepare()
    config = C.DataConfig(
        dataset="open_files_images", data_dir=str(tmp_path), image_size=8, data_workers=3
    )
    asked = []
    monkeypatch.setattr(open_files, "ensure_open_file_limit", lambda n, what: asked.append(n))
    open_datasets(config)
    assert asked == [files_needed(1, 1, 3)]

    monkeypatch.undo()
    low = files_needed(1, 1, 3) - 1
    monkeypatch.setattr(open_files, "_raw_limits", lambda: (low, low))
    with pytest.raises(UsageError, match=r"^--dataset=open_files_images \(1 training and 1 held"):
        open_datasets(config)
