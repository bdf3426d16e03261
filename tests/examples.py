"""The commands the documentation gives (`python -m hpcai_jax.X ...`), extracted from README.md,
docs/ and the --help texts, for tests/test_examples.py.

A command is found in a fenced or indented code block or an inline code span; backslash
continuations are joined, a trailing `# comment` and anything after a shell operator dropped.
A command whose arguments hold a placeholder (`M`, `DIR`, `...`, `<run_id>`, a usage line's
`[-h]` or `{a,b}`) is no runnable
example and is set aside, by name, with the reason.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

PREFIX = "python -m hpcai_jax."
_OPERATORS = {"&&", "||", "|", ";", ">", ">>", "2>&1", "2>", "<"}
# A value that stands for one: an upper-case word (M, DIR, STREAM_RECORD), an ellipsis, <x>.
_PLACEHOLDER = re.compile(r"(^|[=/])[A-Z][A-Z_0-9]*(/|$|\.\.\.)|\.\.\.|<[^>]*>|^[\[{]")


@dataclasses.dataclass(frozen=True)
class Example:
    where: str  # file:line or the --help text
    module: str  # hpcai_jax.main
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: python -m {self.module} {shlex.join(self.args)}".rstrip()


def _code_spans(text: str) -> Iterator[tuple[int, str]]:
    """(line number, code) of each fenced block, indented block and inline code span."""
    lines = text.splitlines()
    prose, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].lstrip().startswith("```"):
                j += 1
            yield i + 2, "\n".join(lines[i + 1 : j])
            i = j + 1
            continue
        if line.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            yield i + 1, "\n".join(lines[i:j])
            i = j
            continue
        prose.append((i + 1, line))
        i += 1
    yield from _inline_spans(prose)


def _inline_spans(prose: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Inline `code`, which a paragraph may wrap over lines."""
    text = "\n".join(line for _, line in prose)
    starts = [number for number, _ in prose]
    for match in re.finditer(r"`([^`]+)`", text):
        yield starts[text.count("\n", 0, match.start())], re.sub(r"\s+", " ", match.group(1))


def commands_in(code: str) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line offset, module, arguments) of each command in a piece of code."""
    joined = code.replace("\\\n", " ")
    for offset, line in enumerate(joined.splitlines()):
        at = line.find(PREFIX)
        if at < 0:
            continue
        rest = re.split(r"\s#\s", line[at + len("python -m ") :])[0]
        try:
            words = shlex.split(rest)
        except ValueError:  # an unclosed quote: prose, not a command
            continue
        cut = next((k for k, w in enumerate(words) if w in _OPERATORS), len(words))
        module, *args = words[:cut]
        yield offset, module.rstrip(".,:;"), tuple(args)


def extract(text: str, where: str, markdown: bool = True) -> list[Example]:
    spans = _code_spans(text) if markdown else [(1, text)]
    return [
        Example(f"{where}:{start + offset}", module, args)
        for start, code in spans
        for offset, module, args in commands_in(code)
    ]


def placeholder(example: Example) -> str:
    """The first argument that stands for a value, or ''."""
    return next((a for a in example.args if _PLACEHOLDER.search(a)), "")


GENERATED_REPORT = "# hpcai_jax report"  # a report's first line: records' output, not a page


def documented(root: Path) -> list[Example]:
    """Every command of README.md and docs/ (the pages and their folders' READMEs), not of the
    shipped reports (`python -m hpcai_jax.report`'s output, whose text tests/test_report.py
    checks against their records: it names commands in passing)."""
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    texts = {page: page.read_text(encoding="utf-8") for page in pages}
    return [
        e
        for page, text in texts.items()
        if not text.startswith(GENERATED_REPORT)
        for e in extract(text, str(page.relative_to(root)))
    ]
