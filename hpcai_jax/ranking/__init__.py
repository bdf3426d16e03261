"""`python -m hpcai_jax.ranking PKG_DIR... --out=DIR`: submission packages that pass `check`
(hpcai_jax/submission/verify.py, run in this process) turned into an HPC AI500 V3.0 list, one
table per workload × division × category, ranked by VFLOPS, each entry with a stable result ID,
its verification level and a page of its own. docs/ranking.md specifies the rules, the levels,
the outputs (ranking.json's schema among them) and how to cite a result.

collect.py finds the packages and their digests, verify.py runs check on each, entries.py reads
a listed package's runs into entries, ids.py names them, order.py ranks them into tables,
render_html.py and render_text.py write the outputs, output.py puts them in place.
"""

from __future__ import annotations

# The list's version: a result ID is derived from it and from the package's digest, so a list of
# another version gives every result another ID (docs/ranking.md, "Result IDs").
LIST_VERSION = "v3.0"
BENCHMARK = "HPC AI500 V3.0"
# ranking.json's schema (docs/ranking.md, "ranking.json"): raised when a field changes meaning.
SCHEMA_VERSION = 1
