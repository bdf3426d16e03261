"""`python -m hpcai_jax.submission`: a submission package anyone can re-check.

`pack RUN_RECORDS... --out=DIR` gathers each training record, the MLLOG it names, its whole
configuration as a flagfile and a description of the system into one folder; `check DIR`
re-derives every headline figure of it from the MLLOG lines and the records, runs the MLLOG
compliance check, re-applies the division rules and holds each run to what its configuration and
devices make possible; `--recount` also recounts the FLOPs per step from each flagfile (no data
set needed), `--reevaluate` measures the quality again from the packed weights and
`--rerun_steps=N` trains each flagfile again for N steps here. docs/submission.md walks a centre
through it and says what each proves.

A package holds, per run, `<run_id>.json` (the record as the run wrote it), `<run_id>.mllog`,
`<run_id>.flags` and with `pack --with_weights` `<run_id>.weights` (the members' final weights),
and once `system.json` and `README.md` (the score table); each BabelStream run given to pack
goes into `stream/` with what it printed (streams.py).
"""

from __future__ import annotations

SYSTEM, README = "system.json", "README.md"
RECORD, MLLOG, FLAGS = ".json", ".mllog", ".flags"
