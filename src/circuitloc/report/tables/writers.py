"""The table jobs: read the score, curve and analysis artifacts, build a table (`tables`,
`analysis`, `sweep`) and write it as CSV and markdown (`tables.write_table`). The figures these
jobs have beside their tables are drawn by `figures` from what the writers return."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from circuitloc import io
from circuitloc import metrics
from circuitloc.modelcard import ModelCard
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.report.tables import analysis
from circuitloc.report.claims import judge as claims
from circuitloc.report.sweep import capacity
from circuitloc.report.sweep import mde as power
from circuitloc.report.sweep import stability
from circuitloc.report.sweep import summary as sweep
from circuitloc.report.tables.analysis import robustness
from circuitloc.report.records import SweepInputs, SweepStats, TableFiles, TableJob
from circuitloc.report.sweep.paired import paired
from circuitloc.report.tables.paper import table1_form, table2_form
from circuitloc.report.tables.localization import table1, table2, write_table
from circuitloc.report.sweep.verdicts import overview


def _read(paths: dict) -> dict:
    return {m: io.read_parquet(p) for m, p in paths.items()}


def _cards(paths: dict) -> dict:
    return {m: ModelCard.read(p) for m, p in paths.items()}


def write_table1(job: TableJob, cards: dict, scores: dict, curves: dict, out: TableFiles):
    """Table 1 (localization) of one task and ablation over the models (dicts model -> path), with
    the job's threshold and the conditioning rule's `min_heldout`."""
    df = table1(job.task, _cards(cards), _read(scores), _read(curves), job.threshold, job.min_heldout)
    write_table(df, out.csv, out.md,
                f"Table 1 — {job.task}, {job.ablation} ablation (heads-to-{100 * float(job.threshold):g}%; "
                "percentages n/a where the clean metric's interval does not lie above its floor; every column in "
                "the CSV)", shown=table1_form(df))


def write_table2(job: TableJob, cards: dict, curves: dict, controls: dict, out: TableFiles,
                 scores: dict | None = None):
    """Table 2 (the top unit alone against random control units) of one task and ablation."""
    df = table2(job.task, _cards(cards), _read(curves), _read(controls), _read(scores) if scores else None, job)
    write_table(df, out.csv, out.md, f"Table 2 — {job.task}, {job.ablation} ablation: top head alone, and random "
                                     "non-top units as a control (any layer below six layers, else the middle "
                                     "third: control_rule; the largest draw with its 95% interval; audit agrees: the "
                                     "guided (or screened) greedy's audited steps where its pick was the exact best, exact "
                                     "Clopper-Pearson 95% interval)", shown=table2_form(df))


def write_specificity_table(parts: list, out_csv, out_md):
    """The specificity rows of every model and ablation in one table."""
    df = pl.concat([io.read_parquet(p) for p in parts], how="diagonal_relaxed")
    write_table(df, out_csv, out_md, "Specificity — each task's top unit ablated on every task (damage, 1 = task "
                                     "gone) and on neutral text (% rise of next-token loss)")


def write_stability(task, entries: list, primary: str, out_csv, out_md) -> list:
    """entries: dicts with model, card, ablation, prompts (per-prompt scores), dataset, and for
    facts the per-model and shared unit scores. Returns the figure's panels, the primary ablation's
    (title, {condition: unit, layer, head, drop}) (`figures.fig_stability`)."""

    rows, panels = [], []
    for e in entries:
        e = {**e, "attention": ModelCard.read(e["card"]).attention}
        if registry.task(task).shared:  # the model's own prompts vs those its whole family knows
            if e.get("shared") is None:
                rows.append({"task": task, "model": e["model"], "attention": e["attention"], "ablation": e["ablation"],
                             "split": analysis.SHARED_SPLIT,
                             "note": f"no shared set (a family of one, or tasks.{task}.shared: false)"})
                continue
            row, m = analysis.shared_stability_row(task, e["model"], e["attention"], e["ablation"],
                                                   io.read_parquet(e["scores"]), io.read_parquet(e["shared"]))
            r, mm = [row], [m]
        else:
            r, mm = analysis.stability_rows(task, e["model"], e["attention"], e["ablation"],
                                            io.read_parquet(e["prompts"]), io.read_parquet(e["dataset"]))
            exact = ~metrics.estimated(io.read_parquet(e["scores"]))  # a guided scan: per prompt only these
            if not exact.all():
                r = [{**x, "note": x.get("note") or f"guided scan: over the {int(exact.sum())} units scored exactly"}
                     for x in r]
        rows += r
        if e["ablation"] == primary:
            units = io.read_parquet(e["scores"]).select("unit", "layer", "head")
            panels += [(title, {c: units.join(d, on="unit", how="left", maintain_order="left")
                                for c, d in conds.items()}) for title, conds in mm]
    write_table(io.frame(rows), out_csv, out_md, f"Stability — {task}: the same unit scores on two input "
                f"conditions (a_top_freq, b_top_freq: how often a resample of a half picks its top unit)")
    return panels


def write_robustness(table1s: dict, out_csv, out_md):
    """table1s: {(task, ablation): Table 1 CSV}: MHA vs GQA under every ablation kind and unit."""

    write_table(robustness({k: io.read_csv(p) for k, p in table1s.items()}), out_csv, out_md,
                "Robustness — MHA vs GQA (top head score, heads-to-80%) under every ablation kind and unit")


def write_sweep(job: TableJob, inputs: SweepInputs, stats: SweepStats, out: tuple[TableFiles, TableFiles],
                models_out=None):
    """The sweep's table and paired tests (`out`: their files, in that order) for one task and
    ablation. A toy that failed its held-out checks (`acceptance.enforce: false` in a sweep), shows
    no task behaviour or whose damage the conditioning rule refused is counted, never used.
    `stats`: ci, alpha, p_adjust and the primary family (config `sweep:`). `inputs.layer_table1`:
    for a kv ablation, the Table 1 of the same kind under layer units, so that a KV-1 toy's groups
    (its layers) meet the MHA toy's layers.
    `models_out`: where the per-model rows go (`table` own, or layers: the layer twin's), which the
    overview resamples (`stability.overview_stability`).
    Returns (summary, per-model rows) for the figure (`figures.fig_sweep`)."""

    task, ablation, ci = job.task, job.ablation, stats.ci
    table_out, paired_out = out
    passed = {m: bool((ModelCard.read(p).checks or {}).get("passed", True)) for m, p in inputs.cards.items()}
    pm = sweep.per_model(io.read_csv(inputs.table1), inputs.meta, passed, task)
    layers = sweep.per_model(io.read_csv(inputs.layer_table1), inputs.meta, passed, task) if inputs.layer_table1 \
        else None
    summary = sweep.summarize(pm, ci)
    if models_out is not None:
        io.write_parquet(pl.concat([pm.with_columns(table=pl.lit("own"))] + ([] if layers is None else [
            layers.with_columns(table=pl.lit("layers"))]), how="diagonal_relaxed"), models_out)
    kind, unit = registry.parse_ablation(ablation)
    pairs = paired(pm, stats, unit, layers, kind)
    n_resamples = stability.resamples(stats.primary, kind, unit)
    pairs = stability.with_stability(pm, pairs, lambda p, lay: paired(p, stats, unit, lay, kind), n_resamples, layers)
    pairs = capacity.vs_twin(pm, pairs, ci)  # the parameter-count question, where a size has a matched twin
    pct = f"{100 * float(job.threshold):g}%"
    write_table(summary, table_out.csv, table_out.md, f"Sweep — {task}, {ablation} ablation: mean and "
                f"{int(ci * 100)}% t-interval across seeds per size and KV-head count (heads-to-{pct}: median, "
                "censored count), over the seeds of each row's paired comparisons with MHA; every measure depends "
                "on the unit count (n_units): compare rows of equal counts")
    n = {f: int(pairs[f"n_tests_{f}"][0]) if len(pairs) else 0 for f in (sweep.PRIMARY, sweep.EXPLORATORY)}
    write_table(pairs, paired_out.csv, paired_out.md, f"Sweep — {task}, {ablation} ablation: each KV-head count "
                "against the MHA model of the same seed and size, tested only at equal unit counts (comparison; "
                "vs_unit layer: the MHA toy's layers) (top head, held out only, and curve area: paired t-test; "
                f"heads-to-{pct}, greedy (chosen on the scoring prompts, reported held out) and ranked: exact "
                f"sign-flip test on censoring-aware ranks; p adjusted by {stats.p_adjust} within its family "
                f"(*_family): {n[sweep.PRIMARY]} primary tests, {n[sweep.EXPLORATORY]} exploratory; verdict from the "
                "top head and verdict_heads_to, 'yes' only when both are significant, directions in direction_*; "
                f"verdict_stability: the share of {n_resamples} resamples of the seeds that give the same verdict)")
    return summary, pm


def sweep_models_path(paired_csv) -> Path:
    """Where `write_sweep` put the per-model rows of a paired table (beside it)."""
    p = Path(paired_csv)
    return p.with_name(p.name.replace("sweep_paired_", "sweep_models_", 1)).with_suffix(".parquet")


def _sweep_models(paths: dict) -> dict | None:
    """{(task, ablation): (per-model rows, layer rows or None)} from each paired table's models file;
    None when one is missing (a table from before the file, e.g. another run's)."""
    out = {}
    for k, p in paths.items():
        f = sweep_models_path(p)
        if not f.is_file():
            return None
        df = io.read_parquet(f)
        own, lay = df.filter(pl.col("table") == "own"), df.filter(pl.col("table") == "layers")
        out[tuple(k.split("/", 1))] = (own.drop("table"), lay.drop("table") if len(lay) else None)
    return out


def write_sweep_overview(paired: dict, out_csv, out_md, opts: dict, extra: dict | None = None):
    """Every paired comparison of the sweep in one table ({"task/ablation": paired csv}), with p
    adjusted within its family over all of them (`verdicts.overview`; opts as for `write_sweep`),
    each verdict's stability (`stability.beside_overview`: `verdict_all_stability` from the per-model
    rows `write_sweep` put beside each paired table) and its minimum detectable effect (`power`).
    `extra`: {"task (label)/ablation": paired csv} of another run (config `sweep.adjust_with`, e.g.
    facts ranked by accuracy), adjusted together."""

    paths = {**paired, **(extra or {})}
    tables = {tuple(k.split("/", 1)): io.read_csv(p, ("seeds",)) for k, p in paths.items()}
    st = SweepStats.of(opts)
    data = _sweep_models(paths)
    df = power.with_mde(stability.beside_overview(overview(tables, st), tables, data, st), st)
    n = {f: int(df[f"n_tests_{f}_all"][0]) if len(df) else 0 for f in (sweep.PRIMARY, sweep.EXPLORATORY)}
    units = ", ".join(st.primary.units)
    resamples = (f"{stability.PRIMARY_RESAMPLES} resamples for a primary verdict, {stability.EXPLORATORY_RESAMPLES} "
                 "for the others" if data is not None else "not computed: a table without its per-model rows")
    write_table(df, out_csv, out_md, f"Sweep overview — every task, unit and size against MHA: p raw, "
                f"{st.p_adjust}-adjusted within its family in its table (_table) and over every table (_all): the "
                f"primary family ({', '.join(st.primary.measures)} under {units} units and "
                f"{', '.join(st.primary.kinds)} ablation, every task: {n[sweep.PRIMARY]} "
                f"tests) on its own, the {n[sweep.EXPLORATORY]} other tests as an exploratory family; rows at "
                "different unit counts are described, not tested; verdict_table and verdict_all: one verdict function "
                "on the table's directions, with the one or the other adjustment; verdict_table_stability and "
                "verdict_all_stability: the share of seed resamples giving the same verdict (measure and direction) "
                f"beside which each stands (verdict_all's: one draw of the seeds for every table, {resamples}); "
                "yes_threshold .. mde_top_head_pct: whether a yes was reachable and the minimum detectable effect "
                "(docs/method.md); verdict_by_kind and holds_under: what the same comparison says under each ablation "
                "kind, each kind adjusted within its copy of the primary family (kinds_adjustment), and the kinds "
                "that agree with the primary one")
    return df


def write_claims(cards: dict, tables: dict, threshold: float, out_csv, out_md) -> pl.DataFrame:
    """The claims table from the run's cards (model -> card path) and tables (name -> CSV path; a
    table the run does not make is simply absent), at the run's curve threshold."""
    run = claims.Run({n: io.read_csv(p) for n, p in tables.items()}, {m: ModelCard.read(p) for m, p in cards.items()},
                     float(threshold))
    df = claims.claims(run)
    write_table(df, out_csv, out_md, "The paper's claims (arXiv 2605.08853) checked on this run")
    return df
