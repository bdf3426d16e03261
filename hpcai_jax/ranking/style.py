"""The pages' shared frame: one inline style sheet, system fonts only, and the levels' legend."""

from __future__ import annotations

from html import escape

LEVELS_TEXT = (
    "Verification levels (docs/ranking.md): <b>L1</b> every figure re-derived from the "
    "package's records and MLLOGs by <code>check</code>; <b>L2</b> the quality measured again "
    "from the package's weights (<code>check --reevaluate</code>); <b>L3</b> a partial re-run "
    "reproduced within its tolerance (<code>check --rerun_steps=N</code>). An entry shows only "
    "the levels its package passed."
)

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #111; background: #fff; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #bbb; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #e8eef6; cursor: pointer; } tbody tr:nth-child(even) { background: #f6f6f6; }
td.id, code, pre { font-family: ui-monospace, monospace; } td.id, td.n { white-space: nowrap; }
pre { background: #f4f4f4; padding: 0.6em; overflow-x: auto; font-size: 0.8em; }
.banner { background: #fff3cd; border: 1px solid #e0c060; padding: 0.6em; font-weight: bold; }
.cite { background: #eef6ee; border: 1px solid #8b8; padding: 0.6em; }
.scroll { overflow-x: auto; } .files { margin-top: 2em; font-size: 0.9em; }
"""


def page(title: str, body: str, style: str, script: str = "") -> str:
    """A whole HTML document; `title` is escaped, `body` is HTML already."""
    js = f"<script>{script}</script>\n" if script else ""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{escape(title)}</title>\n<style>{style}</style>\n</head>\n<body>\n"
        f"{body}\n{js}</body>\n</html>\n"
    )
