"""docs/example_ranking/: the shipped list is what `python -m hpcai_jax.ranking` makes of the
shipped packages, byte for byte (regenerate.sh's last command, on the suite's 8 CPU devices:
centre-b's re-evaluation names the devices it ran on), and the packages are what the page says.
Slow: check runs the MLLOG compliance checker in a subprocess per run."""

from __future__ import annotations

import json

import pytest
from helpers import ROOT

from hpcai_jax.ranking.__main__ import main

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "docs" / "example_ranking"
PACKAGES = EXAMPLE / "packages"


def _files(folder):
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_the_shipped_list_is_rebuilt_byte_for_byte(tmp_path, capsys):
    out = tmp_path / "list"
    argv = [str(PACKAGES / n) for n in ("centre-d-edited", "centre-c", "centre-b", "centre-a")]
    assert main([*argv, f"--out={out}", "--date=2026-12-07", "--cpu_examples"]) == 0
    said = capsys.readouterr().out
    assert "centre-d-edited: not listed: run cpu-c: cpu-c.json metrics.vflops_per_s" in said
    built, shipped = _files(out), _files(EXAMPLE / "list")
    differ = sorted(n for n in built.keys() | shipped.keys() if built.get(n) != shipped.get(n))
    assert not differ, (
        f"{differ}: the shipped list is not what the packages give (check's lines or verdicts "
        "changed?): rebuild it with regenerate.sh's last command (docs/ranking.md §8)"
    )


def test_the_example_holds_what_docs_ranking_md_says():
    """At least 4 packages, 2 workloads, one failing check, one with a STREAM record, one
    packed with its weights (L2), every page marked as CPU examples; and small."""
    doc = json.loads((EXAMPLE / "list" / "ranking.json").read_text())
    assert len(list(PACKAGES.iterdir())) >= 4 and doc["cpu_examples"]
    assert {t["workload"] for t in doc["tables"]} == {"image_classification", "regression"}
    assert [n["package"] for n in doc["not_listed"]] == ["centre-d-edited"]
    assert any(e["triad_gb_per_s_per_device"] for e in doc["entries"])
    assert any(e["levels"] == ["L1", "L2"] for e in doc["entries"])
    for page in (EXAMPLE / "list").rglob("*.html"):
        assert "CPU examples, not systems" in page.read_text()
    assert "CPU examples, not systems" in (EXAMPLE / "list" / "ranking.md").read_text()
    size = sum(p.stat().st_size for p in EXAMPLE.rglob("*") if p.is_file())
    assert size < 1_000_000, size


def test_a_package_of_stream_runs_alone_passes_and_lists_nothing(tmp_path, capsys):
    from hpcai_jax.submission.__main__ import main as submission

    stream = ROOT / "docs" / "example_report" / "records" / "stream-cpu-1dev.json"
    assert submission(["pack", str(stream), f"--out={tmp_path / 'p' / 'stream-only'}"]) == 0
    capsys.readouterr()
    assert main([str(tmp_path / "p"), f"--out={tmp_path / 'l'}"]) == 1  # nothing listed
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("[1/1] stream-only: passed check, no training run to list")
    assert json.loads((tmp_path / "l" / "ranking.json").read_text())["tables"] == []
