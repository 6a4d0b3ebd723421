"""What a run cost: Snakemake's benchmark files summed per stage (rule) and per model.

Every rule that runs a script writes a benchmark file (``benchmark:``), a TSV with the header
``s  h:m:s  max_rss  max_vms  max_uss  max_pss  io_in  io_out  mean_load  cpu_time`` and one row per
repeat: wall seconds, peak resident memory (MB), CPU seconds (user + system, child processes
included). A job's cost is the mean of its rows (one row unless the rule asks for repeats).

The table (``cost_table``) has one row per (stage, model) with the jobs, the summed wall and CPU
seconds and the peak RSS (the largest of any one job: jobs run apart, so peaks do not add up),
then per stage (model ``all``), per model (stage ``all``) and the whole run (``all``, ``all``).
Jobs over several models (tables, figures) count under model ``(shared)``. Snakemake writes
``NA`` for CPU time and memory when a job ended before its first sample: such a job counts in
``jobs`` and ``wall_s`` only, and a group where no job was sampled shows no value. Snakemake samples
a job's processes every 0.5 s for its first 15 s, then every 30 s: wall time is exact, CPU time and
peak memory are those of the last sample, so lower bounds (by up to 30 s of CPU for a long job).
"""

from __future__ import annotations

import logging

import polars as pl

from circuitloc import io
from circuitloc.plan.hooks.dag import STAGES, dag_jobs, stage_of  # noqa: F401
from circuitloc.report.tables.html_page import html_path, table_page

SHARED = "(shared)"
ALL = "all"
COLUMNS = {"s": "wall_s", "cpu_time": "cpu_s", "max_rss": "max_rss_mb"}


def read_benchmark(path) -> dict:
    """One job's cost from its benchmark file: wall_s, cpu_s, max_rss_mb (means over repeats; None
    where Snakemake recorded no sample)."""
    df = pl.read_csv(path, separator="\t", null_values=["NA", "-"], infer_schema_length=0)
    missing = set(COLUMNS) - set(df.columns)
    if missing or df.height == 0:
        raise ValueError(f"{path}: not a Snakemake benchmark file (no rows, or no {sorted(missing)} column)")
    row = df.select(pl.col(c).cast(pl.Float64).mean().alias(new) for c, new in COLUMNS.items()).row(0, named=True)
    return row


# rules that are another form of a stage: a hub model's card without weights of its own



def job_costs(jobs) -> pl.DataFrame:
    """One row per job from (stage, model or None, benchmark file) triples."""
    rows = [{"stage": stage, "model": model or SHARED, **read_benchmark(path)} for stage, model, path in jobs]
    schema = {"stage": pl.String, "model": pl.String, "wall_s": pl.Float64, "cpu_s": pl.Float64,
              "max_rss_mb": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


def _summed(col: str) -> pl.Expr:
    """The sum, or null where no job of the group has a value (a sum of nothing is not 0 s)."""
    return pl.when(pl.col(col).count() > 0).then(pl.col(col).sum()).otherwise(None).alias(col)


def cost_table(jobs: pl.DataFrame) -> pl.DataFrame:
    """Per (stage, model), per stage, per model and in all: jobs, wall_s, cpu_s, max_rss_mb. Stages
    and models keep the order of their first job; `all` rows follow the rows they sum."""
    cols = ["stage", "model", "jobs", "wall_s", "cpu_s", "max_rss_mb"]
    if jobs.height == 0:
        return pl.DataFrame(schema={c: pl.Int64 if c == "jobs" else jobs.schema.get(c, pl.String) for c in cols})
    stages = list(dict.fromkeys(jobs["stage"].to_list()))
    models = list(dict.fromkeys(m for m in jobs["model"].to_list() if m != SHARED)) + [SHARED]
    aggs = [pl.len().alias("jobs"), _summed("wall_s"), _summed("cpu_s"), pl.col("max_rss_mb").max()]
    everything = jobs.with_columns(pl.lit(ALL).alias("_all"))
    parts = [
        jobs.group_by("stage", "model").agg(aggs),
        jobs.group_by("stage").agg(aggs).with_columns(pl.lit(ALL).alias("model")),
        jobs.group_by("model").agg(aggs).with_columns(pl.lit(ALL).alias("stage")),
        everything.group_by("_all").agg(aggs).drop("_all").with_columns(pl.lit(ALL).alias("stage"),
                                                                        pl.lit(ALL).alias("model")),
    ]
    out = pl.concat([p.select(cols) for p in parts if p.height], how="vertical_relaxed")
    stage_rank = {s: i for i, s in enumerate(stages + [ALL])}
    model_rank = {m: i for i, m in enumerate(models + [ALL])}
    return (out.with_columns(pl.col("jobs").cast(pl.Int64),
                             pl.col("stage").replace_strict(stage_rank, return_dtype=pl.Int64).alias("_s"),
                             pl.col("model").replace_strict(model_rank, return_dtype=pl.Int64).alias("_m"))
            .sort("_s", "_m").drop("_s", "_m")
            .with_columns(pl.col("wall_s", "cpu_s").round(2), pl.col("max_rss_mb").round(1)))


def _hms(seconds) -> str:
    if seconds is None:
        return ""
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def _markdown(df: pl.DataFrame, key: str) -> str:
    head = [key, "jobs", "wall", "wall_s", "cpu_s", "max_rss_mb"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in df.iter_rows(named=True):
        name = r[key] if key != "stage / model" else f"{r['stage']} / {r['model']}"
        cells = [name, str(r["jobs"]), _hms(r["wall_s"])] + \
            ["" if r[c] is None else f"{r[c]:.1f}" for c in ("wall_s", "cpu_s", "max_rss_mb")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _parts(table: pl.DataFrame) -> list[tuple[str, pl.DataFrame, str]]:
    """(heading, rows, key) of the three views: per stage, per model (each ending with the run's
    total), per stage and model."""
    total = table.filter((pl.col("stage") == ALL) & (pl.col("model") == ALL))
    per_stage = pl.concat([table.filter((pl.col("model") == ALL) & (pl.col("stage") != ALL)), total])
    per_model = pl.concat([table.filter((pl.col("stage") == ALL) & (pl.col("model") != ALL)), total])
    detail = table.filter((pl.col("stage") != ALL) & (pl.col("model") != ALL))
    return [("Cost of the run per stage", per_stage, "stage"), ("Cost of the run per model", per_model, "model"),
            ("Cost of the run per stage and model", detail, "stage / model")]


NOTE = ("wall and CPU time summed over jobs, max_rss_mb the largest peak resident memory of one job"
        " (MB); (shared): jobs over several models.")


def to_markdown(table: pl.DataFrame) -> str:
    """Three tables: per stage, per model, per stage and model (each ends with the run's total)."""
    return "\n".join(f"### {head}\n\n" + _markdown(df, key) for head, df, key in _parts(table)) + f"\n{NOTE}\n"


def to_html(table: pl.DataFrame, csv_path) -> str:
    """The same three tables as the page the report shows (report.tables.html_page)."""
    def shown(df, key):  # the markdown's cells: wall as h:m:s beside the seconds, one decimal
        cols = ["stage", "model"] if key == "stage / model" else [key]
        text = [pl.Series("wall", [_hms(v) for v in df["wall_s"]], dtype=pl.String)]
        text += [pl.Series(c, ["" if v is None else f"{v:.1f}" for v in df[c]], dtype=pl.String)
                 for c in ("wall_s", "cpu_s", "max_rss_mb")]
        return df.select(*cols, "jobs").hstack(text)

    return table_page(f"Cost of the run ({NOTE})", csv_path, [(h, shown(df, k)) for h, df, k in _parts(table)])


def write_cost(jobs, csv_path, md_path) -> pl.DataFrame:
    """The cost table of (stage, model or None, benchmark file) triples, as CSV, Markdown and the
    HTML page beside the CSV (`html_table.html_path`)."""
    table = cost_table(job_costs(jobs))
    io.write_csv(table, csv_path)
    io.write_text(to_markdown(table), md_path)
    io.write_text(to_html(table, csv_path), html_path(csv_path))
    return table


def write_dag_cost(dag_record, csv_path, md_path) -> pl.DataFrame:
    """The cost table of every job of the recorded DAG (`dag_jobs`); the log names the jobs without a
    benchmark file."""

    found, missing = dag_jobs(dag_record)
    table = write_cost(found, csv_path, md_path)
    logging.getLogger("circuitloc").info("cost of %d jobs; without a benchmark file: %s", len(found), missing)
    return table
