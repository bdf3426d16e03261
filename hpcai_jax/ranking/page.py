"""One entry's page (docs/ranking.md, "Entry pages"): every figure check re-derived and from
what, the epochs and the quality curve (an inline SVG), every check the package went through,
the flagfile, links to the run's record, MLLOG and flagfile, and the sentence to cite it with."""

from __future__ import annotations

from html import escape

from hpcai_jax.ranking import BENCHMARK
from hpcai_jax.ranking.columns import CPU_EXAMPLES, Meta, accelerators, target
from hpcai_jax.ranking.entries import Entry
from hpcai_jax.ranking.style import LEVELS_TEXT, STYLE, page
from hpcai_jax.units import formatted


def figures(e: Entry) -> list[tuple[str, str, str]]:
    """(figure, value, what check re-derived it from): docs/submission.md §3's table."""
    ttt = formatted(e.time_to_target_s, "{:.3f} s")
    return [
        ("FLOPs per step", formatted(e.flops_per_step), "the MLLOG's flops_per_step"),
        ("Eq. 6 FLOPS", formatted(e.flops), "Σ epoch FLOPs ÷ Σ MLLOG epoch times"),
        ("quality", f"{e.quality:.6g} ({escape(e.metric)})", "the MLLOG's last eval_accuracy"),
        ("target, n", f"{escape(target(e))}, n = {e.exponent:g}", "the packed flagfile"),
        ("penalty", formatted(e.penalty, "{:.6g}"), "(quality ÷ target)^n"),
        ("VFLOPS", formatted(e.vflops), "re-derived FLOPS × penalty"),
        ("time to target", ttt, "the MLLOG's first eval_stop at the target − run_start"),
        ("division", escape(e.division), "rules.judge on the flagfile, mesh and data sizes"),
    ]


def curve_svg(e: Entry, width: int = 420, height: int = 200) -> str:
    """The ensemble's quality at each evaluation against the time since run_start, from 0, with
    the target as a dashed line."""
    if not e.curve:
        return "<p>No evaluation during training.</p>"
    x1 = max(p[0] for p in e.curve) or 1.0
    y1 = max([p[1] for p in e.curve] + [e.target]) * 1.15 or 1.0
    left, right, top, bottom = 50, 15, 15, 35
    px = lambda x: left + (width - left - right) * x / x1  # noqa: E731
    py = lambda y: top + (height - top - bottom) * (1 - y / y1)  # noqa: E731
    dots = "".join(
        f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="#236"/>' for x, y in e.curve
    )
    points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in e.curve)
    base, target = height - bottom, py(e.target)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        'aria-label="ensemble quality against time since run_start" font-size="11">'
        f'<rect width="{width}" height="{height}" fill="#fafafa" stroke="#ccc"/>'
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{base}" stroke="#888"/>'
        f'<line x1="{left}" x2="{width - right}" y1="{base}" y2="{base}" stroke="#888"/>'
        f'<line x1="{left}" x2="{width - right}" y1="{target:.1f}" y2="{target:.1f}" '
        'stroke="#c33" stroke-dasharray="5 3"/>'
        f'<text x="{left + 4}" y="{target - 4:.1f}" fill="#c33">target '
        f"{e.target:g}</text>"
        f'<polyline points="{points}" fill="none" stroke="#236" stroke-width="2"/>{dots}'
        f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{y1:.3g}</text>'
        f'<text x="{left - 4}" y="{base}" text-anchor="end">0</text>'
        f'<text x="{left}" y="{base + 14}">0 s</text>'
        f'<text x="{width - right}" y="{base + 14}" text-anchor="end">{x1:.3g} s</text>'
        f'<text x="{(left + width - right) / 2:.0f}" y="{height - 5}" text-anchor="middle">'
        f"{escape(e.metric)} of the ensemble at each evaluation, time since run_start</text></svg>"
    )


def _rows(pairs) -> str:
    return "\n".join("<tr>" + "".join(f"<td>{c}</td>" for c in p) + "</tr>" for p in pairs)


def entry_page(e: Entry, meta: Meta, sentence: str) -> str:
    rid = escape(e.result_id)
    epochs = [(i, n, formatted(f), f"{w:.6f}") for i, n, f, w in e.epochs]
    checks = "".join(f"<li>{escape(c)}</li>" for c in e.checks + e.notes)
    violations = "".join(f"<li>{escape(v)}</li>" for v in e.violations) or "<li>none</li>"
    body = f"""<p><a href="../index.html">← the list</a></p>
<h1>{escape(BENCHMARK)} result {rid}</h1>
{f'<p class="banner">{escape(CPU_EXAMPLES)}</p>' if meta.cpu_examples else ""}
<p class="cite"><b>Cite as:</b> {escape(sentence)}</p>
<table><tbody>
{
        _rows(
            [
                ("system", escape(e.system)),
                ("organisation", escape(e.organisation)),
                ("accelerators", escape(accelerators(e))),
                ("workload", escape(e.workload)),
                ("model, data set", f"{escape(e.model)}, {escape(e.dataset)}"),
                ("division, category", f"{escape(e.division)}, {escape(e.category)}"),
                ("M, P_degree", f"{e.ensemble_size}, {e.parallel_degree}"),
                ("STREAM Triad per device", formatted(e.triad_gb_s_per_device, "{:.2f} GB/s")),
                ("software", escape(e.software)),
                ("git commit", escape(e.git_commit)),
                ("run date", escape(e.date)),
                ("verification level", escape(e.level)),
                ("package", f"{escape(e.package)} (sha256 <code>{escape(e.digest)}</code>)"),
                ("run", escape(e.run_id)),
            ]
        )
    }
</tbody></table>
<h2>Figures re-derived by check</h2>
<table><thead><tr><th>figure</th><th>value</th><th>re-derived from</th></tr></thead><tbody>
{_rows(figures(e))}
</tbody></table>
<h2>Epochs (Eq. 6)</h2>
<table><thead><tr><th>epoch</th><th>steps</th><th>FLOPs</th><th>wall [s]</th></tr></thead>
<tbody>{_rows(epochs)}</tbody></table>
<h2>Quality during training</h2>
{curve_svg(e)}
<h2>What was checked</h2>
<ul>{checks}</ul>
<p>{LEVELS_TEXT}</p>
<h2>Division rules this run breaks</h2>
<ul>{violations}</ul>
<h2>Files</h2>
<p><a href="../runs/{rid}.json">record</a>, <a href="../runs/{rid}.mllog">MLLOG</a>,
<a href="../runs/{rid}.flags">flagfile</a> (copies from the package).</p>
<pre>{escape(e.flags)}</pre>"""
    return page(f"{BENCHMARK} result {e.result_id}", body, STYLE)
