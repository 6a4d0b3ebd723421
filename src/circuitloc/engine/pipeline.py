"""The ablation stages of the workflow (scores, curves, specificity), as plain functions the thin
scripts in workflow/scripts call with one settings record (`settings.JobSettings`, built once from
the rule's params) and the files of each ablation (`settings.ScoreFiles`, `CurveFiles`,
`SpecificityFiles`). Models: `models.build`; datasets: `datasets`; the ablation job itself:
`job.AblationJob`; tables: `writers`; figures: `figures`; logging and errors around every job:
`runner`."""

from __future__ import annotations

import numpy as np
import polars as pl
import torch

from circuitloc import io
from circuitloc import metrics
from circuitloc import stats
from circuitloc.engine import ablation
from circuitloc.engine import batching
from circuitloc.engine import greedy
from circuitloc.engine import mha
from circuitloc.engine.guided_scan import guided_scores
from circuitloc.engine.guided_scan import summary as guided_summary
from circuitloc.engine.job import AblationJob, progress, read_ranked
from circuitloc.engine.settings import (
    CurveFiles,
    JobSettings,
    ScoreFiles,
    SpecificityFiles,
)
from circuitloc.engine.sufficiency import sufficiency_curve
from circuitloc.metrics import specificity_verdict
from circuitloc.models.load import load_engine
from circuitloc.plan.vocabulary.builtin_tasks import NEUTRAL
from circuitloc.runner import log
from circuitloc.tasks.common import curve_rows
from circuitloc.tasks.neutral import windows
from circuitloc.tasks.registry import dataset_columns, unit_columns


# -- scores and curves -------------------------------------------------------------------
def _dataset(job: JobSettings, dataset) -> pl.DataFrame:
    return dataset if isinstance(dataset, pl.DataFrame) else \
        io.read_parquet(dataset, dataset_columns(job.task), f"{job.task} dataset")


def for_each_ablation(fn, job: JobSettings, dataset, files: dict, stash=None, loaded=None):
    """`fn` (score or curve) once per ablation of one model on one task, in one job: one model load
    and one dataset read for all of them, still one file per ablation. A job's fixed cost (imports,
    loading the model: ~5 s) is most of a toy's; this pays it once per model and task, not once per
    ablation. `files`: {ablation: its `ScoreFiles` or `CurveFiles`}, in the order to run them. Each ablation starts from the
    torch seed a job of its own would have, so no number depends on the grouping
    (tests/unit/test_pipeline_groups.py). `stash`: a `resume.Stash` that keeps each finished ablation's
    outputs, so a failed or killed job loses none of them. `loaded`: a (model, tokenizer) the job
    already holds (engine.stages: one load for every stage of a model)."""

    full = _dataset(job, dataset)
    _each(f"{fn.__name__} {job.task}/", job, files, stash, loaded,
          lambda ablation_name, out, held, check: fn(job, full, ablation_name, out, loaded=held, self_check=check))


def _each(what: str, job: JobSettings, files: dict, stash, loaded, compute) -> None:
    """The loop of a job of several ablations: each from the torch seed a job of its own would have,
    each finished one kept in `stash`, one already there (an interrupted run's) not computed again;
    the model loaded once (`loaded`, if the job holds it already). `compute(ablation, files,
    loaded, self_check)`: one ablation; `what`: the log's name for the job, before model/ablation.
    Under MHA a kv ablation whose query twin the job runs is written from the twin's files (`engine.mha`)."""

    checked, done = False, {}
    for ablation_name, out in mha.query_first(job.card, files).items():
        if stash is not None and stash.restore(ablation_name, out.outputs()):
            log.info("%s%s/%s: finished by an earlier, interrupted run of this job; kept", what, job.card.name,
                     ablation_name)
            done[ablation_name] = out
            continue
        twin = mha.query_twin(job.card, ablation_name) if mha.is_kv(ablation_name) else None
        if twin in done:  # MHA: a kv group is one query head, its files are the query ablation's (engine.mha)
            mha.write_as_kv(done[twin], out, twin, ablation_name)
            log.info("%s%s/%s: MHA, kv groups are query heads: written from %s, not recomputed", what,
                     job.card.name, ablation_name, twin)
        else:
            loaded = loaded or load_engine(job.card, job.device)
            torch.manual_seed(job.seed)
            compute(ablation_name, out, loaded, not checked)
            checked = True
        done[ablation_name] = out
        if stash is not None:
            stash.keep(ablation_name, out.outputs())
    if stash is not None:
        stash.clear()


def score(job: JobSettings, dataset, ablation_name: str, out: ScoreFiles, loaded=None, self_check: bool = True):
    """One row per unit (drop, damage, bootstrap intervals, top_freq) on the scoring prompts and,
    beside it, the per-prompt metric under every single-unit ablation, which the stability analysis
    splits by condition (a guided scan, `job.scores`: only the units it scored exactly; its table
    marks the others `estimated`, engine.guided_scan). `loaded`: a (model, tokenizer) to reuse; `self_check`: compare the engine
    with a plain forward first."""
    aj = AblationJob(job, dataset, ablation_name, loaded=loaded, self_check=self_check)
    floor_pp = aj.floor_per_prompt()
    floor = float(floor_pp.mean())
    label = f"scores {job.task}/{job.card.name}/{ablation_name}"
    if job.scores.method == "guided":  # attribution proposes, an audit bounds the rest (engine.guided_scan)
        df, per_prompt, walked = guided_scores(aj.probe, aj.units, floor_pp, job.scores, job.seed, job.bootstrap)
        log.info("%s: %s", label, guided_summary(walked, aj.units, job.card.n_layers, job.scores))
    else:
        df, per_prompt = ablation.score_units(aj.probe, aj.units, floor_pp,
                                              progress=progress(len(aj.units) + 1, label), bootstrap=job.bootstrap)
    # aligned: share of prompts whose replacement came from aligned prompts (mean/resample)
    df = df.with_columns(floor=pl.lit(floor, pl.Float64), n_prompts=pl.lit(len(aj.df), pl.Int64),
                         aligned=pl.lit(aj.aligned, pl.Float64), metric=pl.lit(aj.task.metric_name))
    more = unit_columns(aj.task, aj)  # the task's own per-unit columns (induction: attention to B)
    if more is not None:
        df = df.join(more, on=["layer", "head"], how="left", maintain_order="left")
    marks = [c for c in ("estimated", "drop_bound") if c in df.columns]  # a guided scan's: last
    df = df.select([c for c in df.columns if c not in marks] + marks)
    # row and floor per prompt beside the metrics, so every interval can be rebuilt from this file alone
    per_prompt = per_prompt.insert_column(0, pl.Series("row", aj.rows_in_full, dtype=pl.Int64)).insert_column(
        1, pl.Series("floor", np.broadcast_to(np.asarray(floor_pp, float), (len(per_prompt),)), dtype=pl.Float64))
    io.write_parquet(per_prompt, out.prompts)
    io.write_parquet(df, out.scores)
    log.info("%s: %s", label, batching.fill_line(aj.scanner))
    top = ablation.top(df)
    log.info("%s: top unit %s drop %.4f%s", label, top["unit"], top["drop"],
             f" [{top['drop_lo']:.4f}, {top['drop_hi']:.4f}], top in {100 * top['top_freq']:.0f}% of resamples"
             if "top_freq" in df.columns else "")


def curve(job: JobSettings, dataset, ablation_name: str, out: CurveFiles, loaded=None, self_check: bool = True):
    """The cumulative ablation curve in rank order (and greedy, when configured), the sufficiency
    curve (`method` sufficiency: the top units kept and every other ablated, at MIB's fractions,
    `engine.sufficiency`; unless `curves.sufficiency` is false), and a negative control of random mid-layer units, over the curve prompts
    (`job.curves.prompts`, config `curves.prompts`): heldout (default), the first n_curve rows not
    used for scoring, so that the units ranked on the scoring prompts are measured on other prompts;
    or all, the first n_curve rows.
    `loaded`, `self_check`: as for `score`."""
    cfg, name = job.curves, f"{job.task}/{job.card.name}"
    prompts = cfg.prompts  # heldout | all (config curves.prompts; default in config/schema.yaml)
    full = _dataset(job, dataset)
    rows = curve_rows(full["score"].to_numpy(), cfg.n_curve, prompts, f"curves {name}")
    if cfg.n_curve and len(rows) < cfg.n_curve:
        log.info("curves %s: %d %s prompts, fewer than n_curve %d (the dataset has %d rows, %d for scoring)",
                 name, len(rows), prompts, cfg.n_curve, len(full), int(full["score"].sum()))
    aj = AblationJob(job, full, ablation_name, rows=rows, loaded=loaded, self_check=self_check)
    floor_pp, clean_all = aj.floor_per_prompt(), aj.clean_metrics()
    clean_pp = clean_all[aj.task.metric_name]
    floor, clean = float(floor_pp.mean()), float(clean_pp.mean())
    by_label = {u.label: u for u in aj.units}
    order = read_ranked(out.scores)
    ranked = [by_label[u] for u in order["unit"]]
    plan = cfg.ranked(len(ranked))
    steps = plan.max_steps
    rows = ablation.ranked_curve(aj.probe, ranked, ablation.Baseline(clean, floor_pp, clean_pp), plan,
                                 progress=progress(steps, f"ranked curve {name}/{ablation_name}"),
                                 bootstrap=job.bootstrap)
    if "greedy" in cfg.methods:
        rows += greedy.greedy_curve(aj.probe, ranked, ablation.Baseline(clean, floor),
                                    cfg.greedy(f"greedy curve {name}/{ablation_name}"),
                                    select=greedy_selection(job, full, ablation_name, aj))
    if cfg.sufficiency:  # MIB's direction beside ours: keep the top units by |drop| (MIB's absolute score), ablate the rest
        rows += sufficiency_curve(aj.probe, ranked, order["drop"].to_numpy())
    df = io.frame(rows).with_columns(clean=pl.lit(clean, pl.Float64), floor=pl.lit(floor, pl.Float64),
                                     n_prompts=pl.lit(len(aj.df), pl.Int64),
                                     n_units=pl.lit(len(aj.units), pl.Int64),
                                     # which prompts: heldout (none used for scoring) or all
                                     prompts=pl.lit(prompts), metric=pl.lit(aj.task.metric_name),
                                     # ranking and greedy choices: made on the scoring prompts
                                     select_prompts=pl.lit("scoring"),
                                     # facts: the metrics it is not ranked on, clean on the curve prompts
                                     **{f"{k}_clean": pl.lit(float(clean_all[k].mean()), pl.Float64)
                                        for k in aj.task.extra})
    if job.bootstrap:  # how clearly clean stands above its floor on the curve prompts (the conditioning rule)
        lo, hi = ablation.clean_span(clean_pp, floor_pp, aj.task, job.bootstrap)
        df = df.with_columns(clean_span_lo=pl.lit(lo, pl.Float64), clean_span_hi=pl.lit(hi, pl.Float64))
    pool = ablation.control_pool(aj.units, job.card.n_layers, exclude=[ranked[0].label])
    ctrl = ablation.random_control(aj.probe, pool, ablation.Baseline(clean, floor_pp, clean_pp), cfg.control_draws,
                                   job.seed, job.bootstrap)
    ctrl = ctrl.with_columns(clean=pl.lit(clean, pl.Float64), floor=pl.lit(floor, pl.Float64))
    io.write_parquet(df, out.curve)
    io.write_parquet(ctrl, out.control)
    log.info("curve %s/%s: %s", name, ablation_name, batching.fill_line(aj.scanner))
    log.info("curve %s/%s: clean %.4f, final damage %.3f", name, ablation_name, clean,
             df.filter(pl.col("method") == "ranked")["damage"][-1])


def greedy_selection(job: JobSettings, full: pl.DataFrame, ablation_name: str, aj: AblationJob) -> tuple:
    """(probe, clean) of the scoring prompts, on which each greedy step is chosen while the curve
    is reported on the job's (held-out) prompts: the greedy curve, like the ranking, is selected on
    one set of prompts and measured on another, so neither is measured where it was chosen."""
    sel = AblationJob(job, full, ablation_name, loaded=(aj.model, aj.tok), self_check=False)
    return sel.probe, float(sel.clean_per_prompt().mean())


# -- beyond the paper: specificity ---------------------------------------------------------
def _tops_on(job: JobSettings, data, ablation_name: str, tops: dict, loaded) -> tuple:
    """(the job on `data`, the clean metric, the metric with each top unit ablated alone, the
    intervals of each top unit's damage over the prompts or None), as the engine computed them
    (float32: the damage is taken before any rounding to float64). The intervals come with
    `job.bootstrap` (numerator and denominator resampled together, `stats.drop_intervals`); on
    neutral text the floor is the spec's (0: its loss has no floor kind), so the damage is minus the loss's relative rise."""
    aj = AblationJob(job, data, ablation_name, loaded=loaded)
    by_label = {u.label: u for u in aj.units}
    per_prompt = aj.probe.run([{}] + [ablation.as_sets([by_label[u]]) for u in tops.values()])[aj.task.metric_name]
    v = per_prompt.mean(dim=1).numpy()
    iv = None
    if job.bootstrap:
        pp = per_prompt.numpy()
        out = stats.drop_intervals(pp[0], pp[1:], aj.task.higher_is_better, job.bootstrap, floor=aj.floor_per_prompt())
        iv = list(zip(out["damage_lo"].tolist(), out["damage_hi"].tolist(), strict=True))
    return aj, v[0], v[1:], iv


def specificity_each(job: JobSettings, files: dict, stash=None):
    """`specificity` once per ablation of one model, in one job (one import of torch and one model
    load for all; a job of its own per ablation paid those ~4 s each): `files` {ablation:
    `SpecificityFiles`}. The numbers are those of one job per ablation (each starts from the same
    torch seed); `stash`: a `resume.Stash` keeping each finished ablation."""
    _each("specificity ", job, files, stash, None,
          lambda ablation_name, out, held, _check: specificity(job, ablation_name, out, loaded=held))


def specificity(job: JobSettings, ablation_name: str, files: SpecificityFiles, min_coverage: float = 0.9, loaded=None):
    """Each task's top unit ablated on every task's scoring prompts (damage) and on neutral text
    (the rise of the next-token loss, relative to the clean loss): a unit that breaks everything is
    not a task circuit. Each task is ranked on its metric (`job.metrics`; a task not named: its
    default). With `job.bootstrap` each damage and the neutral rise carry an interval over prompts
    (`_lo`, `_hi`), and the verdict decides a cut only where the interval lies on one side of it
    (`metrics.specificity_verdict`: else 'unclear (a or b)'). `loaded`: a (model, tokenizer) to reuse."""

    loaded = loaded or load_engine(job.card, job.device)
    tops = {t: read_ranked(p)["unit"][0] for t, p in files.scores.items()}
    nan = float("nan")
    damage: dict = {}
    intervals: dict = {}
    for target, data in files.datasets.items():
        aj, clean, ablated, iv = _tops_on(job.for_task(target), data, ablation_name, tops, loaded)
        floor = aj.floor()
        for i, (src, val) in enumerate(zip(tops, ablated)):
            damage[(src, target)] = float(metrics.damage(clean, val, floor, aj.task.higher_is_better))
            intervals[(src, target)] = iv[i] if iv else (nan, nan)
    # the control: plain text, no task, so no floor; the effect is the loss's relative rise
    neutral, coverage = windows(files.neutral, loaded[1], job.card.prepend_bos, seed=job.seed)
    _, clean_loss, ablated_loss, neutral_iv = _tops_on(job.for_task(NEUTRAL), neutral, ablation_name, tops, loaded)
    ok = coverage >= min_coverage
    rows = []
    for i, ((src, unit), val) in enumerate(zip(tops.items(), ablated_loss)):
        rise = float((val - clean_loss) / clean_loss)
        rise_iv = (-neutral_iv[i][1], -neutral_iv[i][0]) if neutral_iv and ok else (nan, nan)  # rise = -damage
        row = {"model": job.card.name, "attention": job.card.attention, "ablation": ablation_name, "task": src,
               "top_unit": unit}
        for target in files.datasets:
            row[f"damage_{target}"] = damage[(src, target)]
            if job.bootstrap:
                row[f"damage_{target}_lo"], row[f"damage_{target}_hi"] = intervals[(src, target)]
        row.update({"neutral_coverage": coverage, "neutral_loss_clean": float(clean_loss) if ok else nan,
                    "neutral_loss_ablated": float(val) if ok else nan,
                    "neutral_rise_pct": 100 * rise if ok else nan})
        if job.bootstrap:
            row["neutral_rise_pct_lo"], row["neutral_rise_pct_hi"] = 100 * rise_iv[0], 100 * rise_iv[1]
        off = [row[f"damage_{t}"] for t in files.datasets if t != src]
        off_iv = [intervals[(src, t)] for t in files.datasets if t != src]
        row["verdict"] = specificity_verdict(off, rise if ok else nan,
                                             intervals=(off_iv, rise_iv) if job.bootstrap else None)
        rows.append(row)
    io.write_parquet(io.frame(rows), files.out)
    log.info("specificity %s/%s: %s", job.card.name, ablation_name,
             [(r["task"], r["top_unit"], r["verdict"]) for r in rows])
