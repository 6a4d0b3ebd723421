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
from circuitloc.sweep import META as SWEEP_META, expand as expand_sweep  # noqa: E402  (no heavy imports)
from circuitloc.checkpoints import checkpoint_files  # noqa: E402
from circuitloc.codehash import code_hash  # noqa: E402
from circuitloc import hub  # noqa: E402  (standard library only: fahamu file names and paths)


# ---- Code is a rerun trigger ---------------------------------------------------------------------
# Each script rule has the param `code=code_version("<script>")`, the hash of the script and of
# every circuitloc module it imports, transitively (circuitloc.codehash; comments, docstrings and
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
TASKS = [t for t in ("ioi", "induction", "facts") if t in config["tasks"]]
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
    """facts_shared is only a new condition for families of two or more models; for a family of one
    it would repeat the per-model facts run exactly, so those models are left out of it. With an
    ablation: only the models scored under it."""
    models = [m for m in MODELS if task != "facts_shared" or len(family_members(m)) > 1]
    return [m for m in models if ablation is None or ablation in model_ablations(m)]


def dataset_tasks():
    shared = config["tasks"].get("facts", {}).get("shared")
    extra = ["facts_shared"] if "facts" in TASKS and shared and models_for("facts_shared") else []
    return TASKS + extra


wildcard_constraints:
    model="|".join(re.escape(m) for m in MODELS),
    task="ioi|induction|facts|facts_shared",
    ablation="(zero|mean|resample)-(query|kv|layer)",


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
    base = "facts" if task.startswith("facts") else task
    cfg = copy.deepcopy(config["tasks"][base])
    cfg.update(model_spec(model).get("tasks", {}).get(base, {}))
    return cfg


def dataset_config(task, model):
    """What a dataset job depends on: the task's settings less the metric it is scored with, so
    changing `tasks.facts.metric` reruns scores and curves, never the datasets."""
    return {k: v for k, v in task_config(task, model).items() if k != "metric"}


def task_metric(task):
    """The facts metric that damage, rankings and curves use (config `tasks.facts.metric`, default
    in config/schema.yaml); None for the other tasks, which have one metric each. One for every
    model: a table compares models on it."""
    if not task.startswith("facts"):
        return None
    return config["tasks"].get("facts", {}).get("metric", "margin")


def curve_config(task, model):
    cfg = copy.deepcopy(config["curves"])
    cfg.update(model_spec(model).get("curves", {}))
    cfg["n_curve"] = task_config(task, model).get("n_curve")
    return cfg


def card(model):
    return f"results/models/{model}/card.json"



# ---- Resource files are inputs -------------------------------------------------------------------
# Every file a result is computed from is an input of the job that reads it, so editing it reruns
# exactly that job and what follows: the IOI templates / names / places / objects and the facts file
# (datasets; a toy's vocabulary and training data too), a local fahamu/ioi parquet (IOI datasets).
# A fahamu file from the hub is fetched inside the dataset job (never at DAG-build time): the
# config's source (repo, file) is in the job's params instead.
IOI_RESOURCE_FILES = ("templates", "names", "places", "objects")


def resource_path(*parts):
    return os.path.join(workflow.basedir, "resources", *parts)


def ioi_resource_inputs(root, names=IOI_RESOURCE_FILES):
    return {f"ioi_{k}": os.path.join(root, f"{k}.txt") for k in names}


def dataset_inputs(wc):
    """Named resource files a dataset job reads: ioi: the 30 templates, the places and objects (a
    sentence outside the templates gets its id from its skeleton) and a local fahamu parquet, or the
    generator's four IOI files (the same templates, names, places, objects); facts: the facts file;
    induction: none."""
    if wc.task == "ioi":
        src = task_config("ioi", wc.model).get("source") or {}
        fahamu = src.get("kind") == "fahamu"
        out = ioi_resource_inputs(resource_path("ioi"),
                                  ("templates", "places", "objects") if fahamu else IOI_RESOURCE_FILES)
        if fahamu and hub.local_fahamu(src):
            out["fahamu"] = hub.local_fahamu(src)
        return out
    if wc.task == "facts":
        return {"facts": task_config("facts", wc.model).get("path") or resource_path("facts", "facts.tsv")}
    return {}


def model_inputs(wc):
    """A toy model's vocabulary and training data come from the IOI resource files and the facts
    file, so it is rebuilt when they change (a stored checkpoint's files are inputs too); other
    sources read no resource file."""
    spec = model_spec(wc.model)
    if spec.get("source") != "toy":
        return {}
    recipe = spec.get("toy", {})
    out = ioi_resource_inputs(recipe.get("ioi_resources") or resource_path("ioi"))
    out["facts"] = recipe.get("facts_path") or resource_path("facts", "facts.tsv")
    if recipe.get("checkpoint"):  # a stored toy: its files too (its held-out checks read the resources)
        out.update({f"checkpoint_{i}": f for i, f in enumerate(checkpoint_files(recipe["checkpoint"]))})
    return out

ABLATIONS = list(dict.fromkeys(a for m in MODELS for a in model_ablations(m)))


# ---- One scores job and one curves job per task and model ----------------------------------------
# A job's fixed cost (imports, loading the model: ~5 s) is most of a toy's compute, so one job runs
# every ablation of a model on a task (circuitloc.pipeline.for_each_ablation), still writing one file
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


def group_rule(stage, i):
    return stage if i == 0 else f"{stage}_{i + 1}"


def groups_of(model):
    """The indices of the ablation groups (rules) that run `model`."""
    return [i for i, (_, ms) in enumerate(ABLATION_GROUPS) if model in ms]


def one_of(models):
    return "|".join(re.escape(m) for m in models)


# ---- Resources per job ---------------------------------------------------------------------------
# Cards exist only after the models stage, so a job's resources come from the config: the model's
# `size:` hint (params_b, n_layers, n_heads; set in config/paper.yaml) or its toy recipe. Without a
# hint (a gguf or hf model nobody sized) a job gets the small CPU defaults below. The top-level
# `resources:` block (every job), then the model's own `resources:` block (the jobs that run the
# model: datasets, scores, curves) override the estimate key by key.
#
#   mem_mb   host memory: 2 GB + twice the weights (bytes/param from the model's dtype) for jobs that
#            load the model; the models stage loads nothing for hf (meta device), 2 GB for toys.
#   runtime  minutes: base + k * params_b * units / 100 for scores and curves, units = n_layers *
#            n_heads (every unit score and every curve step is a pass over the prompts), times the
#            model's number of ablations (one job runs them all), base +
#            k * params_b for datasets; times 30 on a CPU. Models: 30 + 10 * params_b (download).
#   gpu      1 for the jobs that run the model (datasets, scores, curves) when device is cuda; the
#            SLURM plugin turns it into --gpus=1 (or set gres / gpu_model per model or globally).

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
RESOURCE_KEYS = ("mem_mb", "runtime", "gpu", "gpu_model", "gres", "constraint", "slurm_partition",
                 "slurm_account", "slurm_extra", "qos")
# stage: (base minutes, minutes per billion parameters x 100 units, on a GPU)
RUNTIME = {"dataset": (10, 2), "scores": (10, 1), "curves": (30, 4), "specificity": (10, 1), "small": (10, 0)}
GPU_STAGES = ("dataset", "scores", "curves", "specificity")
CPU_SLOWDOWN = 30


def model_size(model):
    """(params_b, units) from the config: the `size` hint, else a toy's recipe, else (0, 0)."""
    spec = model_spec(model)
    hint = spec.get("size", {})
    if spec.get("source") == "toy" and not hint:
        t = spec.get("toy", {})
        d, n_layers, vocab = t.get("d_model", 128), t.get("n_layers", 2), 4096
        return (n_layers * 12 * d * d + 2 * vocab * d) / 1e9, n_layers * t.get("n_heads", 8)
    return float(hint.get("params_b", 0)), int(hint.get("n_layers", 0)) * int(hint.get("n_heads", 0))


def estimate_resources(model, stage):
    """The estimate for one job of `stage` ('model', 'dataset', 'scores', 'curves', 'small') on `model`
    (None for jobs over many models), with the config's overrides applied."""
    cuda = config["device"] == "cuda"
    params_b, units = model_size(model) if model else (0.0, 0)
    weights_gb = params_b * DTYPE_BYTES[model_spec(model).get("dtype", "float32")] if model else 0.0
    if stage == "model":
        gguf = model and model_spec(model).get("source") == "gguf"
        mem_gb = 2 + (3 * weights_gb if gguf else 0)  # gguf: quantized file, dequantized copy, saved copy
        runtime = 30 + 10 * params_b  # a download of the hf checkpoint, or training a toy on one core
    else:
        base, k = RUNTIME[stage]
        mem_gb = 2 + (2 * weights_gb if stage in GPU_STAGES else 0)
        per_unit = units / 100 if stage in ("scores", "curves", "specificity") else 1  # datasets: passes over prompts
        if model and stage in ("scores", "curves") and config["group_ablations"]:
            per_unit *= len(model_ablations(model))
        runtime = base + k * params_b * per_unit * (1 if cuda else CPU_SLOWDOWN)
    res = {"mem_mb": int(1024 * math.ceil(mem_gb)), "runtime": int(math.ceil(runtime))}
    if cuda and stage in GPU_STAGES:
        res["gpu"] = 1
    overrides = dict(config.get("resources", {}))
    if model and stage in GPU_STAGES:  # a model's own block is for the jobs that run it
        overrides.update(model_spec(model).get("resources", {}))
    if stage not in GPU_STAGES or not cuda:  # GPU settings only for GPU jobs
        overrides = {k: v for k, v in overrides.items() if k not in ("gpu", "gpu_model", "gres")}
    elif "gres" in overrides:
        res.pop("gpu")  # a cluster that wants --gres=gpu:... gets only that
    res.update(overrides)
    return res


def job_resources(stage, per_model=True):
    """Keyword arguments for a rule's `resources:` (`**job_resources("scores")`): one callable per
    resource name any job may set, returning None (no request) where a job sets none."""
    keys = set(estimate_resources(None, "small")) | ({"gpu"} if config["device"] == "cuda" else set())
    for spec in [config] + [model_spec(m) for m in MODELS]:
        keys |= set(spec.get("resources", {}))

    def value(key):
        if per_model:
            return lambda wc: estimate_resources(wc.model, stage).get(key)
        return lambda wc: estimate_resources(None, stage).get(key)

    return {k: value(k) for k in RESOURCE_KEYS if k in keys}


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
            if task == "facts":
                shared = "facts_shared" in dataset_tasks() and m in models_for("facts_shared", a)
                e["shared"] = f"results/scores/facts_shared/{m}/{a}.parquet" if shared else None
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


# ---- The cost record -----------------------------------------------------------------------------
# Every rule that runs a script writes a Snakemake benchmark file (results/benchmarks/<rule>/
# <wildcards>.tsv: wall time, CPU time, peak memory of the job); rule cost sums them per stage and
# per model (circuitloc.cost). Its inputs are the benchmark files of every job of the run, planned
# here from the config the way the rules plan them (tests/test_cost.py holds the two to each other).
def script_jobs():
    """rule -> the wildcards of each of its jobs in this run, for every rule that runs a script but
    the cost table itself, in pipeline order."""
    extras = config["analysis"]
    tm = [(t, m) for t in dataset_tasks() for m in models_for(t)]
    return {
        "model": [{"model": m} for m in MODELS],
        "dataset": [{"task": t, "model": m} for t in TASKS for m in models_for(t)],
        "dataset_shared_facts": [{"model": m} for t, m in tm if t == "facts_shared"],
        "scores": [{"task": t, "model": m, "group": i} for t, m in tm for i in groups_of(m)],
        "curves": [{"task": t, "model": m, "group": i} for t, m in tm for i in groups_of(m)],
        "tables": [{"task": t, "ablation": a} for t, a in table_pairs()],
        "figures": [{"task": t, "ablation": a} for t, a in table_pairs()],
        "figure_scale": [{"ablation": a} for a in ABLATIONS],
        "specificity": [{"model": m, "ablation": a} for m in MODELS for a in model_ablations(m)]
        if "specificity" in extras else [],
        "specificity_table": [{}] if "specificity" in extras else [],
        "stability": [{"task": t} for t in TASKS] if "stability" in extras else [],
        "robustness": [{}] if "robustness" in extras else [],
        "sweep_tables": [{"task": t, "ablation": a} for t, a in sweep_pairs()],
        "sweep_overview": [{}] if sweep_pairs() else [],
    }


_BENCHMARK_JOBS = []


def benchmark_jobs():
    """(benchmark file, rule, model or None) of every job script_jobs() lists (computed once: the
    cost rule's input and params both ask)."""
    if not _BENCHMARK_JOBS:
        _BENCHMARK_JOBS.extend(_benchmark_jobs())
    return _BENCHMARK_JOBS


def _benchmark_jobs():
    def rule(r, wc):  # scores and curves: the rule of the job's ablation group; hf models: model_hf
        if r == "model" and model_spec(wc["model"]).get("source") == "hf":
            return rules.model_hf
        return getattr(rules, group_rule(r, wc["group"]) if r in ("scores", "curves") else r)

    return [(str(rule(r, wc).benchmark).format(**wc), r, wc.get("model"))
            for r, jobs in script_jobs().items() for wc in jobs]


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
