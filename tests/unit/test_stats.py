"""Bootstrap intervals and agreement measures against known answers."""

import numpy as np
import pytest

from circuitloc.stats import (
    Bootstrap,
    agreement,
    benjamini_hochberg,
    bootstrap_weights,
    censored_median,
    censored_scores,
    definitely_less,
    drop_intervals,
    holm,
    paired_censored,
    sign_flip_p,
)


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    clean = rng.normal(3.0, 1.0, n)
    ablated = np.stack([clean - rng.normal(d, 1.0, n) for d in (2.0, 0.5, 0.0)])
    return clean, ablated


def test_intervals_contain_the_estimate_and_shrink_with_more_prompts():
    widths = []
    for n in (20, 80, 320):
        clean, ablated = _data(n)
        iv = drop_intervals(clean, ablated, True, Bootstrap(1000, 0))
        est = clean.mean() - ablated.mean(axis=1)
        assert np.all(iv["lo"] <= est) and np.all(est <= iv["hi"])
        widths.append(float(np.mean(iv["hi"] - iv["lo"])))
    assert widths[0] > widths[1] > widths[2]
    assert widths[0] / widths[2] == pytest.approx(4, rel=0.3)  # width ~ 1/sqrt(n)


def test_intervals_for_a_loss_and_the_top_unit_frequency():
    clean, ablated = _data(60)
    up = drop_intervals(clean, ablated, True, Bootstrap(500, 1))
    down = drop_intervals(-clean, -ablated, False, Bootstrap(500, 1))  # a loss: increase = drop
    assert np.allclose(up["lo"], down["lo"]) and np.allclose(up["hi"], down["hi"])
    assert up["top_freq"].sum() == pytest.approx(1.0)
    assert up["top_freq"][0] > 0.99  # the unit with a clear effect stays top


def test_bootstrap_is_seeded_and_resamples_with_replacement():
    w = bootstrap_weights(10, 50, seed=3)
    assert np.allclose(w.sum(axis=1), 1.0) and np.array_equal(w, bootstrap_weights(10, 50, seed=3))
    assert (w == 0).any()  # some prompts left out of some resamples


def test_agreement():
    labels = np.array(["a", "b", "c", "d", "e", "f"])
    same = agreement([6, 5, 4, 3, 2, 1], [60, 50, 40, 30, 20, 10], labels)
    assert same["same_top"] and same["spearman"] == pytest.approx(1.0) and same["top5_overlap"] == 1.0
    rev = agreement([6, 5, 4, 3, 2, 1], [1, 2, 3, 4, 5, 6], labels)
    assert not rev["same_top"] and rev["spearman"] == pytest.approx(-1.0) and rev["top5_overlap"] == pytest.approx(0.8)


def test_damage_interval_resamples_numerator_and_denominator_together():
    """Each prompt's ablated metric is half its clean metric, so every resample's damage
    drop / clean is exactly 0.5: the interval has no width. Dividing the drop's interval by the
    fixed clean mean (the old way) gives a wide one."""
    rng = np.random.default_rng(0)
    clean = rng.uniform(1.0, 5.0, 40)
    ablated = np.stack([0.5 * clean, clean - 1.0])
    iv = drop_intervals(clean, ablated, True, Bootstrap(500, 0), floor=0.0)
    assert iv["damage_lo"][0] == pytest.approx(0.5) and iv["damage_hi"][0] == pytest.approx(0.5)
    fixed = (iv["hi"][0] - iv["lo"][0]) / clean.mean()
    assert fixed > 0.1
    # a per-prompt floor (induction's no-repeat loss) is resampled too: a loss whose ablated value sits
    # halfway between clean and floor on every prompt has damage exactly 0.5
    loss, floor = rng.uniform(0.1, 1.0, 40), rng.uniform(3.0, 6.0, 40)
    iv = drop_intervals(loss, [(loss + floor) / 2], False, Bootstrap(500, 0), floor=floor)
    assert iv["damage_lo"][0] == pytest.approx(0.5) and iv["damage_hi"][0] == pytest.approx(0.5)


def test_holm_and_benjamini_hochberg_against_hand_computation():
    # p = [0.01, 0.04, 0.03, 0.005], m = 4. Holm: sort 0.005, 0.01, 0.03, 0.04 and multiply by
    # 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04; running maximum: 0.02, 0.03, 0.06, 0.06; back in input order
    # [0.03, 0.06, 0.06, 0.02]. BH: multiply by 4/1, 4/2, 4/3, 4/4: 0.02, 0.02, 0.04, 0.04; running
    # minimum from the largest: 0.02, 0.02, 0.04, 0.04; in input order [0.02, 0.04, 0.04, 0.02].
    p = [0.01, 0.04, 0.03, 0.005]
    assert np.allclose(holm(p), [0.03, 0.06, 0.06, 0.02])
    assert np.allclose(benjamini_hochberg(p), [0.02, 0.04, 0.04, 0.02])
    # untestable entries (NaN) are not tests: m counts only the finite p-values, and 1 caps the result
    got = holm([0.01, np.nan, 0.04, 0.5])
    assert np.isnan(got[1]) and np.allclose(got[[0, 2, 3]], [0.03, 0.08, 0.5])
    assert holm([0.6, 0.7])[0] == 1.0


def test_sign_flip_test_is_exact():
    assert sign_flip_p([1, 1, 1, 1, 1]) == pytest.approx(2 / 32)  # the smallest p five pairs allow
    assert sign_flip_p([0, 0, 0]) == 1.0
    # d = [3, 1, -1]: |sum| = 3; the 8 sign patterns give |sum| 5, 3, 1, 3, 3, 1, 3, 5 -> 6 of 8 are >= 3
    assert sign_flip_p([3, 1, -1]) == pytest.approx(6 / 8)


def test_censored_scores_and_pairs():
    # without censoring Gehan's score is 2 * rank - (n + 1)
    assert np.allclose(censored_scores([5, 1, 3], [False] * 3), [2, -2, 0])
    # '> 8' ranks above every observed value at or below 8; two '> 8' tie
    s = censored_scores([8, 2, 8, 3], [True, False, True, False])
    assert s[0] == s[2] == 2 and s[1] == -3 and s[3] == -1
    # MHA '> 8' vs GQA 3: a GQA win; both '> 8': a tie; MHA 4 vs GQA '> 8': a GQA loss;
    # MHA 9 vs GQA '> 8': undecidable, a tie
    out = paired_censored([8, 8, 4, 9], [True, True, False, False], [3, 8, 8, 8], [False, True, True, True])
    assert (out["wins"], out["losses"], out["ties"]) == (1, 1, 2)
    assert censored_median([8, 2, 8], [True, False, True]) == (8.0, True)
    assert censored_median([8, 2, 3], [True, False, False]) == (3.0, False)


def test_censored_scores_and_pairs_equal_definitely_less_pair_by_pair():
    """The array forms (Gehan's scores, a pair's win or loss) against the scalar rule they vectorise,
    one pair at a time, on draws with ties and censoring at every bound."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(2, 9))
        v, c = rng.integers(1, 6, n).astype(float), rng.random(n) < 0.4
        less = [[definitely_less(v[i], c[i], v[j], c[j]) for j in range(n)] for i in range(n)]
        below = [sum(less[j][i] for j in range(n)) - sum(less[i][j] for j in range(n)) for i in range(n)]
        assert censored_scores(v, c).tolist() == below
        a, ac, b, bc = v, c, rng.integers(1, 6, n).astype(float), rng.random(n) < 0.4
        out = paired_censored(a, ac, b, bc)
        assert out["wins"] == sum(definitely_less(b[i], bc[i], a[i], ac[i]) for i in range(n))
        assert out["losses"] == sum(definitely_less(a[i], ac[i], b[i], bc[i]) for i in range(n))


def _holm_reference(p):
    """Holm by its definition, one p at a time: reject H_(i) iff every p_(j), j <= i, is below alpha
    / (m - j + 1); the adjusted p is the smallest alpha that rejects it."""
    p = np.asarray(p, float)
    ok = np.isfinite(p)
    m = int(ok.sum())
    out = np.full(p.shape, np.nan)
    for i in np.flatnonzero(ok):
        below = [j for j in np.flatnonzero(ok) if p[j] <= p[i]]  # ties: rejected together
        ranks = {j: 1 + int(np.sum(p[ok] < p[j])) for j in below}
        out[i] = min(1.0, max((m - ranks[j] + 1) * p[j] for j in below))
    return out


def _bh_reference(p):
    """Benjamini-Hochberg by its definition: min over k >= rank(i) of m p_(k) / k (ties share the
    largest rank among them)."""
    p = np.asarray(p, float)
    ok = np.isfinite(p)
    m = int(ok.sum())
    out = np.full(p.shape, np.nan)
    for i in np.flatnonzero(ok):
        cands = [m * p[j] / int(np.sum(p[ok] <= p[j])) for j in np.flatnonzero(ok) if p[j] >= p[i]]
        out[i] = min(1.0, min(cands))
    return out


def test_holm_and_bh_with_ties_and_nan_match_their_definitions():
    rng = np.random.default_rng(3)
    for _ in range(200):
        p = rng.choice([0.001, 0.01, 0.02, 0.04, 0.2, 0.5, np.nan], size=rng.integers(1, 9))
        assert np.allclose(holm(p), _holm_reference(p), equal_nan=True)
        assert np.allclose(benjamini_hochberg(p), _bh_reference(p), equal_nan=True)


def test_monte_carlo_sign_flip_p_is_never_zero():
    # 20 pairs all of one sign: beyond exact_max, so Monte Carlo; the exact p would be 2 / 2^20, and
    # 1000 draws almost never hit it, so p is (1 + 0) / (1 + 1000), never 0
    p = sign_flip_p(np.ones(20), n_mc=1000)
    assert p > 0 and p == pytest.approx(1 / 1001, abs=2 / 1001)


def test_smallest_exact_p_counts_only_pairs_that_differ():
    # 8 seeds, 5 of them with a nonzero difference: the smallest p is 2 / 2^5, not 2 / 2^8
    assert sign_flip_p([1, 1, 1, 1, 1, 0, 0, 0]) == pytest.approx(2 / 32)


def _brute_force_sign_flip(d):
    """Every sign vector, one at a time (itertools): the share with |sum| at least the observed."""
    from itertools import product

    d = [x for x in d if x != 0]
    t = abs(sum(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= t - 1e-9 for signs in product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


def test_exact_sign_flip_equals_brute_force_at_small_n():
    rng = np.random.default_rng(7)
    for n in range(1, 13):
        for _ in range(4):
            d = rng.normal(0.3, 1.0, n) if n % 2 else rng.integers(-4, 5, n).astype(float)  # ties too
            assert sign_flip_p(d) == pytest.approx(_brute_force_sign_flip(d), abs=1e-12), d


def test_exact_sign_flip_to_20_pairs_matches_monte_carlo_within_its_error():
    """20 pairs are enumerated (all 2^20 sign vectors; the old code drew 100,000 and floored p at
    1e-5); Monte Carlo on the same differences agrees within 4 standard errors, and the smallest
    exact p is 2 / 2^20."""
    rng = np.random.default_rng(11)
    for n in (17, 20):
        d = rng.normal(0.35, 1.0, n)
        exact = sign_flip_p(d)
        mc = sign_flip_p(d, exact_max=0, n_mc=200_000, seed=3)
        assert abs(exact - mc) <= 4 * np.sqrt(exact * (1 - exact) / 200_000) + 1e-5, (n, exact, mc)
    assert sign_flip_p(np.ones(20)) == pytest.approx(2 / 2 ** 20)
    assert sign_flip_p(np.ones(21), n_mc=1000) == pytest.approx(1 / 1001)  # beyond 20: Monte Carlo


@pytest.mark.slow  # a simulation (pyproject's slow marker)
def test_intervals_cover_at_twenty_prompts():
    """bench/coverage.py's measurement at the shipped ioi scoring count (20 prompts): the jobs'
    intervals (studentized) cover the truth of drops, damage ratios and curve steps in >= 93% of
    synthetic prompt sets with normal and with skewed per-prompt drops; the percentile intervals
    the jobs used before fall short on the same sets."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import coverage as bench

    cells = [bench.Case(q, dist, 20) for q in ("drop", "damage", "curve") for dist in ("normal", "skewed")]
    shipped = [bench.covers(c, "studentized", reps=300, n_boot=400, seed=i) for i, c in enumerate(cells)]
    before = [bench.covers(c, "percentile", reps=300, n_boot=400, seed=i) for i, c in enumerate(cells)]
    assert np.mean(shipped) >= 0.93 and min(shipped) >= 0.91, shipped
    assert np.mean(before) < 0.93, before
    from circuitloc.stats import INTERVAL

    assert INTERVAL == "studentized"  # the method the jobs use is the one measured here


@pytest.mark.slow  # a simulation (pyproject's slow marker)
def test_interval_methods_agree_for_large_symmetric_samples():
    """At 2000 normal prompts percentile, BCa and studentized intervals of a mean and of a ratio are
    the same to within their Monte Carlo noise, and each is about the normal-theory interval."""
    from circuitloc.stats import INTERVAL_METHODS, mean_intervals, ratio_intervals

    rng = np.random.default_rng(5)
    x = rng.normal(1.0, 1.0, (1, 2000))
    s = rng.normal(4.0, 1.0, 2000)
    w = bootstrap_weights(2000, 2000, 1)
    half = 1.96 * x.std() / np.sqrt(2000)
    for m in INTERVAL_METHODS:
        lo, hi = mean_intervals(x, w, 0.95, m)
        assert lo[0] == pytest.approx(x.mean() - half, abs=0.15 * half)
        assert hi[0] == pytest.approx(x.mean() + half, abs=0.15 * half)
        rlo, rhi = ratio_intervals(x, s, w, 0.95, m)
        r = x.mean() / s.mean()
        assert rlo[0] < r < rhi[0]
    with pytest.raises(ValueError, match="percentile"):
        mean_intervals(x, w, 0.95, "basic")
