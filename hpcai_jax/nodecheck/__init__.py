"""`--mode=check`: one command that judges a node before a benchmark run (docs/node_check.md).

Modules, one job each: rows (a verdict: measured, expected, source, ratio, PASS/WARN/FAIL/n/a),
budget (shares of --check_budget_s), memory (the memory room an item may take), step_fit (the
batch a training step fits the time and the room at), expectations (what rows are judged
against: datasheets, and a reference machine's figures on CPUs), system (devices, host,
energy counters), compute (STREAM Triad, matmul peaks), collectives (nccl-tests-like bandwidth
per mesh axis, out of place and in place, with the data check), nccl_table (their tables),
collective_rows (their rows, judged on the plateau), training (the step, the member strategy, the
dtypes), inputs (JPEG images per core-second), data (the data directory's read bandwidth and the
open-file limit), runner (the command: items as they finish, the partial and complete record).
Nothing is imported here, so that a training run reading --check_record loads nothing it does
not need.
"""
