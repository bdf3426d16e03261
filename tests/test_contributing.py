"""CONTRIBUTING.md's checkable rules: commit subjects from the commit that added the file on,
and the length of every function of the package."""

from __future__ import annotations

import ast
import subprocess

from helpers import ROOT

MAX_SUBJECT = 72
MAX_FUNCTION_LINES = 60


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout


def subject_problems(subjects: list[str]) -> list[str]:
    """The subjects that break the rule: too long, ending in a full stop, or not a capitalised
    first word."""
    return [s for s in subjects if len(s) > MAX_SUBJECT or s.endswith(".") or not s[:1].isupper()]


def test_commit_subjects_since_contributing_are_short_and_imperative_like():
    added = _git("log", "--diff-filter=A", "--format=%H", "--", "CONTRIBUTING.md").split()
    if not added:  # the file is not committed yet: the rule starts with the commit adding it
        return
    first = added[-1]
    subjects = _git("log", "--format=%s", f"{first}^..HEAD").splitlines() or [
        _git("log", "-1", "--format=%s", first).strip()
    ]
    assert subjects and subject_problems(subjects) == []


def test_the_subject_rule_catches_long_and_sloppy_subjects():
    assert subject_problems(["Add the acceptance command"]) == []
    bad = ["x" * 73, "Fix the thing.", "fix the thing"]
    assert subject_problems(bad) == bad


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[str]:
    out = []
    for path in sorted((ROOT / "hpcai_jax").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    return out


def test_no_function_is_longer_than_60_lines():
    assert long_functions() == []


def test_the_length_rule_sees_long_functions():
    assert long_functions(limit=40), "no function over 40 lines: the scan reads nothing"
