"""The start-up measurements' one door (hpcai_jax/run/probes.py): every phase after the compile
is a probe of the registry, in the run's order, and the runner alone reads and keeps figures."""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from hpcai_jax.run import probes, startup

PACKAGE = Path(probes.__file__).resolve().parent.parent


def test_every_start_up_measurement_is_a_probe_in_the_run_s_order():
    after_compile = startup.PHASES[startup.PHASES.index("compile") + 1 : -1]  # to the barrier
    timed = [p.name for p in probes.PROBES if p.name in startup.PHASES]
    assert timed == list(after_compile)
    assert [p.name for p in probes.PROBES if p.name not in startup.PHASES] == ["memory"]
    assert all(p.what for p in probes.PROBES)


def _probe(calls: list, store=None) -> probes.Probe:
    def take(m, value, source):
        m.peaks = {"value": value, "source": source}

    return probes.Probe(
        "peaks", "a test", lambda m: calls.append("measured") or 1.0, take, lambda m: ("k",), store
    )


def test_the_runner_consults_the_store_and_the_probe_only_measures():
    calls: list = []

    def store(what, measure, run_id):
        calls.append((what, run_id))
        return 2.0, "kept by run a"

    m = probes.run(probes.Measuring(None, None, None, run_id="run-b"), (_probe(calls, store),))
    assert m.peaks == {"value": 2.0, "source": "kept by run a"} and calls == [(("k",), "run-b")]
    m = probes.run(probes.Measuring(None, None, None), (_probe(calls),))  # no store: measured
    assert m.peaks == {"value": 1.0, "source": ""} and calls[-1] == "measured"
    assert startup.phases()["peaks"] is not None  # timed as its phase


def test_a_stand_in_replaces_a_probe_by_name_and_keeps_nothing():
    stand_ins = probes.replaced(stream=lambda m: (1.0, "a test"))
    stream = next(p for p in stand_ins if p.name == "stream")
    assert stream.store is None and stream.measure(None) == (1.0, "a test")
    assert [p.name for p in stand_ins] == [p.name for p in probes.PROBES]
    with pytest.raises(AssertionError, match="no such probe"):
        probes.replaced(peak=lambda m: {})
    m = types.SimpleNamespace(bandwidth=None)
    assert stream.key(m) == ("stream",)


def test_no_measurement_reads_a_cache_itself():
    """The stores are consulted by run/probes.py alone (and the host cache's own layers)."""
    call = re.compile(r"\b(host_cache\.(kept|read|keep)\w*|counted_cache\.counted)\(")
    readers = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if call.search(path.read_text())
    }
    assert readers <= {"run/probes.py"}, readers
