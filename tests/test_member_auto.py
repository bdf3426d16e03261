"""`--member_strategy=auto` and `--member_map=auto` (engine/member_map.py): the forms' table's
default with a short, stable why that points at docs/members.md's measurements, and an
acceptance's recorded decision (--acceptance, records/strategy.py) where the run is given one
measured on its backend; a file that is not one, or from elsewhere, is one usage error."""

from __future__ import annotations

import json
import os

import pytest
from helpers import ROOT

from hpcai_jax import member_forms
from hpcai_jax.acceptance import render
from hpcai_jax.acceptance.journal import Journal
from hpcai_jax.acceptance.members import decision_item
from hpcai_jax.engine import member_map
from hpcai_jax.engine.member_map import resolve_mapping
from hpcai_jax.errors import UsageError

CHOSEN = member_forms.ONE_KERNEL_PER_LAYER[0]  # a form the decision rule can choose


def _mapping(backend="gpu", strategy="auto", how="auto", **kw):
    kw.setdefault("dtype", "bfloat16")
    kw.setdefault("members_per_device", 16)
    return resolve_mapping(strategy, how, 0, backend=backend, **kw)


def _acceptance(tmp_path, rates: dict, backend="gpu", name="acceptance") -> str:
    """An acceptance.json as the acceptance writes it: its journal, the members group's
    decision item from `rates`, rendered."""
    out = tmp_path / name
    out.mkdir()
    journal = Journal(out)
    journal.note(backend=backend)
    journal.finish("members", [decision_item(rates, backend)])
    render.write(out)
    return str(out / render.JSON_NAME)


# Whole-step rates (images/s per member) where the chosen form meets the rule, and where not.
MEETS = {"vmap scan": 10.0, "ideal": 40.0, f"vmap {CHOSEN}": 30.0}
MISSES = {"vmap scan": 10.0, "ideal": 40.0, f"vmap {CHOSEN}": 12.0}


def test_auto_is_the_tables_default_with_a_short_why_pointing_at_the_measurements():
    form, _, why = _mapping("cpu", dtype="float32")
    assert form == member_forms.SEQUENTIAL
    assert why.endswith('see docs/members.md, "Why auto picks what it picks"')
    assert why.count("docs/members.md") == 1 and len(why) < 250
    assert not any(c.isdigit() for c in why)  # no figures: those are docs/members.md's
    form, _, why = _mapping("gpu")
    assert form == member_forms.UNROLL and "forms table's default" in why
    text = (ROOT / "docs" / "members.md").read_text()
    assert "## Why auto picks what it picks" in text
    section = text.split("## Why auto picks what it picks")[1].split("\n## ")[0]
    assert "0.91-1.55×" in section and "0.08 of the 1-member rate" in section
    # No measurement prose left in the code: the old dicts are gone.
    assert not hasattr(member_map, "MEMBER_MAP_WHY")
    assert not hasattr(member_map, "MEMBER_STRATEGY_WHY")


def test_auto_takes_the_acceptances_recorded_decision(tmp_path):
    path = _acceptance(tmp_path, MEETS)
    assert json.loads((tmp_path / "acceptance" / "acceptance.json").read_text())["backend"] == "gpu"
    form, group, why = _mapping(acceptance=path)
    assert (form, group) == (CHOSEN, 0)  # the strategy follows: vmap, the members mapped
    assert "auto from acceptance acceptance/acceptance.json: its decision" in why
    assert "3.00x sequential, 75% of the ideal on gpu" in why and "rule:" not in why
    # An explicit flag wins; a check record's winner still decides the strategy.
    assert _mapping(how="conv_loop", acceptance=path)[0] == "conv_loop"
    assert _mapping(strategy="unroll", acceptance=path)[0] == member_forms.UNROLL
    # int8 and a split member keep XLA's batching whatever the decision.
    assert _mapping(dtype="int8", acceptance=path)[0] == member_forms.XLA_BATCHED


def test_a_decision_that_kept_the_default_or_did_not_measure_says_so(tmp_path):
    form, _, why = _mapping("gpu", strategy="vmap", acceptance=_acceptance(tmp_path, MISSES))
    assert form == member_map.auto_form("gpu", strategy=False)
    assert (
        "default, as the acceptance acceptance/acceptance.json kept it, no form meeting its rule"
        in why
    )
    assert "1.20x sequential" in why and "forms table's default" in why
    none = _acceptance(tmp_path, {}, name="none")
    form, _, why = _mapping("gpu", strategy="vmap", acceptance=none)
    assert form == member_map.auto_form("gpu", strategy=False)
    assert "default, as the acceptance none/acceptance.json did not measure it" in why
    # Without a form chosen, --member_strategy=auto stays the table's default.
    assert _mapping("gpu", acceptance=none)[0] == member_forms.UNROLL


def _forged(tmp_path, name: str, doc) -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def _decision(value, backend="gpu"):
    item = {"group": "members", "name": "decision: --member_map=auto", "value": value}
    return {"backend": backend, "items": [item]}


@pytest.mark.parametrize(
    "doc, fragment",
    [
        (_decision(CHOSEN, backend="cpu"), "measured on cpu, this run is on gpu"),
        (_decision("winograd"), "its decision names 'winograd', not a --member_map form"),
        (_decision(member_forms.UNROLL), "not a --member_map form"),
        (_decision(3), "its decision is 3, expected a form's name"),
        ({"items": _decision(CHOSEN)["items"]}, "names no backend"),
        ({"backend": "gpu", "items": "all"}, "no list of items"),
        ([1, 2], "no list of items"),
        ("{not json", "cannot read it (unreadable or not JSON (JSONDecodeError))"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested deeper than 64"),
        (_decision(float("nan")), "its decision is nan, expected a form's name"),
        (
            '{"backend": "gpu", "items": [{"name": "decision: --member_map=auto", "value": 1e400}]}',
            "its decision is inf, expected a form's name",
        ),
    ],
)
def test_a_hostile_acceptance_file_is_one_usage_error_naming_the_flag(tmp_path, doc, fragment):
    path = _forged(tmp_path, "bad.json", doc)
    with pytest.raises(UsageError) as e:
        _mapping(acceptance=path)
    message = str(e.value)
    assert message.startswith(f"--acceptance={path}: ") and fragment in message
    assert "\n" not in message


def test_a_fifo_given_as_the_acceptance_is_refused_without_being_opened(tmp_path):
    fifo = tmp_path / "acceptance.json"
    os.mkfifo(fifo)  # opening it to read would wait for a writer forever
    with pytest.raises(UsageError, match="not a regular file"):
        _mapping(acceptance=str(fifo))


def test_a_missing_acceptance_file_is_refused_even_where_the_flags_are_explicit(tmp_path):
    with pytest.raises(UsageError, match="cannot read it"):
        _mapping(strategy="vmap", how="batched", acceptance=str(tmp_path / "absent.json"))


def test_the_acceptance_writes_the_decision_item_the_reader_looks_for():
    """The item's name and values are the reader's constants (records/strategy.py): renaming
    the acceptance's item without the reader fails here."""
    from hpcai_jax.records import strategy

    assert decision_item(MEETS, "gpu").name == strategy.DECISION_ITEM
    assert decision_item(MEETS, "gpu").value == CHOSEN
    assert decision_item(MISSES, "gpu").value == strategy.UNCHANGED
    assert decision_item({}, "gpu").value == strategy.NOT_MEASURED
