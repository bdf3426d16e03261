"""ranking.csv, ranking.json and ranking.md (docs/ranking.md, "Outputs"): the same tables as
index.html, sorted the same way, with no time stamp but the list's own `--date`."""

from __future__ import annotations

import csv
import io
import json

from hpcai_jax.ranking import BENCHMARK, LIST_VERSION, SCHEMA_VERSION
from hpcai_jax.ranking.columns import CPU_EXAMPLES, HEAD, Meta, cells, cite
from hpcai_jax.ranking.entries import Entry
from hpcai_jax.ranking.order import TIE_BREAKS, Ranking, Row

CSV_HEAD = (
    "workload",
    "division",
    "category",
    "rank",
    "result_id",
    "system",
    "organisation",
    "devices",
    "device_kind",
    "ensemble_size",
    "parallel_degree",
    "flops_per_s",
    "vflops_per_s",
    "metric",
    "quality",
    "target",
    "target_official",
    "penalty",
    "time_to_target_s",
    "triad_gb_per_s_per_device",
    "software",
    "date",
    "level",
    "repeats",
    "vflops_min",
    "vflops_max",
)


def _blank(value) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def csv_text(ranking: Ranking) -> str:
    """One line per row of every table, figures at full precision (repr)."""
    buf = io.StringIO()
    out = csv.writer(buf, lineterminator="\n")
    out.writerow(CSV_HEAD)
    for table in ranking.tables:
        for row in table.rows:
            e, spread = row.entry, row.spread or (None, None)
            out.writerow(
                _blank(v)
                for v in (
                    *table[:3],
                    row.rank,
                    e.result_id,
                    e.system,
                    e.organisation,
                    e.devices,
                    e.device_kind,
                    e.ensemble_size,
                    e.parallel_degree,
                    e.flops,
                    e.vflops,
                    e.metric,
                    e.quality,
                    e.target,
                    e.target_official,
                    e.penalty,
                    e.time_to_target_s,
                    e.triad_gb_s_per_device,
                    e.software,
                    e.date,
                    e.level,
                    len(row.repeats),
                    *spread,
                )
            )
    return buf.getvalue()


def entry_json(e: Entry, meta: Meta) -> dict:
    return {
        "result_id": e.result_id,
        "package": e.package,
        "package_sha256": e.digest,
        "run_id": e.run_id,
        "workload": e.workload,
        "model": e.model,
        "dataset": e.dataset,
        "division": e.division,
        "violations": list(e.violations),
        "category": e.category,
        "system": e.system,
        "organisation": e.organisation,
        "devices": e.devices,
        "device_kind": e.device_kind,
        "sys_scale": e.devices,
        "ensemble_size": e.ensemble_size,
        "parallel_degree": e.parallel_degree,
        "flops_per_step": e.flops_per_step,
        "flops_per_s": e.flops,
        "vflops_per_s": e.vflops,
        "metric": e.metric,
        "quality": e.quality,
        "target": e.target,
        "target_official": e.target_official,
        "exponent": e.exponent,
        "penalty": e.penalty,
        "time_to_target_s": e.time_to_target_s,
        "triad_gb_per_s_per_device": e.triad_gb_s_per_device,
        "software": e.software,
        "git_commit": e.git_commit,
        "date": e.date,
        "levels": list(e.levels),
        "checks": list(e.checks),
        "measured": list(e.notes),
        "cite": cite(e, meta),
    }


def _row_json(row: Row) -> dict:
    spread = row.spread
    return {
        "rank": row.rank,
        "result_id": row.entry.result_id,
        "repeats": [r.result_id for r in row.repeats],
        "vflops_spread": list(spread) if spread else None,
    }


def json_text(ranking: Ranking, meta: Meta) -> str:
    doc = {
        "schema_version": SCHEMA_VERSION,
        "benchmark": BENCHMARK,
        "list_version": LIST_VERSION,
        "date": meta.date,
        "cpu_examples": meta.cpu_examples,
        "all_runs": ranking.all_runs,
        "order": TIE_BREAKS,
        "tables": [
            {
                "workload": t.workload,
                "division": t.division,
                "category": t.category,
                "rows": [_row_json(r) for r in t.rows],
            }
            for t in ranking.tables
        ],
        "entries": [entry_json(e, meta) for e in ranking.entries],
        "not_listed": [{"package": n.package, "why": n.why} for n in ranking.not_listed],
    }
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;")


def md_text(ranking: Ranking, meta: Meta) -> str:
    lines = [f"# {BENCHMARK} list ({LIST_VERSION}){f', {meta.date}' if meta.date else ''}", ""]
    if meta.cpu_examples:
        lines += [f"**{CPU_EXAMPLES}**", ""]
    lines += [f"Ranked by {TIE_BREAKS}. Levels: docs/ranking.md.", ""]
    for table in ranking.tables:
        lines += [f"## {_md_cell(table.title)}", "", "| " + " | ".join(HEAD) + " |"]
        lines.append("|" + " --- |" * len(HEAD))
        lines += ["| " + " | ".join(map(_md_cell, cells(r))) + " |" for r in table.rows]
        lines.append("")
    if ranking.not_listed:
        lines += ["## Not listed", ""]
        lines += [f"- {_md_cell(n.package)}: {_md_cell(n.why)}" for n in ranking.not_listed]
        lines.append("")
    return "\n".join(lines)
