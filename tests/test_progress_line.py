"""The progress line's `step N/TOTAL` counts completed steps: at --log_every=K it reads K, 2K,
... and ends with TOTAL/TOTAL, each with that step's loss (run/hooks.py ProgressLine)."""

from __future__ import annotations

import re


def test_progress_lines_count_completed_steps(tiny_run):
    """The tiny run: 4 steps at --log_every=2 (a step completes once the next is dispatched,
    so the line is written one step later, and the last step is waited for)."""
    steps = re.findall(r"step (\d+)/(\d+)  loss ", tiny_run.proc.stderr)
    assert steps == [("2", "4"), ("4", "4")], tiny_run.proc.stderr[-3000:]
