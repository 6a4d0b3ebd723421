"""Which files a run makes and which files each table, figure and analysis job reads, as plain
functions of the prepared config: the default target, the per-model inputs of the tables, the
sweep's pairs, the cost and report jobs' inputs."""

from __future__ import annotations

import os

from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.vocabulary import vocab
from circuitloc.plan import paths
from circuitloc.plan.paths import CARD, CONTROLS, CURVES, DATA, FILTER, MIB, PROMPTS, SCORES, TABLE1, WEIGHTS
from circuitloc.plan.config.sweep_toys import figure_sample
from circuitloc.plan.config.views import (
    ablations,
    card,
    dataset_tasks,
    model_ablations,
    model_spec,
    models,
    models_for,
    shared_task,
    sweep_models,
    tasks,
)

COST = paths.file(paths.COST_TABLE, "csv")
REPORT = paths.REPORT


def table_pairs(config) -> list[tuple[str, str]]:
    """(task, ablation) pairs that have at least one model: one Table 1/2 and Figure 1/2 each."""
    abls = ablations(config)
    return [(t, a) for t in dataset_tasks(config) for a in abls if models_for(config, t, a)]


def sweep_pairs(config) -> list[tuple[str, str]]:
    """(task, ablation) pairs that get a sweep table: every task and ablation of the sweep's models."""
    sweep = set(sweep_models(config))
    return [(t, a) for t, a in table_pairs(config) if any(m in sweep for m in models_for(config, t, a))]


def sweep_members(config, task, ablation) -> list[str]:
    """The sweep's models scored on this task under this ablation."""
    scored = models_for(config, task, ablation)
    return [m for m in sweep_models(config) if m in scored]


def stability_entries(config, task) -> list[dict]:
    """What the stability table of `task` reads, per model and ablation (a task with a family-shared
    condition: the shared scores too, where the model has some)."""
    out = []
    st = shared_task(config, task)
    for m in models_for(config, task):
        for a in model_ablations(config, m):
            e = {"model": m, "card": card(m), "ablation": a,
                 "scores": SCORES.format(task=task, model=m, ablation=a),
                 "prompts": PROMPTS.format(task=task, model=m, ablation=a),
                 "dataset": DATA.format(task=task, model=m)}
            if registry.task(task).shared:
                e["shared"] = SCORES.format(task=st, model=m, ablation=a) if st and m in models_for(config, st, a) \
                    else None
            out.append(e)
    return out


def stability_files(config, task) -> list[str]:
    """Every file the stability job of `task` reads beside the cards, once each."""
    return sorted({e[k] for e in stability_entries(config, task)
                   for k in ("scores", "prompts", "dataset", "shared") if e.get(k)})


def task_groups(config) -> list[tuple[list[str], list[str]]]:
    """(tasks, ablations) of every per-task rule (tables, figures, MIB importances): the tasks that
    share one list of table pairs' ablations. One such job per task does all its ablations: a figure
    or table job is mostly starting Python and importing its libraries."""
    per_task: dict[str, list] = {}
    for t, a in table_pairs(config):
        per_task.setdefault(t, []).append(a)
    out: dict[tuple, list] = {}
    for t, abls in per_task.items():
        out.setdefault(tuple(abls), []).append(t)
    return [(ts, list(abls)) for abls, ts in out.items()]


def task_rule(config, stem: str, abls) -> str:
    """`stem` when one rule serves every task, else with its ablations appended."""
    if len(task_groups(config)) == 1:
        return stem
    return f"{stem}__" + "_".join(a.replace("-", "_") for a in abls)


def per_ablation_inputs(config, abls, files: dict, models=None):
    """The input function of a per-task job over `abls`: for each ablation (by position i) and each
    `files` entry (name: pattern), `{name}_{i}`: the file of every model of that task and ablation
    (`models(config, task, ablation)`: which models; default all of them)."""
    which = models or models_for

    def inputs(wc) -> dict:
        out = {}
        for i, a in enumerate(abls):
            ms = which(config, wc.task, a)
            for name, pattern in files.items():
                out[f"{name}_{i}"] = [pattern.format(task=wc.task, model=m, ablation=a) for m in ms]
        return out

    return inputs


def figure_shown(config, abls):
    """The params function {ablation: the models its figures draw} of a figure job over `abls`."""
    return lambda wc: {a: figure_models(config, wc.task, a) for a in abls}


def per_ablation_models(config, abls):
    """The params function {ablation: its models} of a per-task job over `abls`."""
    return lambda wc: {a: models_for(config, wc.task, a) for a in abls}


def figure_models(config, task, ablation) -> list[str]:
    """The models of the per-task heatmap and curve figures: at most `figures.max_models` of those
    scored (circuitloc.plan.config.sweep_toys.figure_sample says which); the tables keep every model."""
    return figure_sample(config["models"], models_for(config, task, ablation), int(config["figures"]["max_models"]))


def sweep_adjust_with(config) -> dict:
    """{"task (label)/ablation": paired csv} of another run that the overview adjusts together with
    this one's (config `sweep.adjust_with`: e.g. facts ranked by accuracy beside facts by margin)."""
    out = {}
    pairs = sweep_pairs(config)
    for e in config.get("sweep", {}).get("adjust_with", []):
        for t, a in pairs:
            if t in e["tasks"]:
                out[f"{t} ({e['label']})/{a}"] = os.path.join(e["tables"], f"sweep_paired_{t}_{a}.csv")
    return out


def sweep_layer_table(config, task, ablation) -> list[str]:
    """[the Table 1 of `ablation`'s kind under layer units] for a kv ablation whose layer twin has a
    sweep table, else []: a KV-1 toy's kv groups are its layers, compared with the MHA toy's layers
    (`report.sweep.summary.paired`)."""
    kind, unit = registry.parse_ablation(ablation)
    twin = registry.ablation_name(kind, vocab.LAYER)
    return [TABLE1.format(task=task, ablation=twin)] if unit == vocab.KV and (task, twin) in sweep_pairs(config) \
        else []


# the tables the claims table reads (circuitloc.report.claims.judge), where the run makes them
CLAIM_TABLES = ("table1_ioi_zero-query", "table2_ioi_zero-query", "table1_facts_zero-query", "stability_ioi")
CLAIMS = paths.file(paths.CLAIMS_TABLE, "csv")


def claim_inputs(config) -> dict[str, str]:
    """name -> CSV of each claims table this run makes (a claim without its table is not testable)."""
    made = set(_tables_and_figures(config))
    files = {n: f"{paths.TABLES}/{n}.csv" for n in CLAIM_TABLES}
    return {n: p for n, p in files.items() if p in made}


LANDING = paths.LANDING


def landing_inputs(config) -> dict[str, str]:
    """What the report's first page shows (circuitloc.report.pages.landing): the claims table, then Table 1
    and Figures 1-2 of the headline (IOI, else the first task; the paper's ablation, else the first)
    and its scale figure, where the run makes them."""
    made = set(_tables_and_figures(config))
    task, abl = headline(config)
    files = {"claims": CLAIMS, "table1": TABLE1.format(task=task, ablation=abl),
             "fig1": paths.file(paths.FIG1, "png", task=task, ablation=abl),
             "fig2": paths.file(paths.FIG2, "png", task=task, ablation=abl),
             "scale": paths.file(paths.SCALE_FIGURE, "png", ablation=abl)}
    return {k: p for k, p in files.items() if k == "claims" or p in made}


def headline(config) -> tuple[str, str]:
    """(task, ablation) the first page leads with."""
    (task, abl), ts, abls = vocab.HEADLINE, tasks(config), ablations(config)
    return (task if task in ts else ts[0]), (abl if abl in abls else abls[0])


def _tables_and_figures(config) -> list[str]:
    """Every model card, table and figure the config asks for."""
    out = [CARD.format(model=m) for m in models(config)]
    pairs = table_pairs(config)
    for task, abl in pairs:
        out += [TABLE1.format(task=task, ablation=abl), paths.file(paths.TABLE_2, "csv", task=task, ablation=abl),
                paths.file(paths.FIG1, "png", task=task, ablation=abl),
                paths.file(paths.FIG2, "png", task=task, ablation=abl), MIB.format(task=task, ablation=abl)]
    out += [paths.file(paths.SCALE_FIGURE, "png", ablation=abl) for abl in ablations(config)]
    extras = config["analysis"]
    if "stability" in extras:
        ts = [t for t in tasks(config) if models_for(config, t)]  # a task every model leaves out has none
        out += [paths.file(paths.STABILITY_TABLE, "csv", task=t) for t in ts]
        out += [paths.file(paths.STABILITY_FIGURE, "png", task=t) for t in ts]
    out += [paths.file(table, "csv") for a, table in (("robustness", paths.ROBUSTNESS_TABLE),
                                                       ("specificity", paths.SPECIFICITY_TABLE)) if a in extras]
    sweep = sweep_pairs(config)
    out += [paths.file(paths.SWEEP_TABLE, "csv", task=t, ablation=a) for t, a in sweep]
    out += [paths.file(paths.SWEEP_OVERVIEW_TABLE, "csv")] if sweep else []
    return out


def intermediates(config) -> list[str]:
    """Every file the tables are computed from: a toy's or GGUF model's weights, each dataset and its
    filter counts, each score and curve file, each specificity file. In the default target so that
    one deleted, or removed by Snakemake after a forced job failed, is rebuilt (with what depends on
    it) by a plain rerun:
    Snakemake plans nothing for a missing file that no target asks for when its consumers' outputs
    exist."""
    out = [WEIGHTS.format(model=m) for m in models(config) if model_spec(config, m).get("source") != "hf"]
    for t in dataset_tasks(config):
        for m in models_for(config, t):
            out += [DATA.format(task=t, model=m), FILTER.format(task=t, model=m)]
            for a in model_ablations(config, m):
                out += [p.format(task=t, model=m, ablation=a) for p in (SCORES, CURVES, CONTROLS, PROMPTS)]
    if "specificity" in config["analysis"]:  # the specificity table's inputs (rule specificity_table)
        out += [paths.SPECIFICITY.format(model=m, ablation=a) for m in models(config) for a in model_ablations(config, m)]
    return out


def all_outputs(config) -> list[str]:
    """The default target: every model card, table and figure the config asks for, what they are
    computed from (`intermediates`), the claims table, the report's first page, the cost table and
    the report (the cost job waits for every other job that writes a benchmark, the first page's
    included)."""
    return _tables_and_figures(config) + intermediates(config) + [CLAIMS, LANDING, COST, REPORT]


def cost_inputs(config) -> list[str]:
    """What the cost job waits for: every other target of the run but the intermediates, which the
    tables already wait for (a model rebuilt with identical weights then reruns nothing after it)."""
    skip = {COST, REPORT, *intermediates(config)}
    return [f for f in all_outputs(config) if f not in skip]


def report_inputs(config) -> list[str]:
    """Every table and figure the run makes: what the report collects."""
    return [f for f in all_outputs(config) if f.startswith((f"{paths.TABLES}/", f"{paths.FIGURES}/"))]
