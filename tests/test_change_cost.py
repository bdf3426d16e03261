"""What a change costs: for each kind of change, the package files that declare it (tests and
docs aside), held to issue 67's goals. Each kind is witnessed by one existing instance: the
name or string literal it is spelled by (as code: docstrings and comments aside) must appear
in exactly the files listed, so that a second place that spells it (a copied choice, a
hand-written list) fails here."""

from __future__ import annotations

import io
import tokenize

import pytest
from helpers import ROOT

PACKAGE = ROOT / "hpcai_jax"

# kind -> (the goal: at most this many files, the witness's token, the files declaring it)
CHANGES = {
    # Its field in its section, and the one writer that fills it.
    "a record field": (
        2,
        "checkpoint_every_why",
        ("hpcai_jax/records/train.py", "hpcai_jax/run/record.py"),
    ),
    # The workload's model choices (config.py: no JAX) and the variant's settings (the
    # witness is a variant no module picks by name; the acceptance smoke picks resnet_tiny).
    "a model variant": (2, '"resnet_mini"', ("hpcai_jax/config.py", "hpcai_jax/models/resnet.py")),
    # A row of the forms' table: its name spelled there alone.
    "a member form": (3, '"batched_grouped"', ("hpcai_jax/member_forms.py",)),
    # A form with a new way to batch convolutions: its row, and the formulation with its code
    # (in ops/member_conv.py, or a module of ops/ it calls: the third file).
    "a member form with its own convolutions": (
        3,
        '"grouped_vjp"',
        ("hpcai_jax/member_forms.py", "hpcai_jax/ops/member_conv.py"),
    ),
    # One row of the paper plan's POINTS.
    "a paper point": (1, '"control-M1-matched"', ("hpcai_jax/sweep_paper.py",)),
    # One member of records/envelope.Status: STATUSES and the checks derive from it.
    "a record status": (1, "SMALL_ARRAYS", ("hpcai_jax/records/envelope.py",)),
}


def _tokens(text: str) -> set[str]:
    kinds = (tokenize.NAME, tokenize.STRING)
    return {
        t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type in kinds
    }


def spelled_in(token: str) -> tuple[str, ...]:
    """The package's files that spell `token` as a name or a whole string literal."""
    found = (
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if token in _tokens(path.read_text(encoding="utf-8"))
    )
    return tuple(sorted(found))


@pytest.mark.parametrize("kind", CHANGES)
def test_a_change_is_declared_in_its_files_alone_within_the_goal(kind):
    goal, token, files = CHANGES[kind]
    assert spelled_in(token) == tuple(sorted(files)), kind
    assert len(files) <= goal, f"{kind}: {len(files)} files, goal {goal}"
