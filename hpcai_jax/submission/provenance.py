"""Whether a packed run's provenance agrees with itself, with its mesh and with its MLLOG's
header (docs/submission.md §3, "What check proves"); `system.json` against the records is
package.py's. What only the record holds (the git commit, the versions, the host names) no
package can prove: a re-run on the named commit does.
"""

from __future__ import annotations

import datetime

from hpcai_jax.config import RunConfig
from hpcai_jax.submission.derive import Findings
from hpcai_jax.submission.logfile import metadata

# The MLLOG's times are the run's monotonic clock, tied to the wall clock once; the record's
# utc is the wall clock when it was written, to the second. Over a long run the two clocks may
# drift apart (NTP slews by up to 0.05 %): the window allows for it.
UTC_SLACK_S, UTC_DRIFT = 60.0, 1e-3


def check(f: Findings, run, config: RunConfig, rec: str, lg: str) -> None:
    """Every rule of this module on one run (`run`: check.Run)."""
    _devices(f, run, rec, lg)
    _header(f, run, config, rec, lg)
    _written(f, run, rec, lg)


def _devices(f: Findings, run, rec: str, lg: str) -> None:
    record, log = run.record, run.log
    p, mesh = record.provenance, record.mesh
    f.same(f"{rec} provenance.device_count", p.device_count, mesh.num_devices, "(mesh.num_devices)")
    if record.peak_flops is not None:
        kind = record.peak_flops.device_kind
        f.same(f"{rec} peak_flops.device_kind", kind, p.device_kind, "(provenance.device_kind)")
    if (p.backend == "cpu") != (p.device_kind == "cpu"):
        f.fail(f"{rec} provenance.device_kind {p.device_kind!r} is not a {p.backend} device")
    hosts = p.hosts or []
    f.same(f"{rec} provenance.process_count", p.process_count, len(hosts), "(provenance.hosts)")
    f.same(f"{rec} provenance.number_of_nodes", p.number_of_nodes, len(set(hosts)), "(hosts)")
    for key in ("number_of_nodes", "accelerators_per_node"):
        f.same(f"{lg} {key}", log.value(key), getattr(p, key), f"({rec} provenance.{key})")


def _header(f: Findings, run, config: RunConfig, rec: str, lg: str) -> None:
    """The MLLOG header's submission lines are the packed configuration's."""
    record, log, r = run.record, run.log, config.results
    flags = f"({run.flags.name})"
    bench, benchmark = log.one("submission_benchmark"), f"hpcai500_{config.model.workload}"
    f.same(f"{lg} submission_benchmark", log.value("submission_benchmark"), benchmark, flags)
    for key, want in (("model", config.model.model), ("dataset", config.data.dataset)):
        f.same(f"{lg} submission_benchmark {key}", metadata(bench, key), want, flags)
    f.same(
        f"{lg} submission_org",
        log.value("submission_org"),
        r.submission_org or "unspecified",
        flags,
    )
    f.same(f"{lg} submission_status", log.value("submission_status"), r.submission_status, flags)
    if r.submission_platform or not record.resumes:  # the default names the first mesh
        kind = record.provenance.device_kind
        platform = r.submission_platform or f"{record.mesh.num_devices}x{kind}"
        f.same(f"{lg} submission_platform", log.value("submission_platform"), platform, flags)
    f.same(f"{lg} seed", log.value("seed"), config.train.seed, flags)
    if r.run_name:
        f.same(f"{rec} run_id", record.run_id, r.run_name, f"(--run_name in {run.flags.name})")


def _written(f: Findings, run, rec: str, lg: str) -> None:
    """The record was written during the run the log shows: after its run_start, before its
    run_stop (mllog.run_stop follows the record)."""
    record, log = run.record, run.log
    try:
        utc = datetime.datetime.fromisoformat(record.provenance.utc).timestamp()
    except (TypeError, ValueError):
        f.fail(f"{rec} provenance.utc {record.provenance.utc!r} is not an ISO 8601 time")
        return
    start, stops = log.one("run_start"), log.all("run_stop")
    if start is None or not stops:
        return  # the compliance checker names the missing line
    first, last = start["time_ms"] / 1e3, stops[-1]["time_ms"] / 1e3
    slack = UTC_SLACK_S + UTC_DRIFT * max(0.0, last - first)
    if not first - slack <= utc <= last + slack:
        f.fail(
            f"{rec} provenance.utc {record.provenance.utc} is not within {lg}'s run "
            f"(run_start to run_stop, ± {slack:.0f} s)"
        )
