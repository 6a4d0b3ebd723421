"""The stability beside each sweep verdict is that verdict's (report/sweep/stability.py), measure and
direction included, and bench/stability_calibration.py's simulated verdicts are the pipeline's:
the same numbers through the paired tables and the overview give the same verdicts, and the same
seed draws the same stability."""

import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from circuitloc import stats
from circuitloc.report.sweep import stability
from circuitloc.report.sweep.paired import paired
from circuitloc.report.sweep.summary import SweepStats, per_model
from circuitloc.report.sweep.verdicts import overview, verdict, verdict_key

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import stability_calibration as calib  # noqa: E402

TASKS = ("ioi", "induction", "facts")


def _per_model(top, mha, kv):
    """Per-model rows of one size per task from the bench's arrays: the KV-1 toy's top head is the
    MHA toy's plus 10 x the simulated difference, greedy heads-to the simulated counts."""
    out = {}
    for k, task in enumerate(TASKS[: len(top)]):
        rows, meta = [], {}
        for s in range(top.shape[1]):
            for kvh, t, g in ((8, 40.0 + s, mha[k, s]), (1, 40.0 + s + 10 * top[k, s], kv[k, s])):
                name = f"{task}_kv{kvh}_s{s}"
                rows.append({"model": name, "task_behaviour": True, "curve_prompts": "heldout", "top_head_pct": t,
                             "top_head_pct_heldout": t, "heads_to_80": 6, "heads_to_80_bounded": False,
                             "heads_to_80_frac": 6 / 16, "heads_to_80_greedy": g, "heads_to_80_greedy_bounded": False,
                             "heads_to_80_greedy_frac": g / 16, "n_units": 16, "effective_units": 4.0,
                             "top_share": 0.3})
                meta[name] = {"size": "small", "kv_heads": kvh, "seed": s}
        out[(task, "zero-query")] = per_model(pl.DataFrame(rows), meta, {}, task)
    return out


def _shares(top, mha, kv, n, k=0):
    """The share of n seed draws (as the stability functions draw them: seed 0) whose bench verdict
    of comparison k equals the one on all seeds, the family being every row of the arrays."""
    ref = calib.verdicts(top, mha, kv)[k]
    rng = np.random.default_rng(0)
    seeds = list(range(top.shape[1]))
    hits = 0
    for _ in range(n):
        i = rng.choice(seeds, size=len(seeds), replace=True)
        hits += calib.verdicts(top[:, i], mha[:, i], kv[:, i])[k] == ref
    return hits / n


@pytest.mark.slow  # a simulation: 40 resampled sweeps against the bench's own (pyproject's slow marker)
def test_each_stability_is_that_of_the_verdict_it_stands_beside():
    """ioi's comparison says yes within its table (2 tests) and nothing over the three tasks' 6:
    verdict_table_stability is the share of draws giving the table's yes again, verdict_all_stability
    the share giving the overview's verdict again with one draw of the seeds for every task; each
    equals the bench's independent computation on the same draws, and the two differ."""
    top, mha, kv = calib.draw(np.random.default_rng(2), np.array([[1.0, 1.0], [0, 0], [0, 0]]), 10)
    pms = _per_model(top, mha, kv)
    st = SweepStats()
    tables = {k: stability.with_stability(pm, paired(pm, st), lambda p, lay: paired(p, st), 40)
              for k, pm in pms.items()}
    out = stability.beside_overview(overview(tables, st), tables, {k: (pm, None) for k, pm in pms.items()}, st,
                                    (40, 0))
    r = out.row(0, named=True)
    assert r["verdict_table"] == "fewer KV heads more concentrated: yes"
    assert r["verdict_all"].startswith("no clear difference")
    assert out.columns.index("verdict_all_stability") == out.columns.index("verdict_all") + 1
    assert r["verdict_table_stability"] == _shares(top[:1], mha[:1], kv[:1], 40)
    assert r["verdict_all_stability"] == _shares(top, mha, kv, 40)
    assert r["verdict_table_stability"] != r["verdict_all_stability"]


def test_stability_compares_measure_and_direction():
    """A resample whose partial verdict moves from the top head to heads-to, or turns direction, is
    another verdict (the verdict class alone called it the same)."""
    top_more = "partial: top head significant (says fewer KV more concentrated), heads-to not (points the same way)"
    moved = "partial: heads-to significant (says fewer KV more concentrated), top head not (points the same way)"
    turned = "partial: top head significant (says fewer KV less concentrated), heads-to not (points the other way)"
    pm = pl.DataFrame({"seed": [0, 1, 2]})
    pairs = pl.DataFrame({"size": ["s"], "kv_heads": [1], "vs_unit": ["query"], "verdict": [top_more]})
    for text, share in ((top_more, 1.0), (moved, 0.0), (turned, 0.0)):
        got = stability.verdict_stability(pm, pairs, lambda p, lay, t=text: pairs.with_columns(verdict=pl.lit(t)), 5)
        assert got == [share]
    assert verdict_key(moved) != verdict_key(top_more) != verdict_key(turned)


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_the_benchs_verdicts_are_the_pipelines(seed):
    """Random truths and seeds: the bench's verdicts (Holm over its 2K tests) equal the overview's
    verdict_all on the same numbers run through per_model, paired and overview."""
    rng = np.random.default_rng(seed)
    top, mha, kv = calib.draw(rng, rng.uniform(0, 1.5, (3, 2)), 12)
    tables = {k: paired(pm) for k, pm in _per_model(top, mha, kv).items()}
    ov = overview(tables, by_kind=False)
    assert [verdict_key(v) for v in ov["verdict_all"]] == calib.verdicts(top, mha, kv)


def test_the_benchs_batched_tests_are_paired_censoreds():
    """The bench tests every resample of a run at once (heads_to_tests, verdicts_many): its p and
    stat are stats.paired_censored's, float for float, on random heads-to counts of 3 to 30 seeds
    (ties, zero differences, stat 0 among them), and a batch's verdicts are each family's alone."""
    rng = np.random.default_rng(7)
    no, seen = np.zeros(30, bool), []
    for n in (3, 10, 30):
        top, mha, kv = (np.stack(x) for x in zip(*(calib.draw(rng, rng.uniform(0, 1.5, (9, 2)), n) for _ in range(6))))
        p, st = calib.heads_to_tests(mha, kv)
        for b in range(6):
            for k in range(9):
                r = stats.paired_censored(mha[b, k], no[:n], kv[b, k], no[:n])
                assert (r["p"], r["stat"]) == (p[b, k], st[b, k]), (n, b, k)
        assert calib.verdicts_many(top, mha, kv) == [calib.verdicts(*x) for x in zip(top, mha, kv)]
        seen.append(st == 0)
    assert np.concatenate(seen, axis=None).any()
    for _ in range(2000):  # the verdicts it remembers are verdicts.verdict's on any such row
        ps = rng.choice([np.nan, 0.0, 0.01, 0.0499, 0.05, 0.2, 1.0], 2)
        row = {"n_pairs": int(rng.integers(1, 31)), "verdict_heads_to": "h", "top_head_pct_family": "primary",
               "h_family": "primary", "top_head_pct_p_all": ps[0], "h_frac_p_all": ps[1],
               "direction_top_head": int(rng.integers(-1, 2)), "direction_heads_to": int(rng.integers(-1, 2))}
        assert calib._verdict_key(row) == verdict_key(verdict(row, "all", calib.ALPHA)), row


@pytest.mark.slow
def test_docs_quote_the_calibration_the_bench_computes():
    """docs/method.md's calibration table is what bench/stability_calibration.py prints (the full
    computation, about 20 s of CPU: every resample of a run is tested at once)."""
    text = (ROOT / "docs" / "method.md").read_text()
    block = text.split(calib.START)[1].split(calib.END)[0].strip()
    assert block == calib.table()
