"""The README's result sections, generated from a run rather than typed: the IOI Table 1 (paper
form) and the claims table go between their markers, under a measurement note naming the run.

    python -m circuitloc.report.pages.readme RESULTS_DIR README.md --note "Measured on ..."
    python -m circuitloc.report.pages.readme LADDER_RESULTS README.md --run ladder --note "..."

`--run ladder` fills the ladder's sections instead of the default run's: its Table 1 of every task
as one table with a task column, Table 2 of IOI and the claims.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import polars as pl

from circuitloc.atomic import write_text
from circuitloc.errors import ArtifactError
from circuitloc.report.tables.paper import table1_form
from circuitloc.report.tables.localization import to_markdown

SECTIONS = {"table1": "tables/table1_ioi_zero-query.md", "claims": "tables/claims.md"}
# a section given as a tuple of tasks is their Table 1s as one table (`tasks_table`)
RUNS = {"default": SECTIONS,
        "ladder": {"ladder_table1": ("ioi", "induction", "facts"),
                   "ladder_table2": "tables/table2_ioi_zero-query.md", "ladder_claims": "tables/claims.md"}}
TABLE1_CSV = "tables/table1_{task}_zero-query.csv"


def _body(md: str) -> str:
    """A table's markdown without its '### title' line (the README has its own heading)."""
    return "\n".join(line for line in md.strip().splitlines() if not line.startswith("### ")).strip()


def _table(path: Path) -> Path:
    """`path`, or an error naming it when the run has not written it."""
    if not path.is_file():
        raise ArtifactError(f"{path}: missing; run the workflow first (it writes every table)")
    return path


def tasks_table(results: Path, tasks) -> str:
    """Table 1's paper form of several tasks as one markdown table, a task column first and the
    baseline as "metric value" (each task has its own metric), so the README shows every task of a
    run without a table per task."""
    frames = []
    for task in tasks:
        shown = table1_form(pl.read_csv(_table(results / TABLE1_CSV.format(task=task))))
        base = next(c for c in shown.columns if c.startswith("baseline"))
        metric = base.removeprefix("baseline (").removesuffix(")")
        shown = shown.with_columns(pl.format("{} {}", pl.lit(metric), pl.col(base)).alias(base))
        frames.append(shown.rename({base: "baseline"}).select(pl.lit(task).alias("task"), pl.all()))
    return _body(to_markdown(pl.concat(frames, how="vertical_relaxed"), ""))


def fill(readme: str, results: Path, note: str, run: str = "default") -> str:
    """`readme` with each of the run's sections (`RUNS`) between its markers holding the note and
    the run's table."""
    for name, rel in RUNS[run].items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        if begin not in readme or end not in readme:
            raise ArtifactError(f"README: markers {begin} ... {end} not found")
        body = tasks_table(results, rel) if isinstance(rel, tuple) else _body(_table(results / rel).read_text())
        block = f"{begin}\n{note.strip()}\n\n{body}\n{end}"
        readme = re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, readme, flags=re.S)
    return readme


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("readme", type=Path)
    ap.add_argument("--note", required=True, help="which commit, machine and command made the results")
    ap.add_argument("--run", choices=sorted(RUNS), default="default", help="whose sections to fill")
    a = ap.parse_args(argv)
    write_text(fill(a.readme.read_text(), a.results, a.note, a.run), a.readme)


if __name__ == "__main__":
    main()
