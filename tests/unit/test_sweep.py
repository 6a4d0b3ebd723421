"""The controlled sweep: its expansion, that siblings differ only in the attention projections,
and the across-seed statistics on planted numbers (the sweep in Snakemake's plan:
workflow/test_sweep_snakemake.py)."""

import re

import numpy as np
import polars as pl
import pytest
from safetensors.torch import load_file

from circuitloc.errors import ConfigError
from circuitloc.plan.config.sweep_toys import expand
from circuitloc.report.sweep.paired import paired
from circuitloc.report.sweep.summary import per_model, summarize

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
            rows.append({"model": name, "task_behaviour": True, "top_head_pct": top, "curve_prompts": "heldout",
                         "top_head_pct_heldout": top,
                         "heads_to_80": h80, "heads_to_80_bounded": False,
                         "heads_to_80_frac": h80 / 16,
                         "n_units": 16, "effective_units": 4.0, "top_share": 0.3})
            meta[name] = {"size": "small", "kv_heads": kv, "seed": s}
            passed[name] = name not in fail
    return per_model(pl.DataFrame(rows), meta, passed, "ioi")


def _by(df: pl.DataFrame, key: str) -> dict:
    """Rows as dicts by the value of one column."""
    return {r[key]: r for r in df.iter_rows(named=True)}


def test_summary_and_paired_test_find_a_planted_effect():
    pm = _planted(effect=10, fail=("m_kv1_s4",))
    summary = summarize(pm)
    one = _by(summary, "kv_heads")[1]
    assert (one["n_seeds"], one["excluded_seeds"]) == (4, 1)  # a failed toy is counted, not used
    assert one["top_head_pct_lo"] < one["top_head_pct"] < one["top_head_pct_hi"]
    exp = pm.filter((pl.col("kv_heads") == 1) & pl.col("accepted"))["top_head_pct"].mean()
    assert one["top_head_pct"] == pytest.approx(exp)
    pairs = _by(paired(pm), "kv_heads")
    assert pairs[1]["n_pairs"] == 4 and pairs[2]["n_pairs"] == 5
    assert pairs[1]["heads_to_80_frac_wins"] == 4  # 3 heads vs MHA's 6 on every pair
    assert pairs[1]["top_head_pct_diff"] == pytest.approx(30, abs=4) and pairs[1]["top_head_pct_p"] < 0.01
    # heads-to on 4 pairs cannot reach significance (smallest exact p 2/2^4): one measure significant
    # is 'partial', never 'yes'; ranked heads-to is not primary (greedy is): exploratory
    assert pairs[1]["verdict"].startswith("exploratory: partial: top head significant (says fewer KV more")
    assert "heads-to not (points the same way)" in pairs[1]["verdict"]


def test_paired_test_without_an_effect_says_so():
    pairs = paired(_planted(effect=0))
    assert all(v == "exploratory: no clear difference (holm-adjusted alpha 0.05)" for v in pairs["verdict"])
    assert (pairs["top_head_pct_p"] > 0.05).all()


def _rows(spec, n_units=16):
    """Table 1 rows from {(kv, seed): (top_head_pct, heads_to_80, baseline_ld)}, size 'small'."""
    rows, meta = [], {}
    for (kv, seed), (top, h80, ld) in spec.items():
        name = f"m_kv{kv}_s{seed}"
        bounded = str(h80).startswith(">")  # '> K': Table 1 stores K, bounded
        count = int(str(h80).lstrip("> "))
        # task_behaviour as Table 1 decides it for IOI: a logit difference above its floor of 0
        rows.append({"model": name, "baseline_ld": ld, "task_behaviour": ld > 0, "top_head_pct": top,
                     "curve_prompts": "heldout",
                     "top_head_pct_heldout": top, "heads_to_80": count,
                     "heads_to_80_bounded": bounded, "heads_to_80_frac": np.nan if bounded else count / n_units, "n_units": n_units, "effective_units": 4.0, "top_share": 0.3})
        meta[name] = {"size": "small", "kv_heads": kv, "seed": seed}
    return pl.DataFrame(rows), meta


def test_censored_heads_to_80_is_a_gqa_win_and_never_enters_a_t_interval(monkeypatch):
    """MHA never reaches 80% in 16 steps ('> 16') on seeds 0-2 while GQA needs 3: three GQA wins, not
    a mean over a made-up 17. Every array the t-interval code sees is free of 16, 17 and their
    fractions 1.0, 1.0625."""
    import circuitloc.report.sweep.paired
    import circuitloc.report.sweep.summary

    spec = {}
    for s in range(6):
        spec[(8, s)] = (30.0 + s, "> 16" if s < 3 else "6", 5.0 + 0.1 * s)
        spec[(2, s)] = (50.0 + s, "3", 5.5 + 0.1 * s)
    t1, meta = _rows(spec)
    seen = []

    real = circuitloc.report.sweep.summary._interval
    spy = lambda x, ci: (seen.append(np.asarray(x, float)), real(x, ci))[1]  # noqa: E731
    monkeypatch.setattr(circuitloc.report.sweep.summary, "_interval", spy)  # the per-seed summaries' intervals
    monkeypatch.setattr(circuitloc.report.sweep.paired, "_interval", spy)  # and the paired comparisons'
    pm = per_model(t1, meta, {}, "ioi")
    assert pm["heads_to_80_censored"].sum() == 3 and pm["heads_to_80"].is_nan().sum() == 3
    pairs, summary = _by(paired(pm), "kv_heads"), _by(summarize(pm), "kv_heads")
    for x in seen:
        assert not np.isin(x, [16.0, 17.0, 1.0, 17 / 16]).any(), x
    two = pairs[2]
    assert (two["heads_to_80_frac_wins"], two["heads_to_80_frac_losses"], two["heads_to_80_frac_ties"]) == (6, 0, 0)
    assert two["heads_to_80_censored_pairs"] == 3
    assert two["heads_to_80_frac_p"] == pytest.approx(2 / 64)  # exact: every pair favours GQA, 6 pairs
    # MHA's six: 6/16 three times and '> 16/16' three times; the median straddles a censored value, so
    # it is the bound (0.375 + 1.0) / 2, flagged as one
    assert two["mha_heads_to_80_frac_median"] == pytest.approx(0.6875) and two["mha_heads_to_80_frac_median_is_bound"]
    assert two["heads_to_80_frac_median"] == pytest.approx(3 / 16) and not two["heads_to_80_frac_median_is_bound"]
    mha = summary[8]
    assert mha["heads_to_80_censored"] == 3 and np.isnan(mha["heads_to_80"]) and np.isnan(mha["heads_to_80_lo"])
    assert mha["heads_to_80_median"] == 11 and mha["heads_to_80_median_is_bound"]
    assert summary[2]["heads_to_80"] == 3 and summary[2]["heads_to_80_censored"] == 0
    assert summary[2]["clean"] == pytest.approx(5.75) and summary[2]["clean_lo"] < 5.75


def test_paired_table_holm_adjusts_each_family_on_its_own_and_keeps_the_raw_p():
    """Without greedy curves the top head is the table's one primary measure (query units) and
    ranked heads-to exploratory: Holm within each column's family, never over both."""
    from circuitloc.report.sweep.summary import SweepStats
    from circuitloc.stats import holm

    pairs = paired(_planted(effect=10))
    raw = pairs.select("top_head_pct_p", "heads_to_80_frac_p").to_numpy()
    adj = pairs.select("top_head_pct_p_holm", "heads_to_80_frac_p_holm").to_numpy()
    assert (pairs["top_head_pct_family"] == "primary").all() and (pairs["heads_to_80_family"] == "exploratory").all()
    assert np.allclose(adj[:, 0], holm(raw[:, 0])) and np.allclose(adj[:, 1], holm(raw[:, 1]))
    assert not np.allclose(adj.ravel(), holm(raw.ravel()))  # one family of both would differ
    assert (adj >= raw - 1e-12).all()
    assert (pairs["n_tests_primary"] == 3).all() and (pairs["n_tests_exploratory"] == 3).all()
    bh = paired(_planted(effect=10), SweepStats(p_adjust="bh"))
    assert "top_head_pct_p_bh" in bh.columns and (bh["top_head_pct_p_bh"] <= pairs["top_head_pct_p_holm"] + 1e-12).all()


def test_greedy_heads_to_80_is_tested_adjusted_and_carries_the_verdict():
    """With greedy curves the paired table tests greedy and ranked heads-to-80% beside the top head
    score, Holm over all three columns, and the verdict reads greedy (the paper's). Planted: top head
    and ranked show nothing significant; greedy needs 2 heads under KV 1 against 5 under MHA on all 8
    seeds (exact p 2/2^8, times 3 tests under Holm)."""
    spec = {}
    for s in range(8):
        spec[(8, s)] = (30.0 + s, "6", 5.0)
        spec[(1, s)] = (30.0 + s + (0.5 if s % 2 else -0.3), "6", 5.0)
    t1, meta = _rows(spec)
    greedy = [5 if meta[m]["kv_heads"] == 8 else 2 for m in t1["model"]]
    t1 = t1.with_columns(heads_to_80_greedy=pl.Series(greedy), heads_to_80_greedy_bounded=pl.lit(False),
                         heads_to_80_greedy_frac=pl.Series(greedy) / 16)
    pm = per_model(t1, meta, {}, "ioi")
    assert pm["heads_to_80_greedy_censored"].sum() == 0
    pairs = paired(pm)
    one = pairs.row(0, named=True)
    assert one["heads_to_80_greedy_frac_wins"] == 8 and one["heads_to_80_frac_ties"] == 8
    assert one["top_head_pct_p_holm"] > 0.05
    from circuitloc.stats import holm

    raw = pairs.select("top_head_pct_p", "heads_to_80_frac_p", "heads_to_80_greedy_frac_p").to_numpy().ravel()
    adj = pairs.select("top_head_pct_p_holm", "heads_to_80_frac_p_holm", "heads_to_80_greedy_frac_p_holm").to_numpy().ravel()
    assert np.allclose(adj[[0, 2]], holm(raw[[0, 2]])) and adj[1] == pytest.approx(raw[1])  # primary: 2 tests
    assert one["heads_to_80_greedy_frac_p_holm"] == pytest.approx(2 * 2 / 2 ** 8)
    assert one["heads_to_80_greedy_frac_p_holm"] < 0.05 and one["verdict_heads_to"] == "heads_to_80_greedy"
    # greedy significant, the top head not (pointing the same way): 'partial', never 'yes'
    assert one["verdict"] == ("partial: heads-to significant (says fewer KV more concentrated), top head not "
                              "(points the same way) (holm-adjusted alpha 0.05)")
    assert one["verdict_family"] == "primary"
    summary = _by(summarize(pm), "kv_heads")
    assert summary[1]["heads_to_80_greedy_median"] == 2 and summary[8]["heads_to_80_greedy"] == 5


def test_no_task_behaviour_and_failed_checks_leave_a_seed_out_of_summaries_and_pairs():
    """Seed 1's MHA model has a negative IOI logit difference (no task behaviour); seed 2's KV-1 model
    failed its checks. The KV-1 row and its paired test use seeds {0, 3} only, the KV-4 row {0, 2, 3};
    the no-behaviour model is marked and counted, never used."""
    spec = {}
    for s in range(4):
        spec[(8, s)] = (30.0 + 10 * s, "6", -0.5 if s == 1 else 4.0 + s)
        spec[(4, s)] = (40.0 + 10 * s, "5", 4.0 + s)
        spec[(1, s)] = (60.0 + 10 * s, "3", 4.0 + s)
    t1, meta = _rows(spec)
    pm = per_model(t1, meta, {"m_kv1_s2": False}, "ioi")
    bad = _by(pm, "model")["m_kv8_s1"]
    assert not bad["task_behaviour"] and bad["accepted"] and not bad["used"]
    summary, pairs = _by(summarize(pm), "kv_heads"), _by(paired(pm), "kv_heads")
    assert summary[1]["seeds"] == "0 3" and pairs[1]["seeds"] == "0 3" and pairs[1]["n_pairs"] == 2
    assert summary[4]["seeds"] == "0 2 3" and pairs[4]["n_pairs"] == 3
    assert summary[8]["no_behaviour_seeds"] == 1 and summary[1]["excluded_seeds"] == 1
    # the summary is over exactly the paired seeds: KV 1 on seeds 0 and 3, and MHA beside it on the same
    assert summary[1]["top_head_pct"] == pytest.approx((60 + 90) / 2)
    assert pairs[1]["mha_top_head_pct"] == pytest.approx((30 + 60) / 2)
    assert pairs[1]["top_head_pct_diff"] == pytest.approx(30)
    assert pairs[1]["mha_clean"] == pytest.approx((4 + 7) / 2)


def test_write_sweep_makes_tables_and_figure_with_censored_and_excluded_toys(tmp_path):
    """The sweep job end to end on a planted Table 1 (no models run): a censored MHA curve, a toy that
    failed its checks and one without task behaviour; CSVs, markdown with the adjustment named, figure."""
    from helpers import model_card

    from circuitloc.report.figures.draw import fig_sweep
    from circuitloc.report.records import FigureFiles, SweepInputs, SweepStats, TableFiles, TableJob
    from circuitloc.report.tables.writers import write_sweep

    spec = {}
    for s in range(4):
        spec[(8, s)] = (30.0 + s, "> 16" if s == 0 else "6", -1.0 if s == 3 else 5.0)
        spec[(2, s)] = (50.0 + s, "3", 5.0)
    t1, meta = _rows(spec)
    t1.write_csv(tmp_path / "t1.csv")
    cards = {}
    for m in meta:
        cards[m] = tmp_path / f"{m}.json"
        model_card(name=m, source="toy", checks={"passed": m != "m_kv2_s2"}).write(cards[m])
    out = {k: tmp_path / f"{k}" for k in ("s.csv", "s.md", "p.csv", "p.md", "f.png", "f.pdf")}
    job, stats = TableJob("ioi", "zero-layer", 0.8), SweepStats(0.95, 0.05, "holm")
    summary, pm = write_sweep(job, SweepInputs(tmp_path / "t1.csv", cards, meta), stats,
                              (TableFiles(out["s.csv"], out["s.md"]), TableFiles(out["p.csv"], out["p.md"])))
    fig_sweep(job, stats.ci, summary, pm, FigureFiles(out["f.png"], out["f.pdf"]))
    pairs = pl.read_csv(out["p.csv"], schema_overrides={"seeds": pl.String})
    assert pairs["seeds"][0] == "0 1" and pairs["heads_to_80_censored_pairs"][0] == 1
    assert "top_head_pct_p_holm" in pairs.columns and "holm" in out["p.md"].read_text()
    summary = _by(pl.read_csv(out["s.csv"]), "kv_heads")
    assert summary[8]["no_behaviour_seeds"] == 1 and summary[2]["excluded_seeds"] == 1
    assert out["f.png"].stat().st_size > 10_000


def _n_params(toy: dict) -> int:
    """An independent count: the Qwen2 model transformers builds for these shapes (tiny vocab)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=50, hidden_size=toy["d_model"], intermediate_size=toy["d_mlp"],
                      num_hidden_layers=toy["n_layers"], num_attention_heads=toy["n_heads"],
                      num_key_value_heads=toy["n_kv_heads"], tie_word_embeddings=True)
    return sum(p.numel() for p in Qwen2ForCausalLM(cfg).parameters())


def test_match_params_gives_back_the_kv_parameters_in_the_mlp():
    """A size with d_head 32 and its own KV list; with match_params each GQA/MQA toy has the MHA toy's
    parameter count to within the rounding of the MLP width (<= 1.5 d_model per layer), without it
    fewer KV heads mean visibly fewer parameters."""
    sweep = {"seeds": [0], "kv_heads": [8, 4, 2, 1], "recipe": {"n_heads": 8, "d_model": 64, "d_mlp": 256},
             "sizes": {"dh32": {"n_layers": 2, "d_model": 128, "n_heads": 4, "d_mlp": 256, "kv_heads": [4, 2, 1]},
                       "dh32pm": {"n_layers": 2, "d_model": 128, "n_heads": 4, "d_mlp": 256, "kv_heads": [4, 2, 1],
                                  "match_params": True}}}
    models = expand(sweep)
    assert len(models) == 5  # dh32pm's MHA toy is dh32's (nothing removed, nothing given back): trained once
    assert models["sweep_dh32_kv4_s0"]["sweep"] == {"size": "dh32", "kv_heads": 4, "seed": 0, "also": ["dh32pm"]}
    toys = {(size, s["sweep"]["kv_heads"]): s["toy"] for s in models.values()
            for size in (s["sweep"]["size"], *s["sweep"].get("also", []))}
    assert all("kv_heads" not in t and "match_params" not in t for t in toys.values())
    assert [toys[("dh32pm", k)]["d_mlp"] for k in (4, 2, 1)] == [256, 256 + 43, 256 + 64]  # 2*129*32*(4-K)/384
    n = {key: _n_params(t) for key, t in toys.items()}
    for kv in (2, 1):
        assert abs(n[("dh32pm", kv)] - n[("dh32pm", 4)]) <= 1.5 * 128 * 2  # half a width unit per layer
        assert n[("dh32", 4)] - n[("dh32", kv)] > 10 * 128 * 2
    assert n[("dh32pm", 4)] == n[("dh32", 4)]


def test_a_toy_that_stands_for_two_cells_is_paired_in_each():
    """dh32pm's MHA toys are dh32's (expand trains them once): each of their Table 1 rows gives a row
    in both cells, so dh32pm's KV-1 toys are paired with them seed by seed, as dh32's are, and the
    pairs hold the same MHA numbers."""
    sweep = {"seeds": [0, 1, 2, 3], "kv_heads": [2, 1], "recipe": {"n_heads": 2, "d_model": 64, "d_mlp": 256},
             "sizes": {"dh32": {"n_layers": 2}, "dh32pm": {"n_layers": 2, "match_params": True}}}
    models = expand(sweep)
    assert len(models) == 3 * 4 and not any(n.startswith("sweep_dh32pm_kv2") for n in models)
    rows = [{"model": n, "task_behaviour": True, "top_head_pct": 30.0 + 5 * (m["sweep"]["kv_heads"] == 1) + i,
             "curve_prompts": "heldout", "top_head_pct_heldout": 30.0 + 5 * (m["sweep"]["kv_heads"] == 1) + i,
             "heads_to_80": 2, "heads_to_80_bounded": False, "heads_to_80_frac": 0.5, "n_units": 4,
             "effective_units": 2.0, "top_share": 0.5} for i, (n, m) in enumerate(models.items())]
    pm = per_model(pl.DataFrame(rows), {n: m["sweep"] for n, m in models.items()}, {}, "ioi")
    assert len(pm) == 16 and pm.filter(pl.col("size") == "dh32pm")["kv_heads"].sort().to_list() == [1] * 4 + [2] * 4
    mha = pm.filter(pl.col("kv_heads") == 2)
    assert mha.filter(pl.col("size") == "dh32")["top_head_pct"].to_list() == \
        mha.filter(pl.col("size") == "dh32pm")["top_head_pct"].to_list()
    pairs = paired(pm)
    assert pairs.select("size", "kv_heads", "vs_kv_heads", "comparison", "n_pairs").rows() == \
        [("dh32", 1, 2, "tested", 4), ("dh32pm", 1, 2, "tested", 4)]


def test_a_size_without_an_mha_model_is_refused():
    with pytest.raises(ConfigError, match="sweep.sizes.x.kv_heads"):
        expand({**SWEEP, "sizes": {"x": {"n_layers": 2, "kv_heads": [4, 2]}}})


def test_sweep_compares_top_heads_on_held_out_prompts():
    """Table 1 rows whose curves ran on held-out prompts: the sweep reads the top unit's held-out
    score (and its interval), not the in-sample one that selected it."""
    spec = {(kv, s): (50.0 + s, "3", 5.0) for kv in (8, 1) for s in range(3)}
    t1, meta = _rows(spec)
    t1 = t1.with_columns(curve_prompts=pl.lit("heldout"), top_head_pct_heldout=pl.col("top_head_pct") - 20,
                         top_head_pct_heldout_lo=pl.col("top_head_pct") - 25,
                         top_head_pct_heldout_hi=pl.col("top_head_pct") - 15)
    pm = per_model(t1, meta, {}, "ioi")
    assert (pm["top_head_prompts"] == "heldout").all()
    assert pm["top_head_pct"].to_list() == (t1["top_head_pct"] - 20).to_list()
    assert pm["top_head_pct_lo"].to_list() == (t1["top_head_pct"] - 25).to_list()


def test_a_kv_count_without_a_usable_pair_gets_a_row_not_a_crash():
    """Every KV-1 toy failed its checks: its paired row has 0 pairs, NaN p-values and an 'n/a'
    verdict, and the table still adjusts the other rows' tests (this crashed on an empty score array)."""
    pm = _planted(effect=10, fail=tuple(f"m_kv1_s{s}" for s in range(5)))
    pairs = _by(paired(pm), "kv_heads")
    one = pairs[1]
    assert one["n_pairs"] == 0 and one["verdict"].startswith("n/a")
    assert np.isnan(one["heads_to_80_frac_p"]) and np.isnan(one["top_head_pct_p"])
    assert pairs[2]["n_pairs"] == 5 and np.isfinite(pairs[2]["top_head_pct_p_holm"])


def _paired_row(size, diff, p_top, p_greedy, p_ranked, wins, losses, n=10):
    return {"size": size, "kv_heads": 1, "vs_kv_heads": 8, "n_pairs": n, "seeds": " ".join(map(str, range(n))),
            "clean_metric": "ld", "mha_clean": 5.0, "clean": 4.0, "mha_top_head_pct": 20.0,
            "top_head_pct": 20.0 + diff, "top_head_pct_diff": diff, "top_head_pct_diff_lo": diff - 1,
            "top_head_pct_diff_hi": diff + 1, "top_head_pct_p": p_top, "top_head_pct_p_holm": p_top,
            "mha_heads_to_80_greedy_frac_median": 0.25, "mha_heads_to_80_greedy_frac_median_is_bound": False,
            "heads_to_80_greedy_frac_median": 0.5, "heads_to_80_greedy_frac_median_is_bound": True,
            "heads_to_80_greedy_frac_wins": wins, "heads_to_80_greedy_frac_losses": losses,
            "heads_to_80_greedy_frac_ties": n - wins - losses, "heads_to_80_greedy_frac_p": p_greedy,
            "heads_to_80_greedy_frac_p_holm": p_greedy, "heads_to_80_frac_p": p_ranked,
            "heads_to_80_frac_p_holm": p_ranked, "verdict": "as in its table",
            "direction_top_head": int(np.sign(diff)), "direction_heads_to": int(np.sign(wins - losses)),
            "verdict_heads_to": "heads_to_80_greedy"}


def test_overview_adjusts_each_family_over_every_table_and_reads_the_verdict_again():
    """Two tables, ioi under query units and induction under kv groups. The primary family (query
    units: top head and greedy heads-to) holds ioi's p 0.004 and 0.02: Holm x2, x1 -> 0.008, 0.02.
    The four others are exploratory: sorted 0.01, 0.3, 0.5, 0.6 -> x4, x3, x2, x1 with the running
    maximum: 0.04, 0.9, 1, 1."""
    from circuitloc.report.sweep.verdicts import overview

    a = pl.DataFrame([_paired_row("small", 5.0, 0.004, 0.02, 0.5, wins=8, losses=1)])
    b = pl.DataFrame([_paired_row("dh32", -3.0, 0.01, 0.3, 0.6, wins=1, losses=7)])
    out = overview({("ioi", "zero-query"): a, ("induction", "zero-kv"): b})
    assert out["unit"].to_list() == ["query", "kv"]
    assert (out["n_tests_primary_all"][0], out["n_tests_exploratory_all"][0]) == (2, 4)
    assert out["top_head_pct_p_all"].to_list() == pytest.approx([0.008, 0.04])
    assert out["heads_to_80_greedy_frac_p_all"].to_list() == pytest.approx([0.02, 0.9])
    assert out["heads_to_80_frac_p_all"].to_list() == pytest.approx([1.0, 1.0])
    assert out["top_head_pct_family"].to_list() == ["primary", "exploratory"]
    assert out["heads_to_80_family"].to_list() == ["exploratory", "exploratory"]
    # small: both verdict measures significant and pointing to fewer KV heads -> yes; dh32: only the top
    # head significant (the other way), and its tests are exploratory
    assert out["verdict_all"].to_list()[0] == "fewer KV heads more concentrated: yes"
    assert out["verdict_all"].to_list()[1] == ("exploratory: partial: top head significant (says fewer KV less "
                                               "concentrated), heads-to not (points the same way) (holm-adjusted "
                                               "alpha 0.05)")
    assert out["verdict_family"].to_list() == ["primary", "exploratory"]
    assert out["heads_to_80_greedy_median"].to_list() == ["> 0.5", "> 0.5"]
    assert out["mha_heads_to_80_greedy_median"].to_list() == ["0.25", "0.25"]


def _table_and_overview(pm, settings=None):
    from circuitloc.report.sweep.verdicts import overview

    table = paired(pm, settings)
    return table, overview({("ioi", "zero-query"): table}, settings)


def _ranked_primary():
    """Settings whose primary family reads ranked heads-to (a sweep without greedy curves)."""
    from circuitloc.report.sweep.summary import Primary, SweepStats

    return SweepStats(primary=Primary(measures=("top_head", "heads_to_ranked")))


def test_table_and_overview_verdicts_agree_when_wins_equal_losses():
    """Greedy wins 2, losses 2, yet the Gehan statistic points to fewer KV heads
    (the KV-1 toy's wins are by more), and the top head differs hugely. The table and the overview
    (one table: the same p-values) must say the same; the overview once derived the heads-to
    direction from wins minus losses (0) and called it 'no clear difference'."""
    spec = {}
    mha_g, kv1_g = [10, 10, 2, 3, 6, 6, 6, 6], [2, 2, 3, 4, 6, 6, 6, 6]
    for s in range(8):
        spec[(8, s)] = (30.0 + s, "6", 5.0)
        spec[(1, s)] = (90.0 + s + 0.01 * s * s, "6", 5.0)
    t1, meta = _rows(spec)
    g = [mha_g[meta[m]["seed"]] if meta[m]["kv_heads"] == 8 else kv1_g[meta[m]["seed"]] for m in t1["model"]]
    t1 = t1.with_columns(heads_to_80_greedy=pl.Series(g), heads_to_80_greedy_bounded=pl.lit(False),
                         heads_to_80_greedy_frac=pl.Series(g) / 16)
    table, ov = _table_and_overview(per_model(t1, meta, {}, "ioi"))
    r, o = table.row(0, named=True), ov.row(0, named=True)
    # greedy is not significant (2 wins, 2 losses), so one measure: partial, the heads-to direction kept
    assert o["verdict_all"] == r["verdict"] == ("partial: top head significant (says fewer KV more concentrated), "
                                                "heads-to not (points the same way) (holm-adjusted alpha 0.05)")
    assert (r["heads_to_80_greedy_frac_wins"], r["heads_to_80_greedy_frac_losses"]) == (2, 2)
    assert r["direction_heads_to"] == 1 and r["direction_top_head"] == 1
    assert r["top_head_pct_p_holm"] < 1e-6 and r["heads_to_80_greedy_frac_p_holm"] > 0.05
    assert o["verdict_all"] == r["verdict"] and o["verdict_table"] == r["verdict"]


def test_a_ranked_only_sweep_gets_a_verdict_in_the_overview():
    """Without greedy curves the verdict reads ranked heads-to; the overview once parsed
    'None/None/None' as 0/0 and could never give one."""
    spec = {}
    for s in range(8):
        spec[(8, s)] = (30.0 + s, "6", 5.0)
        spec[(1, s)] = (60.0 + s + 0.01 * s * s, "3", 5.0)
    t1, meta = _rows(spec)
    table, ov = _table_and_overview(per_model(t1, meta, {}, "ioi"))
    # the default primary family names greedy heads-to: a ranked-only verdict is exploratory
    assert table["verdict"][0] == ov["verdict_all"][0] == "exploratory: fewer KV heads more concentrated: yes"
    assert table["verdict_heads_to"][0] == "heads_to_80"
    table, ov = _table_and_overview(per_model(t1, meta, {}, "ioi"), _ranked_primary())
    assert table["verdict"][0] == ov["verdict_all"][0] == "fewer KV heads more concentrated: yes"


def test_significant_but_discordant_measures_are_mixed():
    """The top head significantly larger under fewer KV heads while heads-to points
    the other way is 'mixed', not 'no clear difference'."""
    spec = {}
    for s in range(8):
        spec[(8, s)] = (30.0 + s, "2", 5.0)
        spec[(1, s)] = (75.0 + s + 0.01 * s * s, "4", 5.0)
    t1, meta = _rows(spec)
    table, ov = _table_and_overview(per_model(t1, meta, {}, "ioi"), _ranked_primary())
    r = table.row(0, named=True)
    assert r["heads_to_80_frac_p_holm"] < 0.05 and r["top_head_pct_p_holm"] < 0.05
    assert r["verdict"].startswith("mixed: both significant") and ov["verdict_all"][0].startswith("mixed")
    assert r["direction_top_head"] == 1 and r["direction_heads_to"] == -1


def test_the_mha_row_describes_the_paired_toys_only():
    """Seed 3's KV-1 toy failed, so MHA seed 3 is in no pair and not in the MHA
    summary row either."""
    spec = {(kv, s): ((30.0 if kv == 8 else 50.0) + 10 * s, "3", 5.0) for kv in (8, 1) for s in range(4)}
    t1, meta = _rows(spec)
    summary = _by(summarize(per_model(t1, meta, {"m_kv1_s3": False}, "ioi")), "kv_heads")
    assert summary[8]["seeds"] == "0 1 2" and summary[8]["n_seeds"] == 3
    assert summary[8]["top_head_pct"] == pytest.approx((30 + 40 + 50) / 3)


def test_in_sample_top_head_scores_are_shown_but_never_tested():
    """Curves on all prompts leave only the in-sample top-unit score; the paired
    table says so and does not test it (it once compared it silently)."""
    spec = {(kv, s): ((30.0 if kv == 8 else 60.0) + s + 0.01 * s * s * kv, "3", 5.0) for kv in (8, 1) for s in range(6)}
    t1, meta = _rows(spec)
    t1 = t1.with_columns(curve_prompts=pl.lit("all"))
    r = paired(per_model(t1, meta, {}, "ioi")).row(0, named=True)
    assert r["top_head_pct_diff"] == pytest.approx(30, abs=1) and np.isnan(r["top_head_pct_p"])
    assert r["top_head_prompts"] == "scoring"
    assert not r["verdict"].endswith("yes")


def test_curve_area_is_compared_with_a_paired_t_test():
    from scipy import stats

    spec = {(kv, s): (40.0 + s, "3", 5.0) for kv in (8, 1) for s in range(6)}
    t1, meta = _rows(spec)
    mha = 0.5 + 0.02 * np.arange(6)
    one = mha + 0.1 + 0.03 * np.array([0, 2, 1, 3, 1, 2])
    area = [(mha if meta[m]["kv_heads"] == 8 else one)[meta[m]["seed"]] for m in t1["model"]]
    r = paired(per_model(t1.with_columns(curve_area=pl.Series(area)), meta, {}, "ioi")).row(0, named=True)
    assert r["curve_area_diff"] == pytest.approx(np.mean(one - mha))
    assert r["curve_area_p"] == pytest.approx(stats.ttest_rel(one, mha).pvalue)
    assert r["direction_curve_area"] == 1 and np.isfinite(r["curve_area_p_holm"])


def test_a_toy_whose_damage_is_refused_enters_no_pair():
    """A toy whose clean metric does not stand above its floor on the reported
    prompts (damage_ok false in Table 1) enters no verdict."""
    spec = {(kv, s): ((30.0 if kv == 8 else 50.0) + 10 * s, "3", 5.0) for kv in (8, 1) for s in range(4)}
    t1, meta = _rows(spec)
    t1 = t1.with_columns(damage_ok=pl.Series([m != "m_kv1_s2" for m in t1["model"]]))
    pm = per_model(t1, meta, {}, "ioi")
    assert not _by(pm, "model")["m_kv1_s2"]["used"]
    assert paired(pm)["seeds"][0] == "0 1 3"


def test_the_overview_adjusts_both_facts_metrics_together(tmp_path):
    """Facts by margin and facts by accuracy (another run, config
    sweep.adjust_with) are one family of tests: the overview adjusts the accuracy tables' p-values
    with this run's. Holm over the 4 primary tests (top head, greedy; both runs): sorted 0.004,
    0.01, 0.02, 0.3 -> 0.016, 0.03 for the two top heads."""
    from circuitloc.report.tables.writers import write_sweep_overview

    a = pl.DataFrame([_paired_row("small", 5.0, 0.004, 0.02, 0.5, wins=8, losses=1)])
    b = pl.DataFrame([_paired_row("small", 3.0, 0.01, 0.3, 0.6, wins=6, losses=2)])
    a.write_csv(tmp_path / "margin.csv")
    b.write_csv(tmp_path / "accuracy.csv")
    opts = {"alpha": 0.05, "p_adjust": "holm"}
    write_sweep_overview({"facts/zero-query": tmp_path / "margin.csv"}, tmp_path / "o.csv", tmp_path / "o.md", opts,
                         extra={"facts (accuracy)/zero-query": tmp_path / "accuracy.csv"})
    out = pl.read_csv(tmp_path / "o.csv")
    assert out["task"].to_list() == ["facts", "facts (accuracy)"] and out["n_tests_primary_all"][0] == 4
    assert out["top_head_pct_p_all"].to_list() == pytest.approx([0.016, 0.03])


def test_the_primary_family_is_zero_ablation_and_the_overview_says_which_kinds_agree():
    """One comparison under zero, mean and resample ablation: only zero's tests are primary (the
    default `sweep.primary.kinds`), mean's and resample's are exploratory and adjusted with the other
    exploratory tests; `verdict_by_kind` lists each kind's verdict and `holds_under` the kinds that say
    what zero says: 'zero, mean only' when resample finds no clear difference, 'every kind' when all
    agree."""
    from circuitloc.report.sweep.summary import Primary, SweepStats
    from circuitloc.report.sweep.verdicts import overview

    strong = _paired_row("small", 5.0, 0.001, 0.002, 0.5, wins=9, losses=0)
    weak = _paired_row("small", 1.0, 0.6, 0.7, 0.8, wins=4, losses=4)
    tables = {("ioi", "zero-query"): pl.DataFrame([strong]), ("ioi", "mean-query"): pl.DataFrame([strong]),
              ("ioi", "resample-query"): pl.DataFrame([weak])}
    out = overview(tables)
    assert out["kind"].to_list() == ["zero", "mean", "resample"]
    assert out["top_head_pct_family"].to_list() == ["primary", "exploratory", "exploratory"]
    assert out["n_tests_primary_all"][0] == 2  # zero's top head and greedy heads-to
    assert out["verdict_all"][0] == "fewer KV heads more concentrated: yes"
    assert out["verdict_all"][1] == "exploratory: fewer KV heads more concentrated: yes"
    assert out["verdict_by_kind"][0] == "zero: yes; mean: yes; resample: none"
    assert out["holds_under"].to_list() == ["zero, mean only"] * 3
    agree = overview({k: pl.DataFrame([strong]) for k in tables})
    assert agree["holds_under"].to_list() == ["every kind"] * 3
    # declared primary under every kind, mean's tests join zero's family
    every = overview(tables, SweepStats(primary=Primary(kinds=("zero", "mean", "resample"))))
    assert every["top_head_pct_family"].to_list() == ["primary"] * 3 and every["n_tests_primary_all"][0] == 6
