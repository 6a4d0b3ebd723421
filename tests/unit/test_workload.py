"""The default run is the first look and config/full.yaml the full workload: the overlay
restates the default's models block (a config with its own `models:` replaces the default's), so
the two must agree on everything but SmolLM2's ablations and sample sizes, or the overlay would
retrain the toys to another recipe (the jobs Snakemake plans for them:
workflow/test_workload_snakemake.py)."""

import copy
from pathlib import Path

import yaml
from snakemake.utils import validate

ROOT = Path(__file__).resolve().parents[2]
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


def test_figure_sample_keeps_configured_models_then_lowest_seeds_one_per_cell():
    from circuitloc.plan.config.sweep_toys import META, expand, figure_sample

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
