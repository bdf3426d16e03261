"""`--mode=check`: one command that judges a node before a benchmark run (docs/node_check.md).

Modules, one job each: rows (a verdict: measured, expected, source, ratio, PASS/WARN/FAIL),
budget (shares of --check_budget_s), expectations (what rows are judged against: datasheets, and
figures measured on the CPU machine class), system (devices, host, energy counters), compute
(STREAM Triad, matmul peaks), collectives (nccl-tests-like bandwidth per mesh axis), training
(the step, the member strategy, the dtypes), inputs (JPEG images per core-second), runner (the
command), record (what training modes read from a check record). Nothing is imported here, so
that a training run reading --check_record loads only `record`.
"""
