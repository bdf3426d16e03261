"""run/hooks.py's registry: each hook runs on its schedule (a period, the last step, or a `when`
it learns as the run goes), reads a StepInfo, asks the trainer's Services, and the first Outcome
ends the round."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from hpcai_jax.run import hooks


def _ctx(total: int = 10):
    clock = SimpleNamespace(last_metrics="metrics", flush=lambda: None)
    return SimpleNamespace(
        total_steps=total, state="state", clock=clock, progress=SimpleNamespace(step=0)
    )


def test_each_hook_runs_on_its_schedule_and_reads_the_step_info():
    calls: list[tuple[str, int]] = []

    def hook(name):
        def call(info: hooks.StepInfo, run: hooks.Services):
            assert isinstance(run, hooks.Services)
            assert (info.total, info.state, info.metrics) == (10, "state", "metrics")
            calls.append((name, info.done))

        return call

    registry = hooks.Hooks()
    registry.add(hook("every 3, last"), every=3, at_last=True)
    registry.add(hook("every 4"), every=4)
    registry.add(hook("never"), every=0)
    registry.add(hook("when 5"), when=lambda info: info.done == 5)
    ctx = _ctx()
    for done in range(1, 11):
        assert registry.run(ctx, done) is None
    assert calls == [
        ("every 3, last", 3),
        ("every 4", 4),
        ("when 5", 5),
        ("every 3, last", 6),
        ("every 4", 8),
        ("every 3, last", 9),
        ("every 3, last", 10),
    ]


def test_the_first_stop_ends_the_round():
    stop = hooks.Outcome(hooks.Status.PARTIAL, "preempted")
    later: list[int] = []
    registry = hooks.Hooks()
    registry.add(lambda info, run: stop if info.done == 2 else None)
    registry.add(lambda info, run: later.append(info.done))
    ctx = _ctx()
    assert registry.run(ctx, 1) is None
    assert registry.run(ctx, 2) is stop
    assert later == [1]  # the hook after the stop did not run in its round


@pytest.mark.parametrize("schedule", [{"every": 2}, {"every": 0}, {"at_last": True}])
def test_a_hook_has_one_schedule(schedule):
    """`when=` beside `every=` or `at_last=` is refused at registration: neither wins."""
    with pytest.raises(ValueError, match="not both"):
        hooks.Hooks().add(lambda info, run: None, when=lambda info: True, **schedule)


def test_a_progress_line_is_due_once_a_due_step_is_booked_and_after_the_last():
    """The line's schedule, in the registry: the booked step count, not the dispatched one
    (a step is booked one dispatch late), each due count once, and the last step always."""
    line = hooks.ProgressLine(every=2, examples_per_step=8)

    def info(done: int, booked: int, metrics="metrics") -> hooks.StepInfo:
        return hooks.StepInfo(done, 6, None, metrics, SimpleNamespace(step=booked))

    assert not line.due(info(2, 1))  # step 2 dispatched, only step 1 booked
    assert line.due(info(3, 2)) and not line.due(info(3, 2, metrics=None))
    line.logged = 2  # its line written
    assert not line.due(info(4, 2)) and not line.due(info(4, 3))
    assert line.due(info(6, 5))  # the last step: waited for
    assert not hooks.ProgressLine(every=0, examples_per_step=8).due(info(6, 5))  # no lines
