"""Can the sweep's primary family say "yes" (plan/config/sweep_power.py, checked at plan time), the exact test at
any number of pairs (seedtests.py), each comparison's minimum detectable effect (report/sweep/mde.py),
and kinds compared at one adjustment (verdicts.across_kinds)."""

from itertools import product
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from circuitloc import seedtests, stats
from circuitloc.errors import ConfigError
from circuitloc.plan.config import sweep_power as power
from circuitloc.report.sweep.paired import paired
from circuitloc.report.sweep.mde import t_mde
from circuitloc.report.sweep.summary import per_model
from circuitloc.report.sweep.verdicts import overview
from circuitloc.seedtests import integer_sign_flip_p

ROOT = Path(__file__).resolve().parents[2]


def _brute(d):
    d = [x for x in d if x != 0]
    t = abs(sum(d))
    return sum(abs(sum(s * x for s, x in zip(signs, d))) >= t for signs in product((1, -1), repeat=len(d))) / 2 ** len(d)


def test_the_integer_sign_flip_test_is_exact_at_any_number_of_pairs():
    rng = np.random.default_rng(3)
    for n in range(1, 13):
        d = rng.integers(-6, 7, n).astype(float)
        assert integer_sign_flip_p(d) == pytest.approx(_brute(d), abs=1e-12), d
    d = rng.integers(-9, 10, 18).astype(float)
    assert integer_sign_flip_p(d) == pytest.approx(stats.sign_flip_p(d), abs=1e-12)  # meet-in-the-middle
    assert integer_sign_flip_p(np.ones(30)) == 2 / 2 ** 30  # Monte Carlo would say ~1e-5
    assert integer_sign_flip_p([0.5, 1.0]) is None
    # the paired test: 25 pairs, every fewer-KV toy needs fewer heads, 3 ties: exact 2 / 2^22
    mha, kv = np.r_[np.full(22, 6.0), 4, 4, 4], np.r_[np.full(22, 3.0), 4, 4, 4]
    out = stats.paired_censored(mha, np.zeros(25, bool), kv, np.zeros(25, bool))
    assert out["untied"] == 22 and out["p"] == pytest.approx(2 / 2 ** 22, rel=1e-12)


def test_the_counted_sign_flip_p_is_the_float_programs_bit_for_bit():
    """Up to 53 nonzero pairs the test counts sign patterns in integers (fast); beyond, it sums
    probabilities in floats. Where both apply they give the same float, so no p moved."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(1, 54))
        a = np.abs(rng.integers(-40, 41, n))
        a = a[a > 0]
        total = int(a.sum())
        for t in (1, total // 3 + 1, total) if total else ():
            assert seedtests._float_p(a, total, t) == seedtests._counted_p(a, total, t), (a.tolist(), t)
    assert integer_sign_flip_p(np.ones(60)) == seedtests._float_p(np.ones(60, np.int64), 60, 60)  # the float path


def test_sign_test_counts_and_power_against_scipy():
    import scipy.stats

    for m, k in ((10, 9), (30, 24), (30, 23), (12, 6)):
        assert power.sign_test_p(k, m) == pytest.approx(scipy.stats.binomtest(k, m, 0.5).pvalue, rel=1e-9)
    thr = 0.05 / 17
    k = power.min_concordant(30, thr)
    assert power.sign_test_p(k, 30) < thr <= power.sign_test_p(k - 1, 30) and k == 24
    assert power.min_concordant(9, thr) is None  # 2 / 2^9 > 0.05 / 17
    q = power.concordance_for_power(30, k)
    assert scipy.stats.binom.sf(k - 1, 30, q) == pytest.approx(0.8, abs=1e-6)


def test_the_yes_threshold_is_where_holm_rejects_a_lone_comparisons_second_test():
    n = 18
    thr = power.yes_threshold(0.05, n)
    for p2, significant in ((thr * 0.999, True), (thr * 1.001, False)):
        p = np.r_[1e-9, p2, np.full(n - 2, 0.6)]  # one comparison differs, the other 16 tests null
        assert (stats.holm(p)[1] < 0.05) == significant
    assert power.seeds_needed(thr) == 10 and power.min_sign_flip_p(9) > thr > power.min_sign_flip_p(10)


def _resolve(seeds, **sweep):
    from circuitloc.plan.config.workflow_config import layered, resolve

    return resolve(layered(ROOT, {}, [ROOT / "config" / "sweep_capacity.yaml"],
                           {"sweep": {"seeds": list(range(seeds)), **sweep}}), ROOT)


def test_a_sweep_that_cannot_say_yes_stops_at_plan_time_in_one_line():
    with pytest.raises(ConfigError) as e:
        _resolve(5)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("config: sweep.seeds: 5 seeds cannot give a primary \"yes\"")
    assert "(ioi, zero-query, size small, KV 1 vs 8, and 8 other primary comparisons alike)" in msg
    assert "0.05/17" in msg and "holm over the 18 primary tests" in msg and "at least 10 seeds" in msg
    assert _resolve(30)["sweep"]["power_check"] is True  # the default is on, and 30 seeds pass
    _resolve(5, power_check=False)  # the explicit opt-out plans it
    rows = power.primary_comparisons(_resolve(30))
    assert len(rows) == 9 and sum(r["n_primary"] for r in rows) == 18


def _sizes_pm(n_sizes, seeds, ties=0):
    """n_sizes sizes of MHA (KV 8) against KV 1 on `seeds` seeds. Size z0 alone differs: its KV-1
    toy's top head far above (noisy) and its greedy heads-to 3 against 6 on every pair but the last
    `ties` (6 and 6); in the other sizes the top head differs by noise only and heads-to ties."""
    rng = np.random.default_rng(0)
    rows, meta = [], {}
    for z in range(n_sizes):
        for s in range(seeds):
            for kv in (8, 1):
                name = f"z{z}_kv{kv}_s{s}"
                top = 30.0 + s + ((30 if z == 0 else 0) + rng.normal(0, 3) if kv == 1 else 0)
                g = 3 if kv == 1 and z == 0 and s < seeds - ties else 6
                rows.append({"model": name, "task_behaviour": True, "curve_prompts": "heldout", "top_head_pct": top,
                             "top_head_pct_heldout": top, "heads_to_80": 6, "heads_to_80_bounded": False,
                             "heads_to_80_frac": 6 / 16, "heads_to_80_greedy": g, "heads_to_80_greedy_bounded": False,
                             "heads_to_80_greedy_frac": g / 16, "n_units": 16, "effective_units": 4.0,
                             "top_share": 0.3})
                meta[name] = {"size": f"z{z}", "kv_heads": kv, "seed": s}
    return per_model(pl.DataFrame(rows), meta, {}, "ioi")


def test_the_plan_check_agrees_with_the_pipeline_and_the_overview_states_the_mde():
    """9 comparisons, 18 primary tests; one comparison differs, every pair pointing the same way on
    both measures: at 9 seeds it gets no yes (what the plan refuses), at 10 it does; the overview
    says so (yes_reachable) and gives the minimum detectable effect; 2 tied pairs of 12 leave 10."""
    from circuitloc.report.sweep.mde import with_mde
    from circuitloc.report.sweep.summary import SweepStats

    st = SweepStats()
    for seeds, ties, yes in ((9, 0, False), (10, 0, True), (12, 2, True)):
        ov = with_mde(overview({("ioi", "zero-query"): paired(_sizes_pm(9, seeds, ties))}), st)
        assert ov["n_tests_primary_all"][0] == 18
        assert ov["verdict_all"][0].endswith(": yes") == yes
        assert ov["verdict_all"][0].startswith("partial: top head significant") != yes
        r = ov.row(0, named=True)
        assert r["yes_reachable"] == yes and r["yes_threshold"] == pytest.approx(0.05 / 17)
        assert (r["heads_to_untied_pairs"], r["heads_to_tied_pairs"]) == (seeds - ties, ties)
        assert r["heads_to_min_p"] == pytest.approx(2 / 2 ** (seeds - ties))
        assert r["mde_heads_to_concordant"] == power.min_concordant(seeds - ties, 0.05 / 17)
        assert r["mde_top_head_sd"] == pytest.approx(t_mde(seeds, 0.05 / 18))
        assert r["mde_top_head_pct"] == pytest.approx(r["mde_top_head_sd"] * r["top_head_pct_diff_sd"])


def test_t_mde_has_the_power_it_claims():
    """At the MDE, a simulated paired t-test at alpha/18 over 10 normal differences rejects in 80%
    of 20,000 draws (within 4 Monte Carlo standard errors)."""
    import scipy.stats

    n, level = 10, 0.05 / 18
    d = t_mde(n, level)
    x = np.random.default_rng(5).normal(d, 1.0, (20_000, n))
    p = scipy.stats.ttest_1samp(x, 0, axis=1).pvalue
    assert abs((p < level).mean() - 0.8) < 4 * np.sqrt(0.8 * 0.2 / 20_000)


def test_holds_under_compares_every_kind_at_one_adjustment():
    """The same strong comparison under zero and mean ablation, beside 20 null exploratory tables:
    mean's tests, adjusted with the 40-odd exploratory tests, said 'no clear difference' and made the
    verdict 'zero only'; within mean's own copy of the primary family (2 tests, as zero's) it says
    yes, as zero does."""
    from test_sweep import _paired_row

    strong = _paired_row("small", 5.0, 0.001, 0.002, 0.5, wins=9, losses=0)
    null = _paired_row("small", 0.1, 0.5, 0.6, 0.7, wins=4, losses=4)
    tables = {("ioi", "zero-query"): pl.DataFrame([strong]), ("ioi", "mean-query"): pl.DataFrame([strong])}
    tables |= {(f"t{i}", "mean-layer"): pl.DataFrame([null]) for i in range(20)}
    out = overview(tables)
    assert out["verdict_all"][1] == "exploratory: no clear difference (holm-adjusted alpha 0.05)"
    assert out["verdict_by_kind"][0] == "zero: yes; mean: yes"
    assert out["holds_under"][0] == out["holds_under"][1] == "every kind"
    assert out["kinds_adjustment"][0].startswith("holm within each kind's copy of the primary family: zero 2 tests, "
                                                 "mean 2 tests")
    weak = dict(strong, top_head_pct_p=0.06)  # mean's top head alone misses: partial, not what zero says
    out = overview({**tables, ("ioi", "mean-query"): pl.DataFrame([weak])})
    assert out["holds_under"][0] == "zero only"
    assert out["verdict_by_kind"][0] == "zero: yes; mean: partial (heads-to, more)"
