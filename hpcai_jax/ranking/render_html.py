"""index.html and one page per entry (docs/ranking.md, "Outputs"): static and self-contained (no
network at view time, no external font or script), readable with JavaScript off (the inline
script only lets a reader sort a table by a column), every free-text field escaped."""

from __future__ import annotations

from html import escape

from hpcai_jax.ranking import BENCHMARK, LIST_VERSION
from hpcai_jax.ranking.columns import CPU_EXAMPLES, HEAD, Meta, cells, cite
from hpcai_jax.ranking.order import TIE_BREAKS, Ranking, Table
from hpcai_jax.ranking.page import entry_page
from hpcai_jax.ranking.style import LEVELS_TEXT, STYLE, page

NUMERIC = {4, 8, 9, 12, 16, 17}  # columns kept on one line: accelerators, figures, date, level
ONE_LINE = ' class="n"'
SORT = """
for (const t of document.querySelectorAll("table.sortable")) {
  t.querySelectorAll("th").forEach((th, i) => th.addEventListener("click", () => {
    const rows = Array.from(t.tBodies[0].rows), up = th.dataset.up !== "1";
    const v = r => { const s = r.cells[i].dataset.v ?? r.cells[i].textContent;
                     const n = parseFloat(s); return isNaN(n) ? s : n; };
    rows.sort((a, b) => (v(a) > v(b) ? 1 : v(a) < v(b) ? -1 : 0) * (up ? 1 : -1));
    th.dataset.up = up ? "1" : "0"; rows.forEach(r => t.tBodies[0].appendChild(r));
  }));
}
"""


def _table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    body = []
    for row in table.rows:
        texts = cells(row)
        rid = escape(row.entry.result_id)
        tds = [
            f"<td{ONE_LINE if i in NUMERIC else ''}>{escape(t)}</td>" for i, t in enumerate(texts)
        ]
        tds[1] = f'<td class="id"><a href="entries/{rid}.html">{rid}</a></td>'
        tds[8] = f'<td class="n" data-v="{row.entry.flops!r}">{escape(texts[8])}</td>'
        tds[9] = f'<td class="n" data-v="{row.entry.vflops!r}"><b>{escape(texts[9])}</b></td>'
        body.append(f"<tr>{''.join(tds)}</tr>")
    return (
        f"<h2>{escape(table.title)}</h2>\n"
        f'<div class="scroll"><table class="sortable"><thead><tr>{head}</tr></thead>\n'
        f"<tbody>\n{chr(10).join(body)}\n</tbody></table></div>"
    )


def _not_listed(ranking: Ranking) -> str:
    if not ranking.not_listed:
        return ""
    items = "\n".join(
        f"<li><b>{escape(n.package)}</b>: <code>{escape(n.why)}</code></li>"
        for n in ranking.not_listed
    )
    return (
        "<h2>Not listed</h2>\n<p>Packages that did not pass <code>python -m "
        "hpcai_jax.submission check</code> (its first failing line) or were not read:</p>\n"
        f"<ul>{items}</ul>"
    )


def index(ranking: Ranking, meta: Meta) -> str:
    date = f", {escape(meta.date)}" if meta.date else ""
    which = "every run" if ranking.all_runs else "the best entry per system"
    tables = "\n".join(map(_table, ranking.tables)) or "<p>No package passed: nothing listed.</p>"
    body = f"""<h1>{escape(BENCHMARK)} list ({escape(LIST_VERSION)}){date}</h1>
{f'<p class="banner">{escape(CPU_EXAMPLES)}</p>' if meta.cpu_examples else ""}
<p>Every entry's package passed <code>python -m hpcai_jax.submission check</code>: its figures
re-derived from its own records and MLLOGs before it was listed. One table per workload ×
division × category, ranked by {escape(TIE_BREAKS)}; {which}, with the spread of its
configuration's repeats on its system. A result ID links to the entry's page: every figure,
what was checked, and the sentence to cite it with.</p>
<p>{LEVELS_TEXT}</p>
{tables}
{_not_listed(ranking)}
<p class="files">Also: <a href="ranking.csv">ranking.csv</a>, <a href="ranking.json">ranking.json</a>,
<a href="ranking.md">ranking.md</a>.</p>"""
    return page(f"{BENCHMARK} list", body, STYLE, SORT)


def pages(ranking: Ranking, meta: Meta) -> dict[str, str]:
    """Every output page: index.html, then entries/<result ID>.html."""
    out = {"index.html": index(ranking, meta)}
    for e in ranking.entries:
        out[f"entries/{e.result_id}.html"] = entry_page(e, meta, cite(e, meta))
    return out
