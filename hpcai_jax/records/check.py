"""What the training modes read from a check record (--check_record): the member strategy
measured on this backend (`--member_strategy=auto`)."""

from __future__ import annotations

import json
from pathlib import Path

from hpcai_jax.errors import UsageError


def measured_strategy(path: str, backend: str) -> tuple[str, str] | None:
    """(strategy, why) from the check record at `path`, or None when its strategy item was not
    measured (skipped for budget): the per-backend default applies then.

    Raises:
      UsageError: the file cannot be read, is not a check record, or was measured on another
        backend (its winner says nothing about this one).
    """
    flag = f"--check_record={path}"
    try:
        record = json.loads(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"{flag}: cannot read it ({e.strerror})") from None
    except ValueError:
        raise UsageError(f"{flag}: not JSON; expected a record of --mode=check") from None
    if not isinstance(record, dict) or record.get("mode") != "check":
        raise UsageError(f"{flag}: not a record of --mode=check")
    measured = (record.get("check") or {}).get("member_strategy") or {}
    if not measured.get("winner"):
        return None
    if measured.get("backend") != backend:
        raise UsageError(
            f"{flag}: measured on {measured.get('backend')}, this run is on {backend}; "
            "run --mode=check here first"
        )
    times = ", ".join(f"{s} {t:.4g} s" for s, t in measured.get("step_s", {}).items())
    why = (
        f"auto from check record {Path(path).name}: {measured['winner']} won on "
        f"{measured.get('device_kind')} ({times} per step, {measured.get('members_per_device')} "
        "members per device)"
    )
    return measured["winner"], why
