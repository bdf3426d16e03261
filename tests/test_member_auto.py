"""`--member_strategy=auto` and `--member_map=auto` (engine/member_map.py): the forms' table's
default with a short, stable why that points at docs/members.md's measurements."""

from __future__ import annotations

from helpers import ROOT

from hpcai_jax import member_forms
from hpcai_jax.engine import member_map
from hpcai_jax.engine.member_map import resolve_mapping


def _mapping(backend="gpu", strategy="auto", how="auto", **kw):
    kw.setdefault("dtype", "bfloat16")
    kw.setdefault("members_per_device", 16)
    return resolve_mapping(strategy, how, 0, backend=backend, **kw)


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
