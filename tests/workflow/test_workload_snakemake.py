"""The jobs Snakemake plans for the default and the sweep: long jobs start first, and the sweep's
figures read a sample (the configs themselves: unit/test_workload.py)."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _load(name):
    return yaml.safe_load((ROOT / "config" / name).read_text())


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
