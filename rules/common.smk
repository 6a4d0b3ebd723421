import os
import re
import copy
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml


sys.path.insert(0, os.path.join(workflow.basedir, "src"))
from circuitloc.plan.sweep import META as SWEEP_META, expand as expand_sweep  # noqa: E402  (no heavy imports)
from circuitloc.plan.checkpoints import checkpoint_files  # noqa: E402
from circuitloc.plan.codehash import code_hash  # noqa: E402
from circuitloc.plan import vocab  # noqa: E402  (tasks, kinds, units: standard library only)


# ---- Code is a rerun trigger ---------------------------------------------------------------------
# Each script rule has the param `code=code_version("<script>")`, the hash of the script and of
# every circuitloc module it imports, transitively (circuitloc.plan.codehash; comments, docstrings and
# formatting do not count). Params are one of Snakemake's rerun triggers, so a change
# to the code a job runs reruns it and everything after it: results always come from this code.
def code_version(script):
    return code_hash(os.path.join(workflow.basedir, "workflow", "scripts", script))


def _with_sweep(models, sweep):
    """The configured models plus the sweep's toys (a name may repeat only with the same spec: the
    report re-reads an already expanded config)."""
    models = dict(models or {})
    for name, spec in expand_sweep(sweep).items() if sweep else ():
        if name in models and models[name] != spec:
            raise ValueError(f"config: models.{name} clashes with a model of the sweep; rename one of them")
        models[name] = spec
    if not models:
        raise ValueError("config: no models: list some under models: or give a sweep: section")
    return models


config["models"] = _with_sweep(config.get("models"), config.get("sweep"))
MODELS = list(config["models"])
SWEEP_MODELS = [m for m in MODELS if SWEEP_META in config["models"][m]]
# tasks of the user's own modules (config task_modules); jobs load them through the environment
os.environ[vocab.TASK_MODULES_ENV] = ",".join(config.get("task_modules", []))
vocab.load_task_modules(config.get("task_modules", []))
TASKS = vocab.workflow_tasks(config["tasks"])
def ablation_block(model=None):
    """The `ablation:` block (kinds, units, min_group; defaults from the schema), with the model's
    own block on top."""
    block = dict(config["ablation"])
    if model is not None:
        block.update(model_spec(model).get("ablation", {}))
    return block


def model_ablations(model):
    """Every (kind, unit) this model is scored under, named kind-unit as in the paths."""
    b = ablation_block(model)
    return [f"{k}-{u}" for k in b["kinds"] for u in b["units"]]


def ablation_opts(wildcards):
    """What an ablation job needs beyond the ablation's name: the model's aligned-group size and
    the resample seed."""
    return {"min_group": int(ablation_block(wildcards.model)["min_group"]), "seed": int(config["seed"])}


def bootstrap_opts():
    b = config["bootstrap"]
    return {"n": int(b["n"]), "ci": float(b["ci"]), "seed": int(config["seed"])}


def family_members(model):
    fam = model_spec(model).get("family", model)
    return [m for m in MODELS if model_spec(m).get("family", m) == fam]


def models_for(task, ablation=None):
    """A family-shared task (facts_shared) is only a new condition for families of two or more
    models; for a family of one it would repeat the per-model run exactly, so those models are left
    out of it. With an ablation: only the models scored under it."""
    shared = vocab.task(task).base is not None
    models = [m for m in MODELS if not shared or len(family_members(m)) > 1]
    return [m for m in models if ablation is None or ablation in model_ablations(m)]


def shared_task(task):
    """The family-shared task of `task` (facts: facts_shared) when the config asks for it and a
    family has two or more models; else None."""
    shared = vocab.task(task).shared
    if shared and config["tasks"][task].get("shared") and models_for(shared):
        return shared
    return None


def dataset_tasks():
    return TASKS + [shared_task(t) for t in TASKS if shared_task(t)]




def model_spec(model):
    return config["models"][model]


def model_build_spec(model):
    """What the model stage depends on: not the model's task or curve overrides, nor its size hint or
    resources, so changing those never retrains or reconverts a model."""
    return {k: v for k, v in model_spec(model).items() if k not in ("tasks", "curves", "size", "resources", "ablation", SWEEP_META)}


def models_by_weights(own):
    """A wildcard pattern of the models with weights of their own (toy, gguf: rule model) or without
    (hf: rule model_hf); one that matches nothing when there are none."""
    names = [m for m in MODELS if (model_spec(m).get("source") != "hf") == own]
    return "|".join(re.escape(m) for m in names) if names else "(?!)"


def task_config(task, model):
    """The task's global settings with the model's own overrides on top."""
    base = vocab.base_task(task).name
    cfg = copy.deepcopy(config["tasks"][base])
    cfg.update(model_spec(model).get("tasks", {}).get(base, {}))
    return cfg


def dataset_config(task, model):
    """What a dataset job depends on: the task's settings less the metric it is scored with, so
    changing `tasks.facts.metric` reruns scores and curves, never the datasets."""
    return {k: v for k, v in task_config(task, model).items() if k != "metric"}


def task_metric(task):
    """The metric that damage, rankings and curves use (config `tasks.<task>.metric`; default in
    config/schema.yaml); None for a task that names none (its spec's default). One for every model:
    a table compares models on it."""
    return config["tasks"].get(vocab.base_task(task).name, {}).get("metric")


def curve_config(task, model):
    cfg = copy.deepcopy(config["curves"])
    cfg.update(model_spec(model).get("curves", {}))
    cfg["n_curve"] = task_config(task, model).get("n_curve")
    return cfg


def card(model):
    return f"results/models/{model}/card.json"


wildcard_constraints:
    model="|".join(re.escape(m) for m in MODELS),
    task="|".join(map(re.escape, dataset_tasks())) or "none",
    ablation=vocab.ABLATION_PATTERN,



# ---- Resource files are inputs -------------------------------------------------------------------
# Every file a result is computed from is an input of the job that reads it, so editing it reruns
# exactly that job and what follows: the IOI templates / names / places / objects and the facts file
# (datasets; a toy's vocabulary and training data too), a local fahamu/ioi parquet (IOI datasets).
# A fahamu file from the hub is fetched inside the dataset job (never at DAG-build time): the
# config's source (repo, file) is in the job's params instead.
def resource_path(*parts):
    return os.path.join(workflow.basedir, "resources", *parts)


def dataset_inputs(wc):
    """Named files a dataset job reads (`vocab.dataset_inputs`: ioi: the 30 templates and a local
    fahamu parquet, or the generator's four IOI files; facts: the facts file; induction: none)."""
    return vocab.dataset_inputs(wc.task, task_config(wc.task, wc.model), resource_path())


def model_inputs(wc):
    """A toy model's vocabulary and training data come from the IOI resource files and the facts
    file, so it is rebuilt when they change (a stored checkpoint's files are inputs too); other
    sources read no resource file."""
    spec = model_spec(wc.model)
    if spec.get("source") != "toy":
        return {}
    recipe = spec.get("toy", {})
    ioi_dir = recipe.get("ioi_resources") or resource_path("ioi")
    out = {k: os.path.join(ioi_dir, os.path.basename(f)) for k, f in vocab.IOI_RESOURCES.items()}
    out["facts"] = recipe.get("facts_path") or resource_path(vocab.FACTS_FILE)
    if recipe.get("checkpoint"):  # a stored toy: its files too (its held-out checks read the resources)
        out.update({f"checkpoint_{i}": f for i, f in enumerate(checkpoint_files(recipe["checkpoint"]))})
    return out

ABLATIONS = list(dict.fromkeys(a for m in MODELS for a in model_ablations(m)))


# ---- One scores job and one curves job per task and model ----------------------------------------
# A job's fixed cost (imports, loading the model: ~5 s) is most of a toy's compute, so one job runs
# every ablation of a model on a task (circuitloc.engine.pipeline.for_each_ablation), still writing one file
# per ablation. A rule's outputs are fixed, so the models that share one list of ablations share a
# rule: `scores` and `curves` for the first list, `scores_2`, `curves_2`, ... for the others.
# `group_ablations: false` (config/paper.yaml) gives every ablation its own job again: shorter jobs
# for a cluster's time limits and more of them in parallel, where a model is large.
def _ablation_groups():
    if not config["group_ablations"]:
        return [([a], [m for m in MODELS if a in model_ablations(m)]) for a in ABLATIONS]
    groups = {}
    for m in MODELS:
        groups.setdefault(tuple(model_ablations(m)), []).append(m)
    return [(list(abls), models) for abls, models in groups.items()]


ABLATION_GROUPS = _ablation_groups()


def group_tag(ablations):
    """What names a job's log, benchmark and stash below {task}/{model}: nothing when one job runs
    all of the model's ablations, the ablation when each has its own."""
    return "" if config["group_ablations"] else os.sep + ablations[0]


def resume_dir(stage, ablations):
    """Where a job keeps its finished ablations until it succeeds (circuitloc.resume)."""
    tag = group_tag(ablations)
    return lambda wc: f"results/.resume/{stage}/{wc.task}/{wc.model}{tag}"


def group_rule(stage, ablations):
    """The name of the rules running `ablations` at `stage`: the stage itself when every model shares
    one list of ablations (the usual case), else the stage, its kinds and its units
    (`scores__zero_mean__query`), so every rule can be found by its name."""
    if len(ABLATION_GROUPS) == 1:
        return stage
    kinds, units = zip(*map(vocab.parse_ablation, ablations))
    return f"{stage}__{'_'.join(dict.fromkeys(kinds))}__{'_'.join(dict.fromkeys(units))}"


def one_of(models):
    return "|".join(re.escape(m) for m in models)


# ---- Resources per job ---------------------------------------------------------------------------
# Estimated from the config (circuitloc.plan.resources: size hints, toy recipes, overrides).
def job_resources(stage, per_model=True):
    """Keyword arguments for a rule's `resources:` (`**job_resources("scores")`): one callable per
    resource name any job may set, returning None (no request) where a job sets none."""
    from circuitloc.plan.resources import estimate, requested_keys

    def value(key):
        if per_model:
            return lambda wc: estimate(config, model_spec(wc.model), stage, len(group_of(wc.model, stage))).get(key)
        return lambda wc: estimate(config, None, stage).get(key)

    return {k: value(k) for k in requested_keys(config, config["models"])}


def group_of(model, stage):
    """The ablations one job of `stage` runs for `model`: all of them when grouped, else one."""
    return model_ablations(model) if config["group_ablations"] else model_ablations(model)[:1]


def per_model(pattern):
    """One file per model scored on this task under this ablation, in MODELS order (the scripts zip
    them back with params.models)."""
    return lambda wc: [pattern.format(task=wc.task, model=m, ablation=wc.ablation)
                       for m in models_for(wc.task, wc.ablation)]


def table_pairs():
    """(task, ablation) pairs that have at least one model: one Table 1/2 and Figure 1/2 each."""
    return [(t, a) for t in dataset_tasks() for a in ABLATIONS if models_for(t, a)]


def sweep_pairs():
    """(task, ablation) pairs that get a sweep table: every task and ablation of the sweep's models."""
    return [(t, a) for t, a in table_pairs() if any(m in SWEEP_MODELS for m in models_for(t, a))]


def stability_entries(task):
    """What the stability table of `task` reads, per model and ablation (facts: the shared scores too)."""
    out = []
    for m in models_for(task):
        for a in model_ablations(m):
            e = {"model": m, "card": card(m), "ablation": a,
                 "scores": f"results/scores/{task}/{m}/{a}.parquet",
                 "prompts": f"results/scores/{task}/{m}/{a}.prompts.parquet",
                 "dataset": f"results/data/{task}/{m}.parquet"}
            if vocab.task(task).shared:  # the scores on the family-shared prompts, where there are some
                st = shared_task(task)
                e["shared"] = f"results/scores/{st}/{m}/{a}.parquet" if st and m in models_for(st, a) else None
            out.append(e)
    return out


def all_outputs():
    out = [card(m) for m in MODELS]
    for task, abl in table_pairs():
        out += [f"results/tables/table1_{task}_{abl}.csv", f"results/tables/table2_{task}_{abl}.csv",
                f"results/figures/fig1_heatmap_{task}_{abl}.png", f"results/figures/fig2_curves_{task}_{abl}.png"]
    out += [f"results/figures/scale_{abl}.png" for abl in ABLATIONS]
    extras = config["analysis"]
    if "stability" in extras:
        out += [f"results/tables/stability_{t}.csv" for t in TASKS] + [f"results/figures/stability_{t}.png" for t in TASKS]
    out += [f"results/tables/{a}.csv" for a in ("robustness", "specificity") if a in extras]
    out += [f"results/tables/sweep_{t}_{a}.csv" for t, a in sweep_pairs()]
    out += ["results/tables/sweep_overview.csv"] if sweep_pairs() else []
    return out + ["results/tables/cost.csv", "results/report.html"]


# ---- The cost record ----------------------------------------------------------------------------
# Every rule that runs a script writes a Snakemake benchmark file (results/benchmarks/<rule>/
# <wildcards>.tsv); rule cost sums those of every job in Snakemake's own DAG, which the Snakefile's
# onstart records in DAG_RECORD (circuitloc.plan.dag.record_dag). It runs last: its inputs are the run's
# other targets.
DAG_RECORD = ".snakemake/circuitloc/dag_jobs.json"


def cost_inputs():
    return [f for f in all_outputs() if f not in ("results/tables/cost.csv", "results/report.html")]


def report_inputs():
    """Every table and figure the run makes: what the report collects."""
    return [f for f in all_outputs() if f.startswith(("results/tables/", "results/figures/"))]


def build_report(html, log_path):
    """`snakemake --report` on this workflow with this run's effective config, so the report shows the
    DAG just built. It only reads the records under .snakemake (no lock needed beside the run)."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "config.yaml"
        cfg.write_text(yaml.safe_dump(config, sort_keys=False))
        cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(workflow.main_snakefile), "--directory",
               os.getcwd(), "--configfile", str(cfg), "--nolock", "--report", html]
        env = {k: v for k, v in os.environ.items() if k != "SNAKEMAKE_PROFILE"}  # no executor profile
        with open(log_path, "w") as log_file:
            subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, check=True, timeout=3600)


# ---- Priorities: long jobs first, so 2 cores stay busy to the end --------------------------------
# Snakemake starts the ready job of highest priority first. The default run's long jobs are toy
# training (~4-5 CPU-minutes each) and SmolLM2's score and curve jobs (1-3 minutes each, one chain
# model -> dataset -> scores -> curves per task): started last, one of them runs alone on one core
# while the other idles (the tail of the 160aaff run). So the model stage goes first (it trains the
# toys and converts SmolLM2), then the short dataset jobs that unlock the scores, then the score and
# curve jobs of groups with a pretrained (non-toy) model, then the toys' own, then specificity;
# tables, figures and the rest (seconds each) keep priority 0 and fill the gaps.
PRIORITY = {"model": 50, "dataset": 40, "pretrained": 30, "toy": 20, "specificity": 10}


def job_priority(stage, models=()):
    """The `priority:` of a rule: by stage; scores and curves by whether any of the rule's models is
    pretrained (`models`: the models of its ablation group)."""
    if stage in ("scores", "curves"):
        return PRIORITY["toy" if all(model_spec(m).get("source") == "toy" for m in models) else "pretrained"]
    return PRIORITY[stage]


# ---- Per-model figures of a sweep: a sample --------------------------------------------------------
def figure_models(task, ablation):
    """The models of the per-task heatmap and curve figures: at most `figures.max_models` of those
    scored (circuitloc.plan.sweep.figure_sample says which); the tables keep every model."""
    from circuitloc.plan.sweep import figure_sample

    return figure_sample(config["models"], models_for(task, ablation), int(config["figures"]["max_models"]))


def sweep_adjust_with():
    """{"task (label)/ablation": paired csv} of another run that the overview adjusts together with
    this one's (config `sweep.adjust_with`: e.g. facts ranked by accuracy beside facts by margin)."""
    out = {}
    for e in config.get("sweep", {}).get("adjust_with", []):
        for t, a in sweep_pairs():
            if t in e["tasks"]:
                out[f"{t} ({e['label']})/{a}"] = os.path.join(e["tables"], f"sweep_paired_{t}_{a}.csv")
    return out


def sweep_layer_table(task, ablation):
    """[the Table 1 of `ablation`'s kind under layer units] for a kv ablation whose layer twin has a
    sweep table, else []: a KV-1 toy's kv groups are its layers, compared with the MHA toy's layers."""
    kind, unit = vocab.parse_ablation(ablation)
    twin = vocab.ablation_name(kind, vocab.LAYER)
    return [f"results/tables/table1_{task}_{twin}.csv"] if unit == vocab.KV and (task, twin) in sweep_pairs() else []
