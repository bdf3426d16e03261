"""The list's rules on made-up entries (hpcai_jax/ranking/order.py, ids.py): the ranking order
and its tie-breaks, the best entry per system and the spread of its repeats, `--all`, and result
IDs that depend on the package and the list's version only. No package, no process."""

from __future__ import annotations

import dataclasses

from hpcai_jax.ranking import ids
from hpcai_jax.ranking.columns import Meta, cells, cite
from hpcai_jax.ranking.entries import Entry
from hpcai_jax.ranking.order import build, rows

BASE = Entry(
    result_id="v3.0-0000000000",
    package="p",
    digest="d",
    run_id="r",
    workload="image_classification",
    model="resnet50",
    dataset="imagenet2012",
    division="closed",
    category="available",
    system="sys-a",
    organisation="org-a",
    devices=8,
    device_kind="NVIDIA H100",
    ensemble_size=8,
    parallel_degree=1,
    flops=1e15,
    vflops=9e14,
    metric="top1_accuracy",
    quality=0.76,
    target=0.759,
    target_official=True,
    exponent=5.0,
    penalty=0.9,
    time_to_target_s=100.0,
    triad_gb_s_per_device=None,
    software="jax 0.10",
    date="2026-12-01",
    levels=("L1",),
    configuration=("--ensemble_size=8",),
)


def entry(rid: str, **changes) -> Entry:
    return dataclasses.replace(BASE, result_id=rid, **changes)


def test_ties_break_by_flops_then_time_to_target_then_id():
    given = [
        entry("v3.0-d", system="s4", time_to_target_s=None),
        entry("v3.0-c", system="s3"),
        entry("v3.0-b", system="s2", time_to_target_s=50.0),
        entry("v3.0-a", system="s1", flops=2e15),
        entry("v3.0-e", system="s5", vflops=1e15),
        entry("v3.0-f", system="s6"),
    ]
    ranked = [r.entry.result_id for r in rows(given, all_runs=False)]
    # e: highest VFLOPS; a: same VFLOPS, more FLOPS; b: shorter time to target; c before f by
    # ID; d: no time to target, last.
    assert ranked == ["v3.0-e", "v3.0-a", "v3.0-b", "v3.0-c", "v3.0-f", "v3.0-d"]
    assert [r.rank for r in rows(given, False)] == [1, 2, 3, 4, 5, 6]


def test_the_best_entry_per_system_with_its_repeats_spread():
    given = [
        entry("v3.0-a1", vflops=5e14),
        entry("v3.0-a2", vflops=7e14),
        entry("v3.0-a3", vflops=6e14, configuration=("--ensemble_size=16",)),
        entry("v3.0-b1", system="sys-b", vflops=6.5e14),
    ]
    best = rows(given, all_runs=False)
    assert [r.entry.result_id for r in best] == ["v3.0-a2", "v3.0-b1"]
    assert [e.result_id for e in best[0].repeats] == ["v3.0-a2", "v3.0-a1"]
    assert best[0].spread == (5e14, 7e14) and best[1].spread is None
    assert cells(best[0])[-1] == "2: 500 TFLOP/s to 700 TFLOP/s"
    every = rows(given, all_runs=True)
    assert [r.entry.result_id for r in every] == ["v3.0-a2", "v3.0-b1", "v3.0-a3", "v3.0-a1"]
    # the same system under another organisation is another system
    other = rows([*given, entry("v3.0-c", organisation="org-c", vflops=1e14)], False)
    assert [r.entry.result_id for r in other] == ["v3.0-a2", "v3.0-b1", "v3.0-c"]


def test_one_table_per_workload_division_and_category_in_a_fixed_order():
    given = [
        entry("v3.0-1", category="research"),
        entry("v3.0-2", division="open"),
        entry("v3.0-3", workload="extreme_weather"),
        entry("v3.0-4"),
    ]
    ranking = build(list(reversed(given)), [], all_runs=False)
    titles = [t.title for t in ranking.tables]
    assert titles == [
        "extreme_weather, closed division, available",
        "image_classification, closed division, available",
        "image_classification, closed division, research",
        "image_classification, open division, available",
    ]
    assert build(given, [], False) == ranking  # the order given changes nothing


def test_result_ids_come_from_the_digest_run_and_version_only():
    a = ids.result_id("ab" * 32, "run-1")
    assert a == ids.result_id("ab" * 32, "run-1") and a.startswith("v3.0-") and len(a) == 15
    assert a != ids.result_id("ab" * 32, "run-2")
    assert a != ids.result_id("cd" * 32, "run-1")
    assert ids.result_id("ab" * 32, "run-1", "v3.1").startswith("v3.1-")


def test_the_citation_names_version_division_category_and_id():
    said = cite(BASE, Meta(date="2026-12-07"))
    assert said.startswith("HPC AI500 V3.0 image_classification, closed division, available")
    assert "result v3.0-0000000000" in said and "list of 2026-12-07" in said


def test_a_level_only_where_its_check_ran_and_passed():
    """The list lists only packages whose check passed; L2 and L3 need check's own verdict that
    the re-evaluation or the re-run ran (hpcai_jax/ranking/verify.py)."""
    from hpcai_jax.ranking.verify import levels
    from hpcai_jax.submission.verify import Review

    plain = [("r", "scores re-derived", "PASS"), ("package", "README.md", "PASS")]
    again = [*plain, ("r", "re-evaluation", "PASS"), ("r", "re-run of 2 steps", "PASS")]
    assert levels(Review(), plain) == ("L1",)
    assert levels(Review(reevaluate=True), plain) == ("L1",)  # asked, never ran: no L2
    assert levels(Review(reevaluate=True, rerun_steps=2), again) == ("L1", "L2", "L3")
    assert levels(Review(rerun_steps=3), again) == ("L1",)  # a re-run of another length


def test_a_package_check_cannot_read_never_stops_the_others(tmp_path, monkeypatch):
    """check's UsageError, or anything else it raises on a hostile package, is that package's
    not-listed line; the packages after it are still checked."""
    from hpcai_jax.errors import UsageError
    from hpcai_jax.ranking import cli
    from hpcai_jax.ranking.verify import Options
    from hpcai_jax.submission import verify

    for name in ("a-usage", "b-crash", "c-fine"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "system.json").write_text(f'{{"name": "{name}"}}')

    def check(folder, **_):
        name = folder.rsplit("/", 1)[-1]
        if name == "a-usage":
            raise UsageError(f"{folder}/x.json: not a readable record")
        if name == "b-crash":
            raise KeyError("epochs")
        return []

    monkeypatch.setattr(verify, "check", check)
    said = []
    listed, not_listed = cli.checked(
        sorted(tmp_path.iterdir()), Options(), lambda *a, **k: said.append(a[0])
    )
    assert [v.path.name for v in listed] == ["c-fine"]
    assert [(n.package, n.why) for n in not_listed] == [
        ("a-usage", "a-usage/x.json: not a readable record"),
        ("b-crash", "b-crash: check stopped on it (KeyError: 'epochs'): a bug of check"),
    ]
    assert said[2].startswith("[3/3] c-fine: passed check, no training run to list")
