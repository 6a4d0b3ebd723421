"""Each sweep verdict's stability under resampled seeds (report/sweep/stability.py): a verdict the seeds
clearly support stays, one at the significance threshold flips, and the column reaches the paired
table and the overview."""

import numpy as np
import polars as pl
import pytest

from circuitloc.report.sweep import stability
from circuitloc.report.sweep.paired import paired
from circuitloc.report.sweep.summary import per_model


def _pm(diffs, seeds=12):
    """One size, KV 8 against KV 1 on `seeds` seeds: the KV-1 toy's top head score is the MHA toy's
    plus diffs[s]; heads-to-80% (greedy, the verdict's second measure) ties on every pair."""
    rows, meta = [], {}
    for s in range(seeds):
        for kv, top in ((8, 30.0 + s), (1, 30.0 + s + diffs[s])):
            name = f"m_kv{kv}_s{s}"
            rows.append({"model": name, "task_behaviour": True, "top_head_pct": top, "curve_prompts": "heldout",
                         "top_head_pct_heldout": top, "heads_to_80": 6, "heads_to_80_bounded": False,
                         "heads_to_80_frac": 6 / 16, "heads_to_80_greedy": 5, "heads_to_80_greedy_bounded": False,
                         "heads_to_80_greedy_frac": 5 / 16, "n_units": 16, "effective_units": 4.0, "top_share": 0.3})
            meta[name] = {"size": "small", "kv_heads": kv, "seed": s}
    return per_model(pl.DataFrame(rows), meta, {}, "ioi")


def _stability(pm, n=80):
    pairs = paired(pm)
    return pairs["verdict"][0], stability.verdict_stability(pm, pairs, lambda p, lay: paired(p), n)[0]


@pytest.mark.slow  # a simulation: the verdict's stability over resampled seeds (pyproject's slow marker)
def test_a_clearly_separated_verdict_is_stable():
    """A KV-1 top head 20 points above MHA's on every seed (noise 2): 'partial' (the top head
    significant, heads-to tied) on every resample."""
    rng = np.random.default_rng(1)
    verdict, stable = _stability(_pm(20 + rng.normal(0, 2, 12)))
    assert verdict.startswith("partial: top head significant")
    assert stable == 1.0


@pytest.mark.slow  # a simulation: the verdict's stability over resampled seeds (pyproject's slow marker)
def test_a_verdict_at_the_threshold_is_not_stable():
    """Differences whose paired t-test sits just under alpha (raw p about 0.03, Holm over the two
    primary tests about 0.05): another draw of the 12 seeds often says something else."""
    d = np.array([10.0, -5, 8, 5, -2, 9, 2, 7, -4, 11, 3, 6])  # raw p 0.022
    pm = _pm(d)
    import scipy.stats

    assert 0.01 < scipy.stats.ttest_1samp(d, 0).pvalue < 0.05  # the planted difference is borderline
    _, stable = _stability(pm)
    assert 0.2 < stable < 0.8


def test_resampling_keeps_pairs_together_and_relabels_repeats():
    pm = _pm(np.zeros(4), seeds=4)
    out = stability.resample(pm, [2, 2, 0])
    assert sorted(out["seed"].to_list()) == [0, 0, 1, 1, 2, 2]
    for j, s in enumerate([2, 2, 0]):  # the j-th draw holds both toys of seed s
        assert sorted(out.filter(pl.col("seed") == j)["model"].to_list()) == [f"m_kv1_s{s}", f"m_kv8_s{s}"]


def test_stability_reaches_the_paired_table_and_the_overview(tmp_path, monkeypatch):
    from helpers import model_card

    from circuitloc.report.records import SweepInputs, SweepStats, TableFiles, TableJob
    from circuitloc.report.tables.writers import write_sweep, write_sweep_overview

    monkeypatch.setattr(stability, "PRIMARY_RESAMPLES", 40)
    pm = _pm(20 + np.random.default_rng(1).normal(0, 2, 12))
    t1 = pm.select("model", "task_behaviour", "top_head_pct", "heads_to_80", "heads_to_80_greedy", "n_units",
                   "effective_units", "top_share").with_columns(
        top_head_pct_heldout=pl.col("top_head_pct"), curve_prompts=pl.lit("heldout"), heads_to_80_bounded=pl.lit(False), heads_to_80_greedy_bounded=pl.lit(False))
    t1.write_csv(tmp_path / "t1.csv")
    meta = {r["model"]: {"size": r["size"], "kv_heads": r["kv_heads"], "seed": r["seed"]} for r in pm.iter_rows(named=True)}
    cards = {}
    for m in meta:
        cards[m] = tmp_path / f"{m}.json"
        model_card(name=m, source="toy", checks={"passed": True}).write(cards[m])
    files = TableFiles(tmp_path / "s.csv", tmp_path / "s.md"), TableFiles(tmp_path / "p.csv", tmp_path / "p.md")
    write_sweep(TableJob("ioi", "zero-query", 0.8), SweepInputs(tmp_path / "t1.csv", cards, meta),
                SweepStats(0.95, 0.05, "holm"), files)
    pairs = pl.read_csv(tmp_path / "p.csv", schema_overrides={"seeds": pl.String})
    assert pairs["verdict_stability"].to_list() == [1.0]
    assert pairs.columns.index("verdict_stability") == pairs.columns.index("verdict") + 1
    assert "40 resamples of the seeds" in (tmp_path / "p.md").read_text()
    write_sweep_overview({"ioi/zero-query": tmp_path / "p.csv"}, tmp_path / "o.csv", tmp_path / "o.md",
                         {"alpha": 0.05, "p_adjust": "holm"})
    out = pl.read_csv(tmp_path / "o.csv")
    assert out["verdict_table_stability"].to_list() == pytest.approx([1.0])
    assert out.columns.index("verdict_table_stability") == out.columns.index("verdict_table") + 1


def test_a_parameter_matched_size_is_tested_against_its_twin_seed_by_seed():
    """plain and matched share their MHA toys (meta `also`); the matched KV-1 toy's top head is the
    plain one's + 5 (+ noise): the paired t-test of the two KV-1 toys, seed by seed, equals scipy's
    on the planted numbers; the plain row has no twin."""
    import scipy.stats

    from circuitloc.report.sweep.capacity import vs_twin

    rng = np.random.default_rng(3)
    plain = 40 + rng.normal(0, 8, 8)
    matched = plain + 5 + rng.normal(0, 1, 8)
    rows, meta = [], {}
    for s in range(8):
        for name, size, kv, top in ((f"mha_s{s}", "plain", 2, 30.0), (f"p_kv1_s{s}", "plain", 1, plain[s]),
                                    (f"m_kv1_s{s}", "matched", 1, matched[s])):
            rows.append({"model": name, "task_behaviour": True, "top_head_pct": top, "curve_prompts": "heldout",
                         "top_head_pct_heldout": top, "heads_to_80": 1, "heads_to_80_bounded": False,
                         "heads_to_80_frac": 0.25, "n_units": 4, "effective_units": 2.0, "top_share": 0.5})
            meta[name] = {"size": size, "kv_heads": kv, "seed": s, **({"also": ["matched"]} if kv == 2 else {})}
    pm = per_model(pl.DataFrame(rows), meta, {}, "ioi")
    out = {r["size"]: r for r in vs_twin(pm, paired(pm)).iter_rows(named=True)}
    assert out["plain"]["twin_size"] is None and np.isnan(out["plain"]["vs_twin_top_head_pct_p"])
    m = out["matched"]
    assert m["twin_size"] == "plain" and m["vs_twin_n_pairs"] == 8
    assert m["vs_twin_top_head_pct_diff"] == pytest.approx(float(np.mean(matched - plain)))
    assert m["vs_twin_top_head_pct_p"] == pytest.approx(scipy.stats.ttest_rel(matched, plain).pvalue)
