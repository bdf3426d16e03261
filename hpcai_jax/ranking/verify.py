"""Each package through the full `check` (hpcai_jax/submission/verify.py, in this process: its
result is the list's source of truth), with `--reevaluate` where the package carries weights,
then the list's own rule on what names the system (consistency.py); the levels it earned
(docs/ranking.md, "Verification levels")."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from hpcai_jax.errors import UsageError
from hpcai_jax.ranking import collect, consistency
from hpcai_jax.submission import verify

LEVELS = ("L1", "L2", "L3")


class Options(NamedTuple):
    """What the list asks of check beyond the package alone (the CLI's flags)."""

    recount: bool = False
    rerun_steps: int | None = None
    same_system: bool = False
    data_dir: str | None = None


class Verified(NamedTuple):
    path: Path
    digest: str
    failure: str  # check's first failing line (or why the package was not read); empty: passed
    levels: tuple[str, ...]  # those it passed, e.g. ("L1", "L2")
    verdicts: tuple[tuple[str, str, str], ...]  # (run or "package", check, PASS/FAIL)
    notes: tuple[str, ...]  # what a re-evaluation or a re-run measured

    @property
    def listed(self) -> bool:
        return not self.failure


def _weights(path: Path) -> bool:
    return any(p.is_dir() for p in path.glob("*.weights"))


def review(path: Path, options: Options) -> verify.Review:
    """check's options for this package: --reevaluate where it carries weights."""
    again = _weights(path) or bool(options.rerun_steps)
    return verify.Review(
        recount=options.recount,
        reevaluate=_weights(path),
        rerun_steps=options.rerun_steps,
        same_system=options.same_system,
        data_dir=options.data_dir if again else None,
    )


def levels(asked: verify.Review, verdicts: list) -> tuple[str, ...]:
    """L1 for a passed check; L2 where every run was re-evaluated from its weights; L3 where
    every run was re-run for N steps and reproduced (check's verdicts say which ran)."""
    ran = {name for _, name, _ in verdicts}
    out = ["L1"]
    if asked.reevaluate and "re-evaluation" in ran:
        out.append("L2")
    if asked.rerun_steps and f"re-run of {asked.rerun_steps} steps" in ran:
        out.append("L3")
    return tuple(out)


def verified(path: Path, options: Options, digest: str | None = None) -> Verified:
    """The package checked: its failure line (empty where it passed) and levels; `digest`,
    where the caller has it already, is the package's."""
    why = collect.unsafe(path)
    digest = "" if why else digest or collect.digest(path)
    notes: list[str] = []
    verdicts: list[tuple[str, str, str]] = []
    asked = review(path, options)
    try:
        failures = (
            [why] if why else verify.check(str(path), review=asked, notes=notes, verdicts=verdicts)
        )
        failures = failures or consistency.check(path)
    except UsageError as e:
        failures = [str(e)]
    except Exception as e:  # noqa: BLE001 - a hostile package must not stop the others
        failures = [f"{path}: check stopped on it ({type(e).__name__}: {e}): a bug of check"]
    return Verified(
        path,
        digest,
        failures[0] if failures else "",
        () if failures else levels(asked, verdicts),
        tuple(verdicts),
        tuple(notes),
    )
