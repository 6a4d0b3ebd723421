"""The controlled sweep: its expansion, that siblings differ only in the attention projections,
and the across-seed statistics on planted numbers."""

import re

import numpy as np
import pandas as pd
import pytest
import yaml
from safetensors.torch import load_file
from workflow_helpers import ROOT, smk

from circuitloc.errors import ConfigError
from circuitloc.sweep import expand, paired, per_model, summarize

SWEEP = {"seeds": [0, 1, 2], "kv_heads": [8, 4, 2, 1], "sizes": {"a": {"n_layers": 2}, "b": {"n_layers": 3, "d_model": 96}},
         "recipe": {"n_heads": 8, "d_model": 64, "steps": 10, "lr": 0.005}}


def test_expansion_is_seeds_x_kv_x_sizes_with_one_recipe():
    models = expand(SWEEP)
    assert len(models) == 3 * 4 * 2
    varied = {"n_kv_heads", "seed", "n_layers", "d_model"}
    for spec in models.values():
        toy = spec["toy"]
        assert spec["source"] == "toy" and {k: v for k, v in toy.items() if k not in varied} == \
            {k: v for k, v in SWEEP["recipe"].items() if k not in varied}
        meta = spec["sweep"]
        assert (toy["n_kv_heads"], toy["seed"]) == (meta["kv_heads"], meta["seed"])
        assert spec["family"] == f"sweep_{meta['size']}_s{meta['seed']}"
    assert {(s["sweep"]["size"], s["sweep"]["kv_heads"], s["sweep"]["seed"]) for s in models.values()} == \
        {(z, k, s) for z in "ab" for k in (8, 4, 2, 1) for s in (0, 1, 2)}


def test_expansion_errors_name_the_field():
    with pytest.raises(ConfigError, match="sweep.kv_heads: 3"):
        expand({**SWEEP, "kv_heads": [8, 3]})
    with pytest.raises(ConfigError, match="sweep.recipe.seed"):
        expand({**SWEEP, "recipe": {**SWEEP["recipe"], "seed": 1}})


def test_sweep_config_dag_has_one_training_job_per_model():
    """config/sweep.yaml as shipped: N seeds x K KV counts x S sizes training jobs, same recipe."""
    cfg = yaml.safe_load((ROOT / "config" / "sweep.yaml").read_text())
    sw = cfg["sweep"]
    n = len(sw["seeds"]) * len(sw["kv_heads"]) * len(sw["sizes"])
    out = smk("-n", "--nolock", "--configfile", "config/sweep.yaml").stdout
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    assert int(stats["model"]) == n == 40
    assert int(stats["sweep_tables"]) == 3  # one per task (zero ablation of query heads)
    assert "dataset_shared_facts" not in stats  # tasks.facts.shared: false
    # the cluster sweep: valid against the schema, 10 seeds x 4 KV counts x 3 sizes
    from snakemake.utils import validate

    large = yaml.safe_load((ROOT / "config" / "sweep_large.yaml").read_text())
    validate(large, str(ROOT / "config" / "schema.yaml"))
    assert len(expand(large["sweep"])) == 10 * 4 * 3


def test_siblings_differ_only_in_attention_projection_shapes(tmp_path):
    """Same seed and recipe, 8 vs 1 KV heads: the same parameters and, except the key and value
    projections, the same shapes and the same initial values."""
    from circuitloc.models.toy import train_toy

    tiny = {"seeds": [0], "kv_heads": [8, 1], "sizes": {"s": {"n_layers": 2}},
            "recipe": {"n_heads": 8, "d_model": 32, "d_mlp": 64, "steps": 0, "pool_size": 200, "n_facts": 10,
                       "eval": {"n_ioi": 4, "n_induction": 4},
                       "acceptance": {"enforce": False}}}
    weights = {}
    for name, spec in expand(tiny).items():
        train_toy(spec["toy"], tmp_path / name, log=lambda *_: None)
        weights[spec["toy"]["n_kv_heads"]] = load_file(tmp_path / name / "model.safetensors")
    mha, mqa = weights[8], weights[1]
    assert mha.keys() == mqa.keys()
    differ = {k for k in mha if mha[k].shape != mqa[k].shape}
    assert differ and all(re.search(r"\.(k_proj|v_proj)\.(weight|bias)$", k) for k in differ), differ
    assert {k for k in mha if k.endswith(("k_proj.weight", "v_proj.weight"))} <= differ
    for k in mha.keys() - differ:
        assert np.array_equal(mha[k].numpy(), mqa[k].numpy()), k


def _planted(effect, seeds=5, fail=()):
    """Table 1 rows for one size: top head score grows by `effect` per halving of KV heads."""
    rows, meta, passed = [], {}, {}
    rng = np.random.default_rng(0)
    for kv in (8, 4, 2, 1):
        for s in range(seeds):
            name = f"m_kv{kv}_s{s}"
            top = 30 + effect * np.log2(8 / kv) + rng.normal(0, 2) + s  # seed effect, shared across kv
            h80 = max(1, 6 - int(effect > 0) * int(np.log2(8 / kv)))
            rows.append({"model": name, "top_head_pct": top, "heads_to_80": str(h80), "heads_to_80_frac": h80 / 16,
                         "n_units": 16, "effective_units": 4.0, "top_share": 0.3})
            meta[name] = {"size": "small", "kv_heads": kv, "seed": s}
            passed[name] = name not in fail
    return per_model(pd.DataFrame(rows), meta, passed)


def test_summary_and_paired_test_find_a_planted_effect():
    pm = _planted(effect=10, fail=("m_kv1_s4",))
    summary = summarize(pm)
    one = summary.set_index("kv_heads").loc[1]
    assert (one["n_seeds"], one["excluded_seeds"]) == (4, 1)  # a failed toy is counted, not used
    assert one["top_head_pct_lo"] < one["top_head_pct"] < one["top_head_pct_hi"]
    exp = pm[(pm.kv_heads == 1) & pm.accepted]["top_head_pct"].mean()
    assert one["top_head_pct"] == pytest.approx(exp)
    pairs = paired(pm).set_index("kv_heads")
    assert pairs.loc[1, "n_pairs"] == 4 and pairs.loc[2, "n_pairs"] == 5
    assert pairs.loc[1, "top_head_pct_diff"] == pytest.approx(30, abs=4) and pairs.loc[1, "top_head_pct_p"] < 0.01
    assert pairs.loc[1, "verdict"].endswith("yes")


def test_paired_test_without_an_effect_says_so():
    pairs = paired(_planted(effect=0)).set_index("kv_heads")
    assert all(v.startswith("no clear difference") for v in pairs["verdict"])
    assert (pairs["top_head_pct_p"] > 0.05).all()
