"""`python -m hpcai_jax.ranking` on packages made from the session's tiny run (copies made to
look like other submissions, tests/ranking_packages.py): check decides what is listed and its
first failing line is what the list says of a package it leaves out; the same packages give the
same bytes; and each hostile input of docs/ranking.md ("Hostile inputs") ends in one line.
In this process (check's compliance checker is its own subprocess)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from ranking_packages import variant

from hpcai_jax.ranking import output
from hpcai_jax.ranking.__main__ import main
from hpcai_jax.submission import verify
from hpcai_jax.submission.__main__ import main as submission

RUN = "real-train"
HOSTILE = '<script>alert("x")</script>&<img src=x>'


@pytest.fixture(scope="module")
def packed(tiny_run, tmp_path_factory) -> Path:
    """The tiny run packed, and three copies: another system that ran 1.3× faster, the first
    system again 1.1× faster (its repeat), and one whose record's VFLOPS was edited alone."""
    root = tmp_path_factory.mktemp("ranking")
    a = root / "pkgs" / "a"
    assert submission(["pack", str(tiny_run.results / f"{RUN}.json"), f"--out={a}"]) == 0
    variant(
        a, root / "pkgs" / "b", RUN, 1.3, org="Org B", platform="sys-b", system={"system": "sys-b"}
    )
    variant(a, root / "pkgs" / "a2", RUN, 1.1)
    edited = root / "pkgs" / "c-edited"
    shutil.copytree(a, edited)
    record = json.loads((edited / f"{RUN}.json").read_text())
    record["metrics"]["vflops_per_s"] *= 2
    (edited / f"{RUN}.json").write_text(json.dumps(record))
    return root / "pkgs"


def _list(capsys, *argv) -> tuple[int, list[str], list[str]]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_only_what_passes_check_is_listed(packed, tmp_path, capsys):
    out = tmp_path / "list"
    code, said, err = _list(capsys, packed, f"--out={out}", "--date=2026-12-07")
    assert code == 0 and not err, (said, err)
    progress = [line for line in said if line.startswith("[")]
    assert [p.split(":")[0] for p in progress] == [
        "[1/4] a",
        "[2/4] a2",
        "[3/4] b",
        "[4/4] c-edited",
    ]
    # check is the source of truth: its own first failing line is the one the list gives
    first = verify.check(str(packed / "c-edited"))[0]
    assert progress[3].startswith(f"[4/4] c-edited: not listed: {first} (")
    doc = json.loads((out / "ranking.json").read_text())
    assert doc["schema_version"] == 1 and doc["date"] == "2026-12-07"
    assert doc["not_listed"] == [{"package": "c-edited", "why": first}]
    (table,) = doc["tables"]
    assert (table["workload"], table["division"], table["category"]) == (
        "image_classification",
        "open",
        "available",
    )
    by_id = {e["result_id"]: e for e in doc["entries"]}
    ranked = [by_id[r["result_id"]] for r in table["rows"]]
    # the best per system: b (1.3× faster), then a2 (a's repeat, 1.1× faster) with a's spread
    assert [e["package"] for e in ranked] == ["b", "a2"]
    assert ranked[0]["vflops_per_s"] > ranked[1]["vflops_per_s"]
    assert ranked[1]["organisation"] == "Test Org" and ranked[0]["system"] == "sys-b"
    assert len(table["rows"][1]["repeats"]) == 2 and table["rows"][0]["vflops_spread"] is None
    assert all(e["levels"] == ["L1"] for e in ranked)
    index = (out / "index.html").read_text()
    assert index.index(ranked[0]["result_id"]) < index.index(ranked[1]["result_id"])
    assert "c-edited" in index and "<script src" not in index and "http" not in index
    for e in doc["entries"]:
        page = (out / "entries" / f"{e['result_id']}.html").read_text()
        assert e["cite"] in page.replace("&#x27;", "'") and "scores re-derived PASS" in page
        assert (out / "runs" / f"{e['result_id']}.mllog").read_bytes() == (
            packed / e["package"] / f"{RUN}.mllog"
        ).read_bytes()
    all_code, _, _ = _list(capsys, packed, f"--out={tmp_path / 'all'}", "--all")
    every = json.loads((tmp_path / "all" / "ranking.json").read_text())["tables"][0]["rows"]
    assert all_code == 0 and len(every) == 3


def test_the_same_packages_give_the_same_bytes(packed, tmp_path, capsys):
    """Whatever their order, wherever they lie, given one by one or as a folder; the IDs come
    from the packages' digests."""
    moved = tmp_path / "elsewhere"
    shutil.copytree(packed, moved)
    names = ["c-edited", "b", "a", "a2"]
    assert main([str(packed), f"--out={tmp_path / 'one'}"]) == 0
    assert main([*(str(moved / n) for n in names), f"--out={tmp_path / 'two'}"]) == 0
    capsys.readouterr()
    one, two = _files(tmp_path / "one"), _files(tmp_path / "two")
    assert one == two and "ranking.csv" in one and len(one) > 10


def test_a_package_given_twice_is_listed_once(packed, tmp_path, capsys):
    shutil.copytree(packed / "b", tmp_path / "b-copy")
    code, said, _ = _list(capsys, packed / "b", tmp_path / "b-copy", f"--out={tmp_path / 'l'}")
    assert code == 0
    assert any(
        line.startswith("b-copy: not checked: the same package as b (sha256 ") for line in said
    )
    doc = json.loads((tmp_path / "l" / "ranking.json").read_text())
    assert len(doc["entries"]) == 1 and doc["not_listed"][0]["package"] == "b-copy"


def test_one_run_in_two_packages_is_listed_once(packed, tmp_path, capsys):
    """Another system.json (another digest), the same run: check passes each package alone."""
    variant(packed / "b", tmp_path / "b-again", RUN, system={"interconnect": "InfiniBand"})
    code, said, _ = _list(capsys, packed / "b", tmp_path / "b-again", f"--out={tmp_path / 'l'}")
    assert code == 0 and said[0].startswith("[1/2] b: listed")
    assert said[1].startswith(
        f"[2/2] b-again: not listed: run {RUN}: the same MLLOG time stamps as run {RUN} of "
        "package b: one run in two packages, listed once, as b's ("
    )
    doc = json.loads((tmp_path / "l" / "ranking.json").read_text())
    assert [e["package"] for e in doc["entries"]] == ["b"]


def test_a_system_json_naming_another_system_is_not_listed(packed, tmp_path, capsys):
    variant(packed / "a", tmp_path / "other", RUN, system={"system": "Frontier"})
    code, said, _ = _list(capsys, tmp_path / "other", f"--out={tmp_path / 'l'}")
    assert code == 1  # nothing listed
    assert "not listed: package: system.json system 'Frontier' != '8 CPU devices'" in said[0]
    assert "names another system than its records" in said[0]


def test_html_in_free_text_is_escaped(packed, tmp_path, capsys):
    variant(
        packed / "a",
        tmp_path / "h" / "x",
        RUN,
        1.2,
        org=HOSTILE,
        platform=HOSTILE,
        system={"system": HOSTILE},
    )
    bad = tmp_path / "h" / "<i onclick=x>bad"
    shutil.copytree(packed / "c-edited", bad)
    code, said, _ = _list(capsys, tmp_path / "h", f"--out={tmp_path / 'l'}")
    assert code == 0, said
    pages = list((tmp_path / "l").rglob("*.html"))
    assert len(pages) == 2
    for page in pages:
        text = page.read_text()
        assert "<script>alert" not in text and "<i " not in text and "<img" not in text
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&lt;img src=x&gt;" in text
    assert "&lt;i onclick=x&gt;bad" in (tmp_path / "l" / "index.html").read_text()
    md = (tmp_path / "l" / "ranking.md").read_text()
    assert "<script>" not in md and "&lt;script>" in md


def test_an_existing_list_is_refused_then_replaced_whole(packed, tmp_path, capsys):
    out = tmp_path / "list"
    assert main([str(packed / "a"), f"--out={out}"]) == 0
    before = _files(out)
    code, _, err = _list(capsys, packed / "b", f"--out={out}")
    assert code == 2 and err == [
        f"hpcai_jax.ranking: error: --out={out}: already exists; give --overwrite to replace the list"
    ]
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    code, _, err = _list(capsys, packed / "b", f"--out={other}", "--overwrite")
    assert code == 2 and "not a list (no ranking.json)" in err[0] and (other / "notes.txt").exists()
    real = output.write

    def fails(where, files):  # the new list dies half-written
        files = dict(files)
        files["zz/late.txt"] = 1  # not text: writing it raises, after the others
        return real(where, files)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(output, "write", fails)
        with pytest.raises(TypeError):
            main([str(packed / "b"), f"--out={out}", "--overwrite"])
    assert _files(out) == before and sorted(os.listdir(tmp_path)) == ["list", "mine"]
    assert main([str(packed / "b"), f"--out={out}", "--overwrite"]) == 0
    assert _files(out) != before and sorted(os.listdir(tmp_path)) == ["list", "mine"]


def test_links_inside_a_package_are_refused_and_nothing_is_written_outside(
    packed, tmp_path, capsys
):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text("{}")
    linked = tmp_path / "pkgs" / "linked"
    shutil.copytree(packed / "a", linked)
    (linked / f"{RUN}.flags").unlink()
    (linked / f"{RUN}.flags").symlink_to(outside / "secret.json")
    traversal = tmp_path / "pkgs" / "traversal"
    shutil.copytree(packed / "a", traversal)
    (traversal / "stream").symlink_to(outside, target_is_directory=True)
    (tmp_path / "pkgs" / "alias").symlink_to(packed / "a", target_is_directory=True)
    (tmp_path / "given").symlink_to(packed / "b", target_is_directory=True)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, said, _ = _list(capsys, tmp_path / "pkgs", tmp_path / "given", f"--out={tmp_path / 'l'}")
    assert code == 1
    assert said[0].startswith("[1/4] alias: not listed: alias: a symbolic link (to ")
    assert said[1].startswith("[2/4] given: not listed: given: a symbolic link (to ")
    assert (
        f"[3/4] linked: not listed: linked/{RUN}.flags: a symbolic link inside the package"
        in said[2]
    )
    assert said[3].startswith("[4/4] traversal: not listed: traversal/stream: a symbolic link")
    after = sorted(p.name for p in tmp_path.rglob("*") if p.relative_to(tmp_path).parts[0] != "l")
    assert after == before and (outside / "secret.json").read_text() == "{}"


def _versioned(src: Path, dest: Path, version) -> None:
    shutil.copytree(src, dest)
    record = json.loads((dest / f"{RUN}.json").read_text())
    if version is None:  # version 1: the layout before schema_version (records/v1.py)
        del record["schema_version"]
        record["comm"]["bytes_per_step"] = record["comm"].pop("payload_bytes")
    else:
        record["schema_version"] = version
    (dest / f"{RUN}.json").write_text(json.dumps(record))


def test_older_and_unknown_record_versions(packed, tmp_path, capsys):
    """A version-1 record is read as check reads it, and listed; one of a version this
    hpcai_jax does not read is not listed, with check's reason; the others still are."""
    _versioned(packed / "a", tmp_path / "p" / "future", 99)
    _versioned(packed / "b", tmp_path / "p" / "old", None)
    code, said, _ = _list(capsys, tmp_path / "p", f"--out={tmp_path / 'l'}")
    assert code == 0
    assert "[1/2] future: not listed: future/real-train.json: not a readable record (" in said[0]
    assert "schema_version 99" in said[0]
    assert said[1].startswith("[2/2] old: listed, 1 run, L1 ("), said


def test_bad_input_is_one_line(packed, tmp_path, capsys):
    cases = [
        ([tmp_path / "missing", f"--out={tmp_path / 'l'}"], "missing: not a folder"),
        ([packed, f"--out={tmp_path / 'l'}", "--date=yesterday"], "--date=yesterday: expected"),
        ([packed], "the following arguments are required: --out"),
        ([packed, f"--out={tmp_path / 'l'}", "--same_system"], "--same_system: only with"),
        ([packed, f"--out={tmp_path / 'l'}", "--rerun_steps=0"], "--rerun_steps=0: expected"),
        ([packed, f"--out={tmp_path / 'l'}", f"--data_dir={tmp_path / 'no'}"], "not a folder"),
    ]
    for argv, fragment in cases:
        code, said, err = _list(capsys, *argv)
        assert code == 2 and len(err) == 1 and fragment in err[0], (argv, err)
    assert not (tmp_path / "l").exists()
