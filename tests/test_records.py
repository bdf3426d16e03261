"""The records' definitions and their one reader (hpcai_jax/records/, docs/record.md): every
shipped example record reads as version 1, a fresh one as version 2 with its layout unchanged,
docs/record.md is what the definitions generate, and no reader outside records/ indexes a
record's JSON by string keys."""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
import typing
from pathlib import Path

import pytest
from helpers import ROOT

from hpcai_jax import records
from hpcai_jax.records import doc, v1
from hpcai_jax.records.fields import extra, meaning

EXAMPLES = sorted((ROOT / "docs" / "example_report" / "records").glob("*.json"))
# The examples written before the version field (version 1), and those written since.
V1_EXAMPLES = [p for p in EXAMPLES if "schema_version" not in json.loads(p.read_text())]
V2_EXAMPLES = [p for p in EXAMPLES if p not in V1_EXAMPLES]


# ---------------------------------------------------------------------------------------------
# Reading


def test_the_examples_keep_records_of_both_versions():
    assert len(V1_EXAMPLES) >= 5 and len(V2_EXAMPLES) >= 3  # the converter stays exercised


@pytest.mark.parametrize("path", V2_EXAMPLES, ids=lambda p: p.stem)
def test_every_shipped_version_2_example_reads_back_field_for_field(path):
    raw = json.loads(path.read_text())
    assert records.to_dict(records.read(path)) == raw


@pytest.mark.parametrize("path", V1_EXAMPLES, ids=lambda p: p.stem)
def test_every_shipped_example_record_reads_as_version_1(path):
    raw = json.loads(path.read_text())
    assert "schema_version" not in raw  # written before the field existed
    record = records.read(path)
    assert type(record) is records.KINDS[raw["mode"]] and record.schema_version == 2
    assert (record.run_id, record.status, record.config) == (
        raw["run_id"],
        raw["status"],
        raw["config"],
    )
    layout = records.to_dict(record)
    # Version 2 is version 1 field for field; what the example records predate reads as None.
    newer = {
        "schema_version",
        "provenance.environment",
        "data.skipped_examples",
        "members",
        "observe",
        "reliability",
        "run.burst",
        "timing.per_process",
        "timing.startup",
    }
    assert _leaves(layout) - _leaves(raw) <= newer
    assert _leaves(raw) <= _leaves(layout)
    if raw["mode"] == "train":
        assert record.mesh.parallel_degree == raw["mesh"]["parallel_degree"]
        assert record.comm.payload_bytes == raw["comm"]["payload_bytes"]
        assert [e.wall_s for e in record.epochs] == [e["wall_s"] for e in raw["epochs"]]
        assert record.data.skipped_examples is None and record.provenance.environment is None
    else:
        assert record.kernels["triad"].gb_per_s == raw["kernels"]["triad"]["gb_per_s"]


def _leaves(value, path: str = "") -> set[str]:
    """The paths of a JSON value's fields (list items by []), as docs/record.md names them."""
    if isinstance(value, dict):
        return {p for k, v in value.items() for p in _leaves(v, f"{path}.{k}" if path else k)}
    if isinstance(value, list):
        return {path} | {p for item in value for p in _leaves(item, f"{path}[]")}
    return {path}


def test_a_fresh_record_reads_as_version_2_and_keeps_its_layout(tiny_run):
    """The run wrote version 2; reading it and writing it back gives the file's JSON, field for
    field and in order: the definitions hold every field the run writes, and no other."""
    raw = tiny_run.record
    assert raw["schema_version"] == records.SCHEMA_VERSION == 2
    record = records.read(tiny_run.results / "real-train.json")
    assert isinstance(record, records.TrainRecord)
    assert records.to_dict(record) == raw
    assert json.dumps(records.to_dict(record)) == json.dumps(raw)  # the same order too
    assert record.quality.curve[0].ensemble == raw["quality"]["curve"][0]["ensemble"]
    assert record.timing.step_s.count == raw["timing"]["timed_steps"]


def test_a_typed_record_survives_json(tiny_run):
    """typed → dict → JSON text → read → the same typed record."""
    record = records.read(tiny_run.record)
    again = records.read(json.loads(json.dumps(records.to_dict(record))))
    assert again == record
    changed = dataclasses.replace(record, run_id="other")
    assert records.read(json.loads(json.dumps(records.to_dict(changed)))) != record
    assert records.read(record) is record  # a typed record is already read


def test_the_version_1_converter(tiny_run):
    """A record as older versions wrote it: the wire figures' predecessor, no model axis, no
    Table 2 options, no energy, no curve; every default is the converter's (v1.CHANGES)."""
    old = copy.deepcopy(tiny_run.record)
    del old["schema_version"]
    old["comm"] = {"bytes_per_step": {"data": 5}, "nodes": 1}
    for key in ("model_parallel", "members_per_device"):
        del old["mesh"][key]
    for key in ("precision", "energy", "roofline", "time_to_target_s"):
        del old[key]
    del old["quality"]["curve"]
    record = records.read(old)
    assert record.comm.payload_bytes == {"data": 5} and record.comm.wire_bytes is None
    assert (record.mesh.model_parallel, record.mesh.members_per_device) == (1, 1)
    assert (record.precision.allreduce, record.precision.grad_allreduce_dtype) == (
        "flat",
        "float32",
    )
    assert record.precision.dtype is None  # not in the record: not guessed
    assert (record.energy.available, record.energy.why) == (False, "not measured")
    assert record.roofline is None and record.time_to_target_s is None
    assert record.quality.curve == []
    assert "bytes_per_step" not in records.to_dict(record)["comm"]
    # The same record given version 2 is read as it stands: no conversion.
    as_v2 = records.read({**old, "schema_version": 2})
    assert as_v2.comm.payload_bytes == {} and as_v2.mesh.model_parallel is None
    assert len(v1.CHANGES) >= 5


def test_missing_sections_read_as_sections_of_none():
    record = records.read({"mode": "train", "run_id": "r", "schema_version": 2})
    assert record.mesh.ensemble_size is None and record.timing.step_s.median_s is None
    assert record.epochs == [] and record.resumes == [] and record.comm is None
    stream = records.read({"mode": "stream"})
    assert stream.kernels == {} and stream.placement.num_devices is None
    check = records.read({"mode": "check", "check": {"member_strategy": {}, "train_step": {}}})
    assert check.check.member_strategy is None and check.check.train_step is None


@pytest.mark.parametrize(
    "data,why",
    [
        ({"hello": "world"}, 'no "mode" field'),
        ([1, 2], 'no "mode" field'),
        ({"mode": "paint"}, "mode 'paint'"),
        ({"mode": "train", "schema_version": 3}, "schema_version 3"),
        ({"mode": "train", "mesh": 4}, "mesh: expected an object, found int"),
        ({"mode": "train", "epochs": {}}, "epochs: expected a list, found dict"),
        ({"mode": "stream", "kernels": {"triad": 1}}, "kernels.triad: expected an object"),
    ],
)
def test_what_is_not_a_record_says_why(data, why):
    with pytest.raises(records.RecordError, match=why.replace("(", r"\(")):
        records.read(data)


def test_a_file_that_is_not_json_says_so(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(records.RecordError, match=r"unreadable or not JSON \(JSONDecodeError\)"):
        records.read(tmp_path / "bad.json")
    with pytest.raises(records.RecordError, match=r"\(FileNotFoundError\)"):
        records.read(tmp_path / "none.json")


# ---------------------------------------------------------------------------------------------
# docs/record.md


def test_docs_record_md_is_generated_from_the_definitions():
    committed = (ROOT / "docs" / "record.md").read_text()
    assert committed == doc.render(), (
        "docs/record.md is stale: python -m hpcai_jax.records.doc > docs/record.md"
    )


def _sections():
    seen: list[type] = []

    def walk(cls):
        if cls in seen:
            return
        seen.append(cls)
        for tp in typing.get_type_hints(cls).values():
            for t in (
                tp,
                *(a for arg in typing.get_args(tp) for a in (arg, *typing.get_args(arg))),
            ):
                if dataclasses.is_dataclass(t):
                    walk(t)

    for cls in records.KINDS.values():
        walk(cls)
    return seen


def test_every_field_has_a_meaning_and_every_one_is_on_the_page():
    page = (ROOT / "docs" / "record.md").read_text()
    for cls in _sections():
        for f in dataclasses.fields(cls):
            assert meaning(f).strip(), f"{cls.__name__}.{f.name}"
            assert "unit" in extra(f), f"{cls.__name__}.{f.name}"
    paths = {row[0] for cls in records.KINDS.values() for row in doc.rows(cls)}
    assert {"timing.step_s.median_s", "epochs[].wall_s", "kernels.*.gb_per_s"} <= paths
    assert "check.rows[].status" in paths and "flops.train_step_flops" in paths
    for path in paths:
        assert f"| `{path}` |" in page, path


# ---------------------------------------------------------------------------------------------
# No string paths into records outside records/

# Where the report, the submission tools, the MLLOG and the sweep read records.
READERS = [
    *sorted((ROOT / "hpcai_jax" / "report").glob("*.py")),
    *sorted((ROOT / "hpcai_jax" / "submission").glob("*.py")),
    ROOT / "hpcai_jax" / "telemetry" / "mllog.py",
    ROOT / "hpcai_jax" / "sweep.py",
]
# Dicts these modules index that are not records, by the name they are held in.
NOT_RECORDS = {
    "report/build.py": {
        "shared": "the plotted records' shared configuration, flattened",
        "majority": "the same, by mode",
        "complete": "every complete record, by mode",
    },
    "report/paper.py": {"config": "the record's config: RunConfig.to_dict(), a dict by design"},
    "report/markdown.py": {"majority": "the same, by mode"},
    "report/collect.py": {"used": "the plotted records by mode"},
    "submission/verify.py": {"line": "an MLLOG line"},
    "submission/count.py": {
        "analysis": "XLA's cost analysis of the lowered step",
        "options": "the counter's own options",
    },
    "submission/pack.py": {"config": "the record's config: RunConfig.to_dict(), a dict by design"},
    "submission/recount.py": {"counted": "the counter process's JSON answer"},
    "submission/streamderive.py": {
        "conf": "the record's config.stream: StreamConfig.to_dict(), a dict by design",
        "f": "Found: its dotted strings are the names of the fields its failure lines print",
    },
    "submission/reevaluate.py": {"line": "an MLLOG line"},
    "submission/derive.py": {
        "line": "an MLLOG line",
        "meta": "an MLLOG line's metadata",
        "vmeta": "an MLLOG line's metadata",
        "start": "an MLLOG line",
    },
    "telemetry/mllog.py": {
        "meta": "an MLLOG line's metadata",
        "epoch": "run/clock.py's closed epoch (Progress.epochs)",
        "mesh": "the machine as the MLLOG header states it (_mesh)",
        "_segment": "a resumed segment's segment_start metadata",
    },
}
_GETTERS = ("get", "pop", "setdefault")


def _field_names() -> set[str]:
    return {f.name for cls in _sections() for f in dataclasses.fields(cls)}


def _root(expr) -> str:
    """The name a subscript chain starts from: `r.data["a"]["b"]` -> data, `(x.get("a") or
    {}).get("b")` -> x."""
    while True:
        if isinstance(expr, ast.Subscript):
            expr = expr.value
        elif (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in _GETTERS
        ):
            expr = expr.func.value
        elif isinstance(expr, ast.BoolOp):
            expr = expr.values[0]
        else:
            break
    if isinstance(expr, ast.Name):
        return expr.id
    return expr.attr if isinstance(expr, ast.Attribute) else ""


def _string(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def string_key_reads(source: str, exempt: dict[str, str] | None = None) -> list[str]:
    """`line: code` of every read of a record's field by a string: `x["mesh"]`, `x.get("comm")`
    with a key that names a record field, and a dotted path of record fields passed to a call
    (`field(data, "quality.metric")`), except on the dicts `exempt` names."""
    names, exempt, found = _field_names(), exempt or {}, []
    for node in ast.walk(ast.parse(source)):
        key = receiver = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key, receiver = _string(node.slice), node.value
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _GETTERS and node.args:
                key, receiver = _string(node.args[0]), func.value
            paths = [_string(a) for a in node.args if _string(a) and "." in _string(a)]
            dotted = [p for p in paths if all(part in names for part in p.split("."))]
            if dotted and not (isinstance(func, ast.Attribute) and _root(func.value) in exempt):
                found.append((node.lineno, ast.unparse(node)))
                continue
        if key in names and _root(receiver) not in exempt:
            found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {code}" for line, code in sorted(found)]


def test_no_reader_indexes_a_record_by_string_keys():
    problems = []
    for path in READERS:
        where = str(path.relative_to(ROOT / "hpcai_jax"))
        for line in string_key_reads(path.read_text(), NOT_RECORDS.get(where)):
            problems.append(f"{where}:{line}")
    assert problems == [], "read records through hpcai_jax.records:\n" + "\n".join(problems)


def test_the_string_key_check_sees_every_old_pattern():
    """Each way the readers used to reach into a record is caught, in a module of its own or
    put back into a real reader; the exemptions cover only the dicts they name."""
    old = """
def f(record, r, data, comm):
    a = record["mesh"]["parallel_degree"]
    b = r.data["mesh"]
    c = data.get("comm") or {}
    d = field(data, "quality.metric")
    e = comm.get("payload_bytes", comm.get("bytes_per_step"))
    f = (line.get("metadata") or {}).get("epochs")
    g = kernels.get(key)
"""
    found = string_key_reads(old)
    assert sorted({line.split(":")[0] for line in found}) == ["3", "4", "5", "6", "7", "8"]
    assert "8" not in {x.split(":")[0] for x in string_key_reads(old, {"line": "an MLLOG line"})}
    series = (ROOT / "hpcai_jax" / "report" / "series.py").read_text()
    assert string_key_reads(series) == []
    assert len(string_key_reads(series + '\nx = r.record["metrics"]["flops_per_s"]\n')) == 2
    # A store is no read: a dict the module builds may have keys named like fields.
    assert string_key_reads('x = {"mesh": 1}["mesh"]\nmeta["run_id"] = 1\n') == [
        "1: {'mesh': 1}['mesh']"
    ]


def test_the_exemptions_name_modules_that_exist():
    for where in NOT_RECORDS:
        assert (ROOT / "hpcai_jax" / where) in READERS, where


def test_readers_take_records_from_the_reader(tmp_path):
    """The report's Record reads a JSON object as the reader does (a test's edited copy)."""
    from hpcai_jax.report.collect import Record

    path = EXAMPLES[0]
    row = Record(Path(path), json.loads(path.read_text()))
    assert row.record == records.read(path) and row.run_id == path.stem
