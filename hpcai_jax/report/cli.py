"""The argparse pieces `python -m hpcai_jax.report` and `python -m hpcai_jax.sweep` share: help
that shows every option's default, and bad input as one line (docs/score.md §9).

argparse's own error prints the usage block and a second line; the house rule is one line on
stderr naming the flag, exit 2, which `hpcai_jax.errors.tool_main` prints for a UsageError.
"""

from __future__ import annotations

import argparse

from hpcai_jax import errors


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Each option's help with "(default: ...)" (or "(required)"), unless its help already says
    its default; the description and epilog as written, so example command lines stay whole."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not action.option_strings or "(default" in text:
            return text
        if action.required:
            return f"{text} (required)"
        return super()._get_help_string(action)


class Parser(errors.Parser):
    """The tools' parser (one-line errors), with the report's help formatter."""

    def __init__(self, **kwargs):
        super().__init__(formatter_class=HelpFormatter, **kwargs)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (argparse names the flag in front of the message)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value
