"""What the training modes read from a check record (--check_record): the member strategy
measured on this backend (`--member_strategy=auto`)."""

from __future__ import annotations

from pathlib import Path

from hpcai_jax.errors import UsageError
from hpcai_jax.records.nodecheck import CheckRecord
from hpcai_jax.records.read import RecordError, read


def measured_strategy(path: str, backend: str) -> tuple[str, str] | None:
    """(strategy, why) from the check record at `path`, or None when its strategy item was not
    measured (skipped for budget): the per-backend default applies then.

    Raises:
      UsageError: the file cannot be read, is not a check record, or was measured on another
        backend (its winner says nothing about this one).
    """
    flag = f"--check_record={path}"
    try:
        record = read(path)
    except RecordError as e:
        raise UsageError(f"{flag}: {e}; expected a record of --mode=check") from None
    if not isinstance(record, CheckRecord):
        raise UsageError(f"{flag}: not a record of --mode=check")
    measured = record.check.member_strategy
    if measured is None or not measured.winner:
        return None
    if measured.backend != backend:
        raise UsageError(
            f"{flag}: measured on {measured.backend}, this run is on {backend}; "
            "run --mode=check here first"
        )
    times = ", ".join(f"{s} {t:.4g} s" for s, t in (measured.step_s or {}).items())
    why = (
        f"auto from check record {Path(path).name}: {measured.winner} won on "
        f"{measured.device_kind} ({times} per step, {measured.members_per_device} "
        "members per device)"
    )
    return measured.winner, why
