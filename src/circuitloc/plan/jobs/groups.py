"""How the score, curve and specificity jobs are cut, named and ordered, and what each job asks its
executor for.

A job's fixed cost (imports, loading the model: ~5 s) is most of a toy's compute, so one job runs
every ablation of a model on a task (circuitloc.engine.pipeline.for_each_ablation; specificity: of
a model, on all its tasks), still writing one file per ablation. A rule's outputs are fixed, so
the models that share one list of ablations share a rule. `group_ablations: false` gives every
ablation its own job again: shorter jobs for a cluster's time limits and more of them in parallel,
where a model is large."""

from __future__ import annotations

import math
import os

from circuitloc.errors import ConfigError
from circuitloc.plan import paths
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.jobs.resources import estimate, model_size, requested_keys
from circuitloc.plan.config.views import (
    ablations,
    curve_config,
    dataset_config,
    model_ablations,
    model_spec,
    model_tasks,
    models,
    shared_tasks,
    task_metric,
)

# Snakemake starts the ready job of highest priority first. On 2 cores the long jobs (toy training,
# a pretrained model's score and curve chain) must start early or one of them runs alone at the
# end: the model stage first, then the short dataset jobs that unlock the scores, then the score
# and curve jobs of groups with a pretrained (non-toy) model (the costlier model's first: 30 + its
# `size_ranks`), then the toys' own, then specificity; tables, figures and the rest (seconds each)
# keep priority 0 and fill the gaps.
PRIORITY = {"model": 50, "dataset": 40, "pretrained": 30, "toy": 20, "specificity": 10}


def staged_models(config) -> list[str]:
    """The models whose datasets, scores and curves run in one job per model (`group_stages`)."""
    return models(config) if config.get("group_stages") else []


def stage_free_models(config) -> list[str]:
    """The models whose datasets, scores and curves run in jobs of their own."""
    staged = set(staged_models(config))
    return [m for m in models(config) if m not in staged]


def check_group_stages(config) -> None:
    """`group_stages` runs all of a model's ablations of every task in one job: that needs
    `group_ablations`, and no family-shared condition (its dataset waits on every member's own
    dataset, so it cannot be built inside one member's job)."""
    if not config.get("group_stages"):
        return
    if not config["group_ablations"]:
        raise ConfigError("config: group_stages: true runs every ablation of a model in one job; it needs "
                          "group_ablations: true (set one of them false)")
    if shared_tasks(config):
        raise ConfigError(f"config: group_stages: true cannot build the family-shared condition "
                          f"{', '.join(shared_tasks(config))} inside one model's job; set group_stages: false, or "
                          f"tasks.<task>.shared: false")


def stage_groups(config) -> list[tuple[list[str], list[str], list[str]]]:
    """(tasks, ablations, models) of every rule that runs a model's stages in one job: the staged
    models that share one list of tasks and one of ablations (a rule's outputs are fixed)."""
    out: dict[tuple, list] = {}
    for m in staged_models(config):
        out.setdefault((tuple(model_tasks(config, m)), tuple(model_ablations(config, m))), []).append(m)
    return [(list(ts), list(abls), ms) for (ts, abls), ms in out.items()]


def stage_rule(config, tasks, abls) -> str:
    """The name of the rule running the stages of `tasks` under `abls`: `model_stages` when one rule
    serves every staged model, else with its tasks and ablations appended."""
    if len(stage_groups(config)) == 1:
        return "model_stages"
    return "model_stages__" + "_".join(tasks) + "__" + "_".join(a.replace("-", "_") for a in abls)


def stage_settings(config, tasks):
    """The params function of a staged job: per task, what its dataset, score and curve jobs would
    be told (dataset config, metric, curve config), so it reruns exactly when one of them would."""
    return lambda wc: {t: {"dataset": dataset_config(config, t, wc.model), "metric": task_metric(config, t),
                           "curves": curve_config(config, t, wc.model)} for t in tasks}


def ablation_groups(config) -> list[tuple[list[str], list[str]]]:
    """(ablations, models) of every score rule and curve rule: the models that share one list of
    ablations, or with `group_ablations: false` one entry per ablation and its models. Models whose
    stages run in one job (`group_stages`) have no score or curve rule of their own."""
    return _by_ablations(config, stage_free_models(config))


def specificity_groups(config) -> list[tuple[list[str], list[str]]]:
    """(ablations, models) of every specificity rule: as `ablation_groups`, over every model (a
    model's stages in one job leave its specificity job as it is)."""
    return _by_ablations(config, models(config))


def _by_ablations(config, ms) -> list[tuple[list[str], list[str]]]:
    if not config["group_ablations"]:
        return [([a], [m for m in ms if a in model_ablations(config, m)]) for a in ablations(config)]
    out: dict[tuple, list] = {}
    for m in ms:
        out.setdefault(tuple(model_ablations(config, m)), []).append(m)
    return [(list(abls), ms) for abls, ms in out.items()]


def group_rule(config, stage, abls) -> str:
    """The name of the rule running `abls` at `stage`: the stage itself when every model shares one
    list of ablations (the usual case), else the stage, its kinds and its units
    (`scores__zero_mean__query`), so every rule can be found by its name."""
    if len(specificity_groups(config) if stage == "specificity" else ablation_groups(config)) == 1:
        return stage
    kinds, units = zip(*map(registry.parse_ablation, abls))
    return f"{stage}__{'_'.join(dict.fromkeys(kinds))}__{'_'.join(dict.fromkeys(units))}"


def group_tag(config, abls) -> str:
    """What names a job's log, benchmark and stash below {task}/{model}: nothing when one job runs
    all of the model's ablations, the ablation when each has its own."""
    return "" if config["group_ablations"] else os.sep + abls[0]


def resume_dir(config, stage, abls):
    """The params function saying where a job of `stage` running `abls` keeps its finished ablations
    until it succeeds (circuitloc.resume)."""
    tag = group_tag(config, abls)
    return lambda wc: f"{paths.RESUME}/{stage}/{wc.task}/{wc.model}{tag}"


def group_of(config, model) -> list[str]:
    """The ablations one score, curve or specificity job runs for `model`: all of them when grouped, else one."""
    return model_ablations(config, model) if config["group_ablations"] else model_ablations(config, model)[:1]


def job_priority(config, stage, group_models=()):
    """The `priority:` of a rule: by stage; scores and curves by whether any of the rule's models
    (`group_models`: those of its ablation group) is pretrained, and then, per job, by its model's
    cost (`size_ranks`): the heaviest model's score and curve chain is the run's longest, so on few
    cores it starts first instead of running alone at the end."""
    if stage in ("scores", "curves", "model_stages"):
        if all(model_spec(config, m).get("source") == "toy" for m in group_models):
            return PRIORITY["toy"]
        ranks = size_ranks(config)
        return lambda wc: PRIORITY["pretrained"] + ranks.get(wc.model, 0)
    return PRIORITY[stage]


def size_ranks(config) -> dict[str, int]:
    """Each pretrained model's cost rank: how many pretrained models of the run cost less
    (parameters x attention units, `plan.jobs.resources.model_size`), at most 9, so that a score or
    curve job stays below the dataset jobs that unlock the scores."""
    costs = {m: math.prod(model_size(model_spec(config, m))) for m in models(config)
             if model_spec(config, m).get("source") != "toy"}
    return {m: min(sum(other < c for other in costs.values()), PRIORITY["dataset"] - PRIORITY["pretrained"] - 1)
            for m, c in costs.items()}


def job_resources(config, stage, per_model=True) -> dict:
    """Keyword arguments for a rule's `resources:` (`**job_resources(config, "scores")`): one callable
    per resource name any job may set, returning None (no request) where a job sets none; the values
    are estimated from the config (circuitloc.plan.jobs.resources)."""

    def value(key):
        if per_model:
            return lambda wc: estimate(config, model_spec(config, wc.model), stage, len(group_of(config, wc.model)),
                                       n_tasks=len(model_tasks(config, wc.model))).get(key)
        return lambda wc: estimate(config, None, stage).get(key)

    return {k: value(k) for k in requested_keys(config, config["models"])}
