"""The default run is the first look and config/full.yaml the full workload: the overlay
restates the default's models block (a config with its own `models:` replaces the default's), so
the two must agree on everything but SmolLM2's ablations and sample sizes, or the overlay would
retrain the toys to another recipe."""

import copy
from pathlib import Path

import yaml
from snakemake.utils import validate

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = str(ROOT / "config" / "schema.yaml")
SIZES = ("tasks", "curves", "ablation")  # what the overlay may change in a model


def _load(name):
    return yaml.safe_load((ROOT / "config" / name).read_text())


def _overlaid(base, overlay):
    """The overlay on the default, as the config rule merges it: top-level keys of the overlay win,
    nested blocks merge, and `models:` replaces the default's models whole."""
    out = copy.deepcopy(base)
    for k, v in overlay.items():
        if k != "models" and isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = {**out[k], **v}
        else:
            out[k] = copy.deepcopy(v)
    return out


def test_full_restates_the_default_models_with_smollm2s_mean_ablation():
    default, full = _load("config.yaml")["models"], _load("full.yaml")["models"]
    assert list(full) == list(default)
    for name, spec in default.items():
        if spec["source"] == "toy":
            assert full[name] == spec, f"config/full.yaml: {name} differs from config/config.yaml's"
        else:
            strip = lambda s: {k: v for k, v in s.items() if k not in SIZES}  # noqa: E731
            assert strip(full[name]) == strip(spec), f"config/full.yaml: {name} differs beyond {SIZES}"
    sm = "smollm2_135m"
    assert default[sm]["ablation"]["kinds"] == ["zero"] and default[sm]["ablation"]["units"] == ["query"]
    assert full[sm]["ablation"]["kinds"] == ["zero", "mean"]
    # the full workload is never smaller than the default's, and runs every task the default runs
    for task, sizes in default[sm]["tasks"].items():
        assert full[sm]["tasks"].get(task, {}) is not None, f"config/full.yaml leaves out {sm}'s {task}"
        for k, v in (sizes or {}).items():
            assert full[sm]["tasks"][task].get(k, _load("config.yaml")["tasks"][task][k]) >= v


def test_full_overlay_validates():
    cfg = _overlaid(_load("config.yaml"), _load("full.yaml"))
    assert {k: v for k, v in cfg.items() if k != "models"} == \
        {k: v for k, v in _load("config.yaml").items() if k != "models"}
    validate(cfg, SCHEMA)


def _priorities(configfile):
    """(rule, model or None, priority) of every job a dry run from scratch plans."""
    import re

    from workflow_helpers import smk

    out = smk("-n", "--nolock", "--configfile", configfile).stdout
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        m = re.match(r"(?:local)?rule (\w+):", block.strip())
        if m:
            model = re.search(r"^\s+wildcards: .*\bmodel=(\w+)", block, flags=re.M)
            prio = re.search(r"^\s+priority: (\d+)$", block, flags=re.M)
            jobs.append((m.group(1), model and model.group(1), int(prio.group(1)) if prio else 0))
    return jobs


def test_long_jobs_start_first():
    """Priorities as a 2-core run needs them: model jobs (toy training) above everything, SmolLM2's
    score and curve jobs above the toys', and every light job (tables, figures, ...) below them all."""
    jobs = _priorities("config/config.yaml")
    sources = {m: s["source"] for m, s in _load("config.yaml")["models"].items()}
    heavy = lambda r: r.startswith(("scores", "curves"))  # noqa: E731
    model = {p for r, _, p in jobs if r == "model"}
    pretrained = {p for r, m, p in jobs if heavy(r) and sources[m] != "toy"}
    toys = {p for r, m, p in jobs if heavy(r) and sources[m] == "toy"}
    light = {p for r, _, p in jobs if r in ("tables", "figures", "figure_scale", "stability", "robustness",
                                            "specificity_table", "cost", "report")}
    assert pretrained and toys and light
    assert min(model) > max(pretrained) > max(toys) > max(light)
    assert min(pretrained) > max(toys)
    dataset = {p for r, _, p in jobs if r.startswith("dataset")}
    assert min(dataset) > max(pretrained)  # short, and what the score jobs wait for


def test_figure_sample_keeps_configured_models_then_lowest_seeds_one_per_cell():
    from circuitloc.plan.sweep import META, expand, figure_sample

    sweep = _load("sweep_capacity.yaml")["sweep"]
    models = {"real_a": {"source": "hf"}, **expand(sweep), "real_b": {"source": "gguf"}}
    names = list(models)
    cells = {(s[META]["size"], s[META]["kv_heads"]) for s in models.values() if META in s}
    seeds = sorted({s[META]["seed"] for s in models.values() if META in s})
    k = 2 + len(cells)
    got = figure_sample(models, names, k)
    assert len(got) == k and got == [n for n in names if n in got]  # config order kept
    assert {"real_a", "real_b"} <= set(got)
    picked = [models[n][META] for n in got if META in models[n]]
    assert {(m["size"], m["kv_heads"]) for m in picked} == cells  # every cell once, before any twice
    assert {m["seed"] for m in picked} == {seeds[0]}
    # a larger cap: every lowest-seed toy before any toy of a higher seed
    got = figure_sample(models, names, 2 + len(cells) + 3)
    rest = [models[n][META]["seed"] for n in got if META in models[n] and models[n][META]["seed"] != seeds[0]]
    assert rest == [seeds[1]] * 3
    assert figure_sample(models, names, len(names)) == names


def test_sweep_figures_read_a_sample():
    """A dry run of the sweep config: each per-task figure job reads at most figures.max_models
    models' scores, while its tables read every model's."""
    import re

    from workflow_helpers import smk

    out = smk("-n", "--nolock", "--configfile", "config/sweep.yaml").stdout
    cap = _load("schema.yaml")["properties"]["figures"]["properties"]["max_models"]["default"]
    figs = tabs = 0
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
        m = re.match(r"(?:local)?rule (figures|tables):", block.strip())
        if m:
            inputs = re.search(r"^\s+input: (.*)$", block, flags=re.M).group(1).split(", ")
            scores = [f for f in inputs if f.startswith("results/scores/")]
            if m.group(1) == "figures":  # one job per task: at most the cap per ablation
                figs += 1
                per_ablation = {}
                for f in scores:
                    per_ablation[f.rsplit("/", 1)[1]] = per_ablation.get(f.rsplit("/", 1)[1], 0) + 1
                assert len(per_ablation) == 3 and all(0 < n <= cap for n in per_ablation.values()), per_ablation
            else:
                tabs = max(tabs, len(scores))
    assert figs and tabs > cap
