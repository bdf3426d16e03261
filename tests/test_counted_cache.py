"""The counting program's figures kept per compiled step (hpcai_jax/flops/counted_cache.py): a
second run of the same step reads them instead of tracing its members' loops again."""

from __future__ import annotations

import pytest

from hpcai_jax.flops import counted_cache


class _Lowered:
    """Stands in for a jax.stages.Lowered: its text, and a cost analysis."""

    def __init__(self, text: str, flops: float = 0.0):
        self.text, self.flops = text, flops

    def as_text(self, debug_info: bool = True) -> str:
        assert debug_info is False  # locations would make every run's key its own
        return self.text

    def cost_analysis(self) -> dict:
        return {"flops": self.flops, "bytes accessed": 2.0, "utilization0{}": 1.0}


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv(counted_cache.ENV, str(tmp_path / "counted"))
    return tmp_path / "counted"


def test_the_second_count_of_a_step_is_read_not_traced(folder):
    traced = []

    def count():
        traced.append(1)
        return _Lowered("the loops written out", 1.5e12)

    step = _Lowered("module @jit_train_step")
    first, hit = counted_cache.counted(step, count)
    assert not hit and traced == [1] and first.cost_analysis()["flops"] == 1.5e12
    again, hit = counted_cache.counted(step, count)
    assert hit and traced == [1] and again.cost_analysis() == first.cost_analysis()
    assert len(list(folder.glob("*.json"))) == 1
    # Another step (another layout) is another entry, counted anew.
    other, hit = counted_cache.counted(_Lowered("module @jit_other"), count)
    assert not hit and traced == [1, 1] and len(list(folder.glob("*.json"))) == 2


def test_a_damaged_entry_is_counted_again(folder):
    step = _Lowered("module @jit_train_step")
    counted_cache.counted(step, lambda: _Lowered("out", 3.0))
    (entry,) = folder.glob("*.json")
    entry.write_text('{"flops": ')  # a write cut short by a kill
    got, hit = counted_cache.counted(step, lambda: _Lowered("out", 4.0))
    assert not hit and got.cost_analysis()["flops"] == 4.0


def test_a_folder_that_cannot_be_written_only_costs_the_count(tmp_path, monkeypatch):
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv(counted_cache.ENV, str(blocked / "counted"))  # under a file
    got, hit = counted_cache.counted(_Lowered("step"), lambda: _Lowered("out", 5.0))
    assert not hit and got.cost_analysis()["flops"] == 5.0


def test_the_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(counted_cache.ENV, raising=False)
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "xla"))
    assert counted_cache.folder() == tmp_path / "xla" / "counted"
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    assert counted_cache.folder().parts[-3:] == (".cache", "hpcai_jax", "counted")
