import re
import copy
import json


MODELS = list(config["models"])
TASKS = [t for t in ("ioi", "induction", "facts") if t in config["tasks"]]
ABLATIONS = list(config.get("ablations", ["zero"]))


def family_members(model):
    fam = model_spec(model).get("family", model)
    return [m for m in MODELS if model_spec(m).get("family", m) == fam]


def models_for(task):
    """facts_shared is only a new condition for families of two or more models; for a family of one
    it would repeat the per-model facts run exactly, so those models are left out of it."""
    if task == "facts_shared":
        return [m for m in MODELS if len(family_members(m)) > 1]
    return MODELS


def dataset_tasks():
    extra = ["facts_shared"] if "facts" in TASKS and models_for("facts_shared") else []
    return TASKS + extra


wildcard_constraints:
    model="|".join(re.escape(m) for m in MODELS),
    task="ioi|induction|facts|facts_shared",
    ablation="[a-z]+(-query|-kv)?",


def model_spec(model):
    return config["models"][model]


def model_build_spec(model):
    """What the model stage depends on: not the model's task or curve overrides, so changing
    those never retrains or reconverts a model."""
    return {k: v for k, v in model_spec(model).items() if k not in ("tasks", "curves")}


def task_config(task, model):
    """The task's global settings with the model's own overrides on top."""
    base = "facts" if task.startswith("facts") else task
    cfg = copy.deepcopy(config["tasks"][base])
    cfg.update(model_spec(model).get("tasks", {}).get(base, {}))
    return cfg


def curve_config(task, model):
    cfg = copy.deepcopy(config["curves"])
    cfg.update(model_spec(model).get("curves", {}))
    cfg["n_curve"] = task_config(task, model).get("n_curve")
    return cfg


def card(model):
    return f"results/models/{model}/card.json"


def gb_for(model):
    """Memory from the model size: fp32 weights plus activations and a margin (GB)."""
    return int(config.get("resources", {}).get("mem_gb", {}).get(model, 4))


def per_model(pattern):
    """One file per configured model, in MODELS order (the scripts zip them back with params.models)."""
    return lambda wc: [pattern.format(task=wc.task, model=m, ablation=wc.ablation) for m in models_for(wc.task)]


def all_outputs():
    out = [card(m) for m in MODELS]
    for task in dataset_tasks():
        for abl in ABLATIONS:
            out += [f"results/tables/table1_{task}_{abl}.csv", f"results/tables/table2_{task}_{abl}.csv",
                    f"results/figures/fig1_heatmap_{task}_{abl}.png", f"results/figures/fig2_curves_{task}_{abl}.png"]
    out += [f"results/figures/scale_{abl}.png" for abl in ABLATIONS]
    return out
