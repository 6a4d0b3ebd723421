"""A table as a page of its own: the HTML view of a table job's CSV that the report shows in the
browser (Snakemake's report displays HTML, images and PDF inline and offers every other file, a CSV
too, as a download only). The page is self-contained: the table as the markdown file shows it, every
column of the CSV below it where that form leaves some out, and the CSV itself as a download link."""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path

import polars as pl

from circuitloc import metrics

_STYLE = """body { font-family: system-ui, sans-serif; font-size: 13px; margin: 12px; color: #1f2937; }
h1 { font-size: 15px; font-weight: 600; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 6px 0 14px; }
th, td { border: 1px solid #d1d5db; padding: 3px 6px; text-align: left; vertical-align: top; }
td { max-width: 36em; }
td.num { white-space: nowrap; }
th { background: #f3f4f6; position: sticky; top: 0; min-width: 4em; }
tr:nth-child(even) td { background: #f9fafb; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
summary { cursor: pointer; font-weight: 600; margin: 8px 0; }
p.note { color: #4b5563; }"""


def display_rows(df: pl.DataFrame) -> tuple[list[str], list[list]]:
    """(shown columns, rows of cells) as a reader sees them: floats to 4 significant digits, NaN and
    null empty; a count with a `{column}_bounded` flag beside it is written '> K' where bounded (the
    flag column is not shown). The markdown and the HTML of a table share this form."""

    flags = {c: f"{c}_bounded" for c in df.columns if df.schema.get(f"{c}_bounded") == pl.Boolean}
    shown = [c for c in df.columns if c not in flags.values()]

    def cell(v, c, is_float, bounded):
        if v is None or (is_float and math.isnan(v)):
            return ""
        if c in flags:
            return metrics.heads_to_label(v, bool(bounded))
        return f"{v:.4g}" if is_float else v

    floats = {c: t.is_float() for c, t in df.schema.items()}
    return shown, [[cell(r[c], c, floats[c], r.get(flags.get(c))) for c in shown] for r in df.iter_rows(named=True)]


def html_table(df: pl.DataFrame) -> str:
    """`df` as an HTML table of its display form (`display_rows`), every cell escaped text."""
    if df.height == 0:
        return '<p class="note">No rows in this run.</p>'
    cols, rows = display_rows(df)
    numeric = {c for c, t in df.schema.items() if t.is_numeric()}
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if c in numeric else ""}>{html.escape(str(v))}</td>'
                                    for c, v in zip(cols, r)) + "</tr>\n" for r in rows)
    return f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}</tbody></table></div>'


def table_page(title: str, csv, sections: list[tuple[str, pl.DataFrame]], full: pl.DataFrame | None = None) -> str:
    """The page: `title`, each (heading, frame) of `sections`, then `full` (every column of the CSV)
    folded under a summary, and the CSV at `csv` (already written) as a download link."""
    path = Path(csv)
    uri = "data:text/csv;base64," + base64.b64encode(path.read_bytes()).decode("ascii")
    parts = [f"<h1>{html.escape(title)}</h1>"]
    for heading, frame in sections:
        parts += [f"<h2 style='font-size:14px'>{html.escape(heading)}</h2>" if heading else "", html_table(frame)]
    if full is not None:
        parts.append(f"<details><summary>Every column of the CSV ({full.width} columns)</summary>"
                     f"{html_table(full)}</details>")
    parts.append(f'<p class="note">The table as CSV, every column at full precision: '
                 f'<a href="{uri}" download="{html.escape(path.name)}">{html.escape(path.name)}</a></p>')
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_STYLE}</style></head>\n<body>\n" + "\n".join(p for p in parts if p) + "\n</body></html>\n")


def html_path(csv) -> Path:
    """Where a table's HTML view lies: beside its CSV, same name (the rule declares it for the report)."""
    return Path(csv).with_suffix(".html")
