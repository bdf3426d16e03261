"""What the training modes read from a check record (--check_record): the member strategy
measured on this backend (`--member_strategy=auto`); and from an acceptance's acceptance.json
(--acceptance): its members group's decision, what `--member_map=auto` takes on this backend
(docs/members.md, "On a device")."""

from __future__ import annotations

from pathlib import Path

from hpcai_jax.errors import UsageError
from hpcai_jax.records.nodecheck import CheckRecord
from hpcai_jax.records.read import RecordError, load, read

# The acceptance's decision item (acceptance/members.decision_item): its value is the form the
# rule chose, UNCHANGED where no form met it, NOT_MEASURED where the step was not measured.
DECISION_ITEM = "decision: --member_map=auto"
UNCHANGED, NOT_MEASURED = "unchanged", "n/a"


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


def _acceptance_items(path: str, flag: str) -> tuple[str, list]:
    """(backend, items) of the acceptance.json at `path`; UsageError where it is not one."""
    expected = "expected the acceptance.json of benchmarks/accelerator/acceptance.sh"
    try:
        doc = load(path)  # a regular file, bounded in size and nesting
    except RecordError as e:
        raise UsageError(f"{flag}: cannot read it ({e}); {expected}") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise UsageError(f"{flag}: no list of items; {expected}")
    backend = doc.get("backend")
    if not isinstance(backend, str) or not backend:
        raise UsageError(f"{flag}: names no backend; {expected} (rerun its members group)")
    return backend, items


def accepted_form(path: str, backend: str) -> tuple[str | None, str]:
    """(form, why) from the acceptance at `path`: the form its decision chose, or None where it
    kept the default or did not measure (the why says which). The caller checks the form
    against the forms' table.

    Raises:
      UsageError: the file cannot be read, is not an acceptance.json, or was measured on
        another backend (its decision says nothing about this one).
    """
    flag = f"--acceptance={path}"
    measured_on, items = _acceptance_items(path, flag)
    if measured_on != backend:
        raise UsageError(
            f"{flag}: measured on {measured_on}, this run is on {backend}; "
            "run the acceptance's members group here first"
        )
    name = "/".join(Path(path).parts[-2:])  # its folder names the run: the file's is fixed
    decision = next((i for i in items if i.get("name") == DECISION_ITEM), None)
    value = decision.get("value") if decision else None
    if value is None or value == NOT_MEASURED:
        return None, f"the acceptance {name} did not measure it"
    if not isinstance(value, str):
        raise UsageError(f"{flag}: its decision is {value!r}, expected a form's name")
    # The measured figures before the rule's text, one line of them.
    figures = (str(decision.get("note") or "").split("; rule:")[0].splitlines() or [""])[0]
    figures = f" ({figures[:200]})" if figures else ""
    if value == UNCHANGED:
        return None, f"the acceptance {name} kept it, no form meeting its rule{figures}"
    return value, f"auto from acceptance {name}: its decision{figures}"
