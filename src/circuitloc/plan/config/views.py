"""What the rules read from the run's config: its models, tasks and ablations, and each job's
settings. Plain functions of the prepared config (`workflow_config.prepare`), never of Snakemake's
objects, so they are tested on plain dicts; none of them changes the config."""

from __future__ import annotations

import copy
import re

from circuitloc.plan import paths
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.jobs.resources import DEFAULT_DTYPE, model_dtype
from circuitloc.plan.config.sweep_toys import META as SWEEP_META

# what a model's build does not depend on: its task, curve and score overrides, size hint, resources and
# ablations (changing them never retrains or reconverts a model)
NOT_BUILT_FROM = ("tasks", "curves", "size", "resources", "ablation", "scores", SWEEP_META)
# config `scores:` where the run (and the model) name none: exact, today's scan (engine.guided_scan)
# (the only place these defaults are written: engine.settings.ScoreSettings reads them)
SCORE_DEFAULTS = {"method": "exact", "audit": 30, "level": 0.05}
# the fewest top units a guided scan scores exactly (`top_units`; ScoreSettings.top's default)
MIN_TOP = 10
# The curve keys the schema gives no default (so that a run's job params stay what they were; the
# schema defaults the others): their one default, read by engine.settings.CurveSettings and the plan
CURVE_DEFAULTS = {"greedy_stop_damage": None, "greedy_guided": None, "greedy_audit": 0.0, "greedy_attribution": "linear",
                  "ig_steps": 4, "greedy_screen": None, "greedy_recheck": 3, "ranked_stop_damage": None,
                  "ranked_stop_patience": 1, "sufficiency": True}


def models(config) -> list[str]:
    return list(config["models"])


def model_spec(config, model) -> dict:
    return config["models"][model]


def sweep_models(config) -> list[str]:
    """The models the sweep's expansion made (they carry its size, KV heads and seed)."""
    return [m for m in models(config) if SWEEP_META in model_spec(config, m)]


def tasks(config) -> list[str]:
    """The tasks the config asks for, built-in order first (each checked by the vocabulary)."""
    return registry.workflow_tasks(config["tasks"])


def runs(config, model, task) -> bool:
    """Whether `model` is scored on `task` (a family-shared task: on its base): every model is,
    unless its own block leaves the task out with `models.<model>.tasks.<task>: null`."""
    own = model_spec(config, model).get("tasks") or {}
    base = registry.base_task(task).name
    return not (base in own and own[base] is None)


def model_tasks(config, model) -> list[str]:
    """The run's tasks this model is scored on, in the run's order."""
    return [t for t in tasks(config) if runs(config, model, t)]


def card(model) -> str:
    return paths.CARD.format(model=model)


# ---- ablations -----------------------------------------------------------------------------------
def ablation_block(config, model=None) -> dict:
    """The `ablation:` block (kinds, units, min_group; defaults from the schema), with the model's
    own block on top."""
    block = dict(config["ablation"])
    if model is not None:
        block.update(model_spec(config, model).get("ablation", {}))
    return block


def model_ablations(config, model) -> list[str]:
    """Every (kind, unit) this model is scored under, named kind-unit as in the paths."""
    b = ablation_block(config, model)
    return [registry.ablation_name(k, u) for k in b["kinds"] for u in b["units"]]


def ablations(config) -> list[str]:
    """Every ablation some model is scored under, in the models' order."""
    return list(dict.fromkeys(a for m in models(config) for a in model_ablations(config, m)))


def ablation_opts(config, model) -> dict:
    """What an ablation job needs beyond the ablation's name: the model's aligned-group size and
    the resample seed, and a guided scan's settings where the model's scores are guided (`scores_opts`)."""
    opts = {"min_group": int(ablation_block(config, model)["min_group"]), "seed": int(config["seed"])}
    guided = scores_opts(config, model)
    return opts if guided is None else {**opts, "scores": guided}


def scores_block(config, model=None) -> dict:
    """The `scores:` block (method, audit, level, top; `SCORE_DEFAULTS` where absent), with the
    model's own block on top."""
    block = {**SCORE_DEFAULTS, **(config.get("scores") or {})}
    if model is not None:
        block.update(model_spec(config, model).get("scores") or {})
    return block


def top_units(config, model) -> int:
    """How many top units of the ranking a model's curves use (the guided scan scores them exactly):
    the ranked curve's max_steps or, with greedy, its pool's reach (greedy_candidates + greedy_steps
    - 1: the pool refills from the ranking after each step), whichever is more; at least 10."""
    cfg = {**config["curves"], **(model_spec(config, model).get("curves") or {})}
    n = int(cfg["max_steps"])
    if "greedy" in cfg["methods"]:
        n = max(n, int(cfg["greedy_candidates"]) + int(cfg["greedy_steps"]) - 1)
    return max(n, MIN_TOP)


def scores_opts(config, model) -> dict | None:
    """A guided scan's settings for the model's score jobs (engine.settings.ScoreSettings); None for
    the exact scan, so an exact run's job params are today's."""
    b = scores_block(config, model)
    if b["method"] == "exact":
        return None
    return {"method": b["method"], "audit": int(b["audit"]), "level": float(b["level"]),
            "top": int(b.get("top") or top_units(config, model))}


def bootstrap_opts(config) -> dict:
    b = config["bootstrap"]
    return {"n": int(b["n"]), "ci": float(b["ci"]), "seed": int(config["seed"])}


# ---- families and shared conditions --------------------------------------------------------------
def family_members(config, model, task=None) -> list[str]:
    """The models of `model`'s family, in the config's order; with a task: those scored on it (a
    family-shared condition is made of them alone)."""
    fam = model_spec(config, model).get("family", model)
    return [m for m in models(config) if model_spec(config, m).get("family", m) == fam
            and (task is None or runs(config, m, task))]


def models_for(config, task, ablation=None) -> list[str]:
    """The models scored on `task` (not those that leave it out: `runs`). A family-shared task is
    only a new condition for families of two or more such models; for a family of one it would
    repeat the per-model run exactly, so those models are left out of it. With an ablation: only
    the models scored under it."""
    shared = registry.task(task).base is not None
    out = [m for m in models(config) if runs(config, m, task)
           and (not shared or len(family_members(config, m, task)) > 1)]
    return [m for m in out if ablation is None or ablation in model_ablations(config, m)]


def shared_task(config, task) -> str | None:
    """The family-shared task of `task` (its spec's `shared`) when the config asks for it (the task's
    `shared` setting; on unless set false) and a family has two or more models; else None."""
    shared = registry.task(task).shared
    if shared and config["tasks"][task].get("shared", True) and models_for(config, shared):
        return shared
    return None


def shared_members(config, task, model) -> list[str]:
    """The datasets a family-shared condition's dataset of `model` is made from: its base task's
    dataset of every model of the family scored on it, in the config's model order."""
    base = registry.base_task(task).name
    return [paths.DATA.format(task=base, model=m) for m in family_members(config, model, task)]


def shared_tasks(config) -> list[str]:
    """The family-shared tasks this run builds."""
    return [s for s in (shared_task(config, t) for t in tasks(config)) if s]


def dataset_tasks(config) -> list[str]:
    """Every task with datasets: the configured ones, then their family-shared conditions."""
    return tasks(config) + shared_tasks(config)


# ---- per-job settings ----------------------------------------------------------------------------
def model_build_spec(config, model) -> dict:
    """What the model stage depends on (see NOT_BUILT_FROM), with the dtype it runs in where that is
    not the spec's own (bfloat16 on cuda, resources.model_dtype): the card records it."""
    spec = {k: v for k, v in model_spec(config, model).items() if k not in NOT_BUILT_FROM}
    dtype = model_dtype(config, spec)
    return spec if dtype == spec.get("dtype", DEFAULT_DTYPE) else {**spec, "dtype": dtype}


def weights_pattern(config, own: bool) -> str:
    """A wildcard pattern of the models with weights of their own (toy, gguf: rule model) or without
    (hf: rule model_hf); one that matches nothing when there are none."""
    names = [m for m in models(config) if (model_spec(config, m).get("source") != "hf") == own]
    return one_of(names)


def one_of(names) -> str:
    """A wildcard pattern matching exactly these names; one that matches nothing for none."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def task_config(config, task, model) -> dict:
    """The task's global settings with the model's own overrides on top (a shared task: its base's)."""
    base = registry.base_task(task).name
    cfg = copy.deepcopy(config["tasks"][base])
    cfg.update((model_spec(config, model).get("tasks") or {}).get(base) or {})
    return cfg


def dataset_config(config, task, model) -> dict:
    """What a dataset job depends on: the task's settings less the metric it is scored with, so
    changing `tasks.<task>.metric` reruns scores and curves, never the datasets."""
    return {k: v for k, v in task_config(config, task, model).items() if k != "metric"}


def task_metric(config, task) -> str | None:
    """The metric that damage, rankings and curves use (config `tasks.<task>.metric`); None for a
    task that names none (its spec's default). One for every model: a table compares models on it."""
    return config["tasks"].get(registry.base_task(task).name, {}).get("metric")


def min_heldout(config, task) -> int:
    """The fewest held-out curve prompts a damage percentage may rest on: config
    `curves.min_heldout.<task>`, else the task spec's own."""
    return int(config["curves"].get("min_heldout", {}).get(task, registry.task(task).min_heldout))


def curve_config(config, task, model) -> dict:
    cfg = copy.deepcopy(config["curves"])
    cfg.update(model_spec(config, model).get("curves", {}))
    cfg["n_curve"] = task_config(config, task, model).get("n_curve")
    return cfg
