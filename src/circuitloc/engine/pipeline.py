"""The ablation stages of the workflow (scores, curves, specificity), as plain functions the thin
scripts in workflow/scripts call with keyword arguments (`score` and `curve` take nothing by
position: a dozen parameters are too many to keep in order). Models: `models.build`; datasets:
`datasets`; the ablation job itself: `job.AblationJob`; tables: `writers`; figures: `figures`;
logging and errors around every job: `runner`."""

from __future__ import annotations

import polars as pl
import torch

from circuitloc import io
from circuitloc import metrics as M
from circuitloc import stats as S
from circuitloc.engine import ablation as A
from circuitloc.engine.job import AblationJob, progress, read_ranked
from circuitloc.metrics import specificity_verdict
from circuitloc.models.load import load_engine
from circuitloc.plan.vocab import NEUTRAL
from circuitloc.runner import log
from circuitloc.tasks.common import curve_rows
from circuitloc.tasks.neutral import windows
from circuitloc.tasks.registry import dataset_columns, unit_columns


# -- scores and curves -------------------------------------------------------------------
def for_each_ablation(fn, task_name, card, dataset, ablations, per_ablation: dict, device="cpu", torch_seed=0,
                      stash=None, **kwargs):
    """`fn` (score or curve) once per ablation of one model on one task, in one job: one model load
    and one dataset read for all of them, still one file per ablation. A job's fixed cost (imports,
    loading the model: ~5 s) is most of a toy's; this pays it once per model and task, not once per
    ablation. `per_ablation`: {keyword of fn: one value per ablation} (its output paths; a curve's
    scores table). Each ablation starts from the torch seed a job of its own would have, so no
    number depends on the grouping (tests/test_pipeline_groups.py). `stash`: a `resume.Stash` that
    keeps each finished ablation's files, so a failed or killed job loses none of them; its outputs
    are the keys of `per_ablation` that start with out_."""

    full = io.read_parquet(dataset, dataset_columns(task_name), f"{task_name} dataset") \
        if not isinstance(dataset, pl.DataFrame) else dataset
    loaded, checked = None, False
    for i, ablation in enumerate(ablations):
        outs = [per_ablation[k][i] for k in per_ablation if k.startswith("out_")]
        if stash is not None and stash.restore(ablation, outs):
            log.info("%s %s/%s/%s: finished by an earlier, interrupted run of this job; kept", fn.__name__,
                     task_name, card["name"], ablation)
            continue
        loaded = loaded or load_engine(card, device)
        torch.manual_seed(torch_seed)
        fn(task_name=task_name, card=card, dataset=full, ablation=ablation, device=device, loaded=loaded,
           self_check=not checked, **{k: values[i] for k, values in per_ablation.items()}, **kwargs)
        checked = True
        if stash is not None:
            stash.keep(ablation, outs)
    if stash is not None:
        stash.clear()


def score(*, task_name, card, dataset, ablation, out_parquet, out_prompts, batch_tokens, device="cpu",
          opts: dict | None = None, bootstrap: dict | None = None, metric: str | None = None, loaded=None,
          self_check: bool = True):
    """One row per unit (drop, damage, bootstrap intervals, top_freq) on the scoring prompts and,
    beside it, the per-prompt metric under every single-unit ablation, which the stability analysis
    splits by condition. `metric`: the facts metric (config `tasks.facts.metric`); `loaded`: a
    (model, tokenizer) to reuse; `self_check`: compare the engine with a plain forward first."""
    job = AblationJob(task_name=task_name, card=card, dataset=dataset, ablation=ablation, batch_tokens=batch_tokens,
                      device=device, opts=opts, metric=metric, loaded=loaded, self_check=self_check)
    floor_pp = job.floor_per_prompt()
    floor = float(floor_pp.mean())
    label = f"scores {task_name}/{card['name']}/{ablation}"
    df, per_prompt = A.score_units(job.scanner, job.prompts, job.units, job.task, floor_pp,
                                   progress=progress(len(job.units) + 1, label), bootstrap=bootstrap)
    # aligned: share of prompts whose replacement came from aligned prompts (mean/resample)
    df = df.with_columns(floor=pl.lit(floor, pl.Float64), n_prompts=pl.lit(len(job.df), pl.Int64),
                         aligned=pl.lit(job.aligned, pl.Float64), metric=pl.lit(job.task.metric_name))
    more = unit_columns(job.task, job)  # the task's own per-unit columns (induction: attention to B)
    if more is not None:
        df = df.join(more, on=["layer", "head"], how="left", maintain_order="left")
    per_prompt = per_prompt.insert_column(0, pl.Series("row", job.rows_in_full, dtype=pl.Int64))
    io.write_parquet(per_prompt, out_prompts)
    io.write_parquet(df, out_parquet)
    top = A.top(df)
    log.info("%s: top unit %s drop %.4f%s", label, top["unit"], top["drop"],
             f" [{top['drop_lo']:.4f}, {top['drop_hi']:.4f}], top in {100 * top['top_freq']:.0f}% of resamples"
             if "top_freq" in df.columns else "")


def curve(*, task_name, card, dataset, scores_path, ablation, cfg, seed, out_curve, out_control, batch_tokens,
          device="cpu", opts: dict | None = None, bootstrap: dict | None = None, metric: str | None = None,
          loaded=None, self_check: bool = True):
    """The cumulative ablation curve in rank order (and greedy, when configured), and a negative
    control of random mid-layer units, over the curve prompts (`cfg["prompts"]`, config
    `curves.prompts`): heldout (default), the first n_curve rows not used for scoring, so that the
    units ranked on the scoring prompts are measured on other prompts; or all, the first n_curve rows.
    `metric`: the facts metric (config `tasks.facts.metric`); `loaded`, `self_check`: as for `score`."""
    prompts = cfg["prompts"]  # heldout | all (config curves.prompts; default in config/schema.yaml)
    full = io.read_parquet(dataset, dataset_columns(task_name), f"{task_name} dataset") \
        if not isinstance(dataset, pl.DataFrame) else dataset
    rows = curve_rows(full["score"].to_numpy(), int(cfg["n_curve"]) if cfg.get("n_curve") else None, prompts,
                      f"curves {task_name}/{card['name']}")
    if cfg.get("n_curve") and len(rows) < int(cfg["n_curve"]):
        log.info("curves %s/%s: %d %s prompts, fewer than n_curve %d (the dataset has %d rows, %d for scoring)",
                    task_name, card["name"], len(rows), prompts, int(cfg["n_curve"]), len(full),
                    int(full["score"].sum()))
    job = AblationJob(task_name=task_name, card=card, dataset=full, ablation=ablation, batch_tokens=batch_tokens,
                      rows=rows, device=device, opts=opts, metric=metric, loaded=loaded, self_check=self_check)
    floor_pp, clean_all = job.floor_per_prompt(), job.clean_metrics()
    clean_pp = clean_all[job.task.metric_name]
    floor, clean = float(floor_pp.mean()), float(clean_pp.mean())
    scores = read_ranked(scores_path)
    by_label = {u.label: u for u in job.units}
    ranked = [by_label[u] for u in scores["unit"]]
    steps = min(int(cfg["max_steps"]), len(ranked))
    rows = A.ranked_curve(job.scanner, job.prompts, ranked, job.task, clean, floor_pp, steps,
                          progress=progress(steps, f"ranked curve {task_name}/{card['name']}/{ablation}"),
                          clean_pp=clean_pp, bootstrap=bootstrap)
    if "greedy" in cfg["methods"]:
        rows += A.greedy_curve(job.scanner, job.prompts, ranked, job.task, clean, floor,
                               int(cfg["greedy_candidates"]), int(cfg["greedy_steps"]), cfg.get("greedy_stop_damage"),
                               select=greedy_selection(task_name=task_name, card=card, full=full, ablation=ablation,
                                                       batch_tokens=batch_tokens, device=device, opts=opts,
                                                       metric=metric, job=job))
    df = io.frame(rows).with_columns(clean=pl.lit(clean, pl.Float64), floor=pl.lit(floor, pl.Float64),
                                     n_prompts=pl.lit(len(job.df), pl.Int64),
                                     n_units=pl.lit(len(job.units), pl.Int64),
                                     # which prompts: heldout (none used for scoring) or all
                                     prompts=pl.lit(prompts), metric=pl.lit(job.task.metric_name),
                                     # ranking and greedy choices: made on the scoring prompts
                                     select_prompts=pl.lit("scoring"),
                                     # facts: the metrics it is not ranked on, clean on the curve prompts
                                     **{f"{k}_clean": pl.lit(float(clean_all[k].mean()), pl.Float64)
                                        for k in job.task.extra})
    if bootstrap:  # how clearly clean stands above its floor on the curve prompts (the conditioning rule)
        lo, hi = A.clean_span(clean_pp, floor_pp, job.task, bootstrap)
        df = df.with_columns(clean_span_lo=pl.lit(lo, pl.Float64), clean_span_hi=pl.lit(hi, pl.Float64))
    ctrl = A.random_control(job.scanner, job.prompts, job.units, job.task, clean, card["n_layers"],
                            int(cfg["control_draws"]), seed, exclude=[ranked[0].label])
    ctrl = ctrl.with_columns(clean=pl.lit(clean, pl.Float64), floor=pl.lit(floor, pl.Float64))
    io.write_parquet(df, out_curve)
    io.write_parquet(ctrl, out_control)
    log.info("curve %s/%s/%s: clean %.4f, final damage %.3f", task_name, card["name"], ablation, clean,
             df.filter(pl.col("method") == "ranked")["damage"][-1])


def greedy_selection(*, task_name, card, full, ablation, batch_tokens, device, opts, metric, job):
    """(scanner, prompts, clean) of the scoring prompts, on which each greedy step is chosen while
    the curve is reported on the job's (held-out) prompts: the greedy curve, like the ranking, is
    selected on one set of prompts and measured on another (issue 23)."""
    sel = AblationJob(task_name=task_name, card=card, dataset=full, ablation=ablation, batch_tokens=batch_tokens,
                      device=device, opts=opts, metric=metric, loaded=(job.model, job.tok), self_check=False)
    return sel.scanner, sel.prompts, float(sel.clean_per_prompt().mean())


# -- beyond the paper: specificity ---------------------------------------------------------
def specificity(*, card, ablation, datasets: dict, scores: dict, neutral_path, out_parquet, batch_tokens,
                device="cpu", opts: dict | None = None, min_coverage: float = 0.9, metrics: dict | None = None,
                bootstrap: dict | None = None):
    """Each task's top unit ablated on every task's scoring prompts and on neutral text: a unit that
    breaks everything is not a task circuit. `metrics`: {task: the metric it is ranked on} (config
    `tasks.<task>.metric`; a task not named: its default). With `bootstrap` ({n, seed, ci}) each
    damage and the neutral rise carry an interval over prompts (`_lo`, `_hi`), and the verdict
    decides a cut only where the interval lies on one side of it (`metrics.specificity_verdict`)."""

    loaded = load_engine(card, device)
    tops = {t: read_ranked(p)["unit"][0] for t, p in scores.items()}
    targets = dict(datasets)
    neutral, coverage = windows(neutral_path, loaded[1], card["prepend_bos"], seed=int((opts or {}).get("seed", 0)))
    targets[NEUTRAL] = neutral
    damage: dict = {}
    for target, data in targets.items():
        job = AblationJob(task_name=target, card=card, dataset=data, ablation=ablation, batch_tokens=batch_tokens,
                          device=device, opts=opts, loaded=loaded, metric=(metrics or {}).get(target))
        by_label = {u.label: u for u in job.units}
        name = job.task.metric_name
        pp = job.scanner.run(job.prompts, [{}] + [A.as_sets([by_label[u]]) for u in tops.values()],
                             {name: job.task.metric})[name].numpy()
        v = pp.mean(axis=1)
        floor = job.floor() if target != NEUTRAL else 0.0
        iv = S.drop_intervals(pp[0], pp[1:], job.task.higher_is_better, int(bootstrap["n"]), int(bootstrap["seed"]),
                              float(bootstrap.get("ci", 0.95)), floor=job.floor_per_prompt() if target != NEUTRAL
                              else 0.0) if bootstrap else None
        for i, (src, val) in enumerate(zip(tops, v[1:])):
            lo, hi = (float(iv["damage_lo"][i]), float(iv["damage_hi"][i])) if iv else (float("nan"),) * 2
            if target == NEUTRAL:  # rise of the next-token loss, relative to the clean loss (= -damage at floor 0)
                damage[(src, target)] = (float(v[0]), float(val), float((val - v[0]) / v[0]), (-hi, -lo))
            else:
                damage[(src, target)] = (float(v[0]), float(val),
                                         float(M.damage(v[0], val, floor, job.task.higher_is_better)), (lo, hi))

    rows = []
    for src, unit in tops.items():
        row = {"model": card["name"], "attention": card["attention"], "ablation": ablation, "task": src,
               "top_unit": unit}
        for target in datasets:
            row[f"damage_{target}"] = damage[(src, target)][2]
            if bootstrap:
                row[f"damage_{target}_lo"], row[f"damage_{target}_hi"] = damage[(src, target)][3]
        ok = coverage >= min_coverage
        clean, ablated, rise, rise_iv = damage[(src, NEUTRAL)]
        nan = float("nan")
        row.update({"neutral_coverage": coverage, "neutral_loss_clean": clean if ok else nan,
                    "neutral_loss_ablated": ablated if ok else nan,
                    "neutral_rise_pct": 100 * rise if ok else nan})
        if bootstrap:
            row["neutral_rise_pct_lo"], row["neutral_rise_pct_hi"] = (100 * rise_iv[0], 100 * rise_iv[1]) if ok \
                else (nan, nan)
        off = [row[f"damage_{t}"] for t in datasets if t != src]
        intervals = ([damage[(src, t)][3] for t in datasets if t != src], rise_iv) if bootstrap else None
        row["verdict"] = specificity_verdict(off, rise if ok else nan, intervals=intervals)
        rows.append(row)
    io.write_parquet(io.frame(rows), out_parquet)
    log.info("specificity %s/%s: %s", card["name"], ablation, [(r["task"], r["top_unit"], r["verdict"]) for r in rows])
