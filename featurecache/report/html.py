"""The report page: one self-contained HTML file next to its PNGs and CSVs (no server, no scripts)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from featurecache.report.data import Panel

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1320px;
       color: #222; background: #fff; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #666; font-size: 0.9em; }
.warning { background: #fff4d6; border-left: 4px solid #e0a800; padding: 6px 10px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(620px, 1fr)); gap: 18px; }
figure { margin: 0; padding: 10px; border: 1px solid #e3e3e3; border-radius: 6px; }
figure img { width: 100%; height: auto; display: block; }
figcaption { font-size: 0.88em; color: #444; margin-top: 6px; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: left; } td.n { text-align: right; }
"""


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _figure(panel: Panel) -> str:
    return (
        f'<figure id="{_esc(panel.name)}"><img src="{_esc(panel.name)}.png" alt="{_esc(panel.title)}">'
        f"<figcaption>{_esc(panel.caption)} — "
        f'<a href="{_esc(panel.name)}.csv">numbers (CSV)</a></figcaption></figure>'
    )


def _summary_table(rows: Sequence[tuple[str, Any]]) -> str:
    body = "".join(f'<tr><th>{_esc(k)}</th><td class="n">{_esc(v)}</td></tr>' for k, v in rows)
    return f'<table id="summary">{body}</table>'


def _failures_table(failures: list[dict[str, Any]], limit: int = 50) -> str:
    if not failures:
        return "<p>No input failed.</p>"
    head = "<tr><th>path</th><th>stage</th><th>error</th><th>message</th></tr>"
    body = "".join(
        f"<tr><td>{_esc(f.get('path'))}</td><td>{_esc(f.get('stage'))}</td><td>{_esc(f.get('error_class'))}</td>"
        f"<td>{_esc(str(f.get('message', ''))[:200])}</td></tr>"
        for f in failures[:limit]
    )
    more = f"<p>… and {len(failures) - limit} more (failures.csv)</p>" if len(failures) > limit else ""
    return f'<table id="failures">{head}{body}</table>{more}'


def render_page(
    title: str,
    panels: Sequence[Panel],
    summary: dict[str, Any],
    failures: list[dict[str, Any]],
    generated: str,
) -> str:
    sections: dict[str, list[Panel]] = {}
    for p in panels:
        sections.setdefault(p.section, []).append(p)
    rows = [
        ("entries", summary.get("entries")), ("tokens", summary.get("tokens")), ("atoms", summary.get("atoms")),
        ("chains", summary.get("chains")), ("interfaces", summary.get("interfaces")),
        ("MSAs (unique sequences)", summary.get("msas")),
        ("entries with an MSA from files", summary.get("entries_with_msa_from_files")),
        ("entries with an MSA deeper than the query", summary.get("entries_with_deep_msa")),
        ("entries with an MSA stored (single-sequence included)", summary.get("entries_with_stored_msa")),
        ("components", summary.get("components")), ("failed inputs", summary.get("failures")),
        ("store size: parts and index tables (MB)", f"{summary.get('bytes_total', 0) / 1e6:.2f}"),
    ]  # fmt: skip
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
        f'<p class="meta">generated {_esc(generated)} · numbers: <a href="summary.json">summary.json</a>, '
        '<a href="entries.csv">entries.csv</a>, <a href="failures.csv">failures.csv</a></p>',
    ]
    if summary.get("first_build_unfinished"):
        parts.append(f'<p class="warning"><b>Partial:</b> {_esc(summary["first_build_unfinished"])}.</p>')
    parts.append(_summary_table(rows))
    for section, items in sections.items():
        parts.append(f"<h2>{_esc(section)}</h2>")
        parts.append('<div class="grid">' + "".join(_figure(p) for p in items) + "</div>")
        if section == "How the build went":
            parts.append("<h3>Failed inputs</h3>" + _failures_table(failures))
    parts.append("</body></html>")
    return "\n".join(parts)
