"""The damage interval's coverage, case by case, at the shipped resamples (bench/coverage_regimes.py):
docs/method.md's table must be exactly what the code computes (the full table, about 45 s of CPU:
`slow`), and a few cases at fewer runs check the same rules in seconds."""

import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import coverage_regimes as regimes  # noqa: E402

from circuitloc import intervals, stats  # noqa: E402


@pytest.mark.slow
def test_every_case_covers_or_is_named_in_the_docs():
    """Monte Carlo se of a coverage near 0.93: sqrt(0.93 x 0.07 / 2000) = 0.006 for a case whose
    runs all get a finite interval, more where few do. The docs' table is the code's; in every case
    the runs without a note cover >= 0.93 (or there are none); every case of `MIN_PROMPTS` prompts or
    more covers with its finite intervals; the normal ones mostly carry no note (the bar is not met
    by noting every run); and in the skewed and heavy-tailed cases the runs of 20 prompts that look
    unskewed under-cover (why the flag counts prompts)."""
    shipped = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["bootstrap"]["n"]
    assert regimes.N_BOOT == shipped  # measured at the resamples the runs use
    results = regimes.rows()
    assert regimes.doc_table((ROOT / "docs" / "method.md").read_text()) == regimes.table(results), (
        "docs/method.md's coverage table is not what the code computes: run python bench/coverage_regimes.py --write")
    for r in results:
        assert not r["unflagged"] < regimes.LEVEL, r  # NaN: no run without a note
        assert r["coverage"] >= regimes.LEVEL or regimes.status(r) != "covered", r
        if r["n"] >= intervals.MIN_PROMPTS:
            assert r["coverage"] >= regimes.LEVEL and regimes.status(r) == "covered", r
            if r["dist"] == "normal":
                assert r["unflagged_share"] >= 0.8, r
        if r["n"] == 20 and (r["dist"] == "heavy" or (r["dist"], r["cv"]) == ("skewed", 1.0)):
            assert r["unskewed"] < regimes.LEVEL, r


def test_the_benchs_conditioning_rule_is_the_shipped_one():
    """The bench admits a run as stats.mean_intervals(span, w)[0] > 0 does (its quantile over every
    run at once, the call itself where a resample has no spread: 2 prompts), in every noise."""
    from coverage import noise

    rng, mixed = np.random.default_rng(1), False
    for dist in regimes.DISTS:
        for cv, n in ((0.25, 10), (1.0, 20), (3.0, 60), (3.0, 2)):
            s = 1.0 + cv * noise(rng, dist, (200, n))
            w = stats.bootstrap_weights(n, 1000, int(rng.integers(2 ** 31)))
            got, want = regimes.admitted(s, w), stats.mean_intervals(s, w)[0] > 0
            assert (got == want).all(), (dist, cv, n)
            mixed = mixed or 0 < want.sum() < len(want)
    assert mixed  # some case admits some runs and not others


def test_runs_without_a_note_cover_from_the_flag_on():
    """The fast form of the table's bar (300 runs a case, Monte Carlo se 0.015): at `MIN_PROMPTS`
    prompts every skewed and heavy-tailed run is widened (none is left without a note, where the
    skewness limit of 1 left 1% of the skewed runs unnoted, covering 0.67-0.92) and covers; most
    normal runs carry no note and those cover; below it every run carries the flag."""
    n = intervals.MIN_PROMPTS
    for dist in ("skewed", "heavy"):
        r = regimes.case(dist, 1.0, n, reps=300)
        assert r["unflagged_share"] == 0 and r["widened"] == 1 and r["coverage"] >= regimes.LEVEL, r
    r = regimes.case("normal", 1.0, n, reps=300)
    assert r["unflagged_share"] >= 0.8 and r["unflagged"] >= regimes.LEVEL - 0.015, r
    r = regimes.case("normal", 1.0, n // 3, reps=40, n_boot=200)
    assert r["unflagged_share"] == 0 and np.isnan(r["unflagged"]), r


def test_the_skewness_limit_follows_the_mean():
    """A sample skewness between 0.62 and 1 (scipy's) is skewed at 60 prompts and not at 200: the
    limit is 0.08 sqrt(n) up to 156 prompts (the skewness of the mean, g / sqrt(n), beyond 0.08),
    then 1."""
    from scipy.stats import gamma, skew

    for n, want in ((60, intervals.WIDENED), (200, "studentized")):
        q = gamma.ppf((np.arange(n) + 0.5) / n, a=(2 / 0.85) ** 2)  # skewness 0.85 in the limit
        e = (q - q.mean()) / q.std()
        s = 1 + 0.05 * np.cos(np.arange(n))  # a quiet, symmetric span
        d = 0.4 * s + 0.25 * e
        g = skew(d - d.mean() / s.mean() * s)
        assert 0.62 < abs(g) < 1 and abs(skew(s)) < 0.1, g
        lo, hi, method, few = intervals.damage_bounds(d, s, stats.bootstrap_weights(n, 500, 0))
        assert list(method) == [want] and not few.any(), (n, g)
    assert intervals.skew_limit(60) == pytest.approx(0.08 * np.sqrt(60))
    assert intervals.skew_limit(157) == intervals.skew_limit(10 ** 4) == 1.0


def test_an_unbounded_interval_is_no_interval(monkeypatch):
    """Coverage counts the runs with a bound only: with every interval unbounded but one hit and
    one miss per block of runs, the case covers 0.5 (counting unbounded as covering: near 1)."""
    def fake(d, s, w):
        lo, hi = np.full(len(d), -np.inf), np.full(len(d), np.inf)
        lo[:2], hi[:2] = (0.3, 0.5), (0.5, 0.6)  # the truth 0.4: a hit, a miss
        return lo, hi, np.full(len(d), "fieller"), np.zeros(len(d), bool)

    monkeypatch.setattr(regimes.intervals, "damage_bounds", fake)
    r = regimes.case("normal", 0.25, 20, reps=40, n_boot=50)
    assert r["coverage"] == 0.5 and r["unflagged"] == 0.5 and r["unbounded"] == 0.8, r


def test_the_widened_interval_holds_the_unwidened_one():
    """A skewed row's interval is the hull of its own, the percentile 99% and the studentized 99%
    intervals: it contains each; a row without skew keeps its interval exactly."""
    rng = np.random.default_rng(5)
    n = 160  # 60 or more (no flag), above 156 (the limit is 1)
    s = 1 + 0.25 * rng.normal(size=(2, n))
    d = 0.4 * s + 0.25 * rng.normal(size=(2, n))
    d[0] += 0.25 * (rng.lognormal(0, 1.5, n) - np.exp(1.125))  # row 0: heavy right tail
    w = stats.bootstrap_weights(n, 1000, 3)
    lo, hi, method, few = intervals.damage_bounds(d, s, w)
    assert list(method) == [intervals.WIDENED, "studentized"] and not few.any(), intervals.influence_skew(d, s)
    base = intervals.ratio_bounds(d, s, w, 0.95, "studentized")
    assert (lo[1], hi[1]) == (base[0][1], base[1][1])
    for m in ("studentized", "percentile"):
        a, b = intervals.ratio_bounds(d[:1], s[:1], w, 0.99, m)
        assert lo[0] <= min(a[0], base[0][0]) and hi[0] >= max(b[0], base[1][0])
    assert hi[0] - lo[0] > base[1][0] - base[0][0]
    assert intervals.note(method[0], False) == "interval widened (skewed prompts)"
    assert intervals.note("studentized", True) == "interval may under-cover (fewer than 60 prompts)"
    assert intervals.note("studentized", False) == ""


def test_the_studentized_ratio_under_covers_where_the_span_is_noisy():
    """Why the method changes with the span: at span CV 2 and 20 prompts (normal noise) the
    studentized interval misses the truth far more than 5% of the time; Fieller does not."""
    rng = np.random.default_rng(0)
    s = 1 + 2 * rng.normal(size=(1000, 20))
    d = 0.4 * s + 0.25 * rng.normal(size=(1000, 20))
    w = stats.bootstrap_weights(20, 1000, 1)
    ok = stats.mean_intervals(s, w)[0] > 0
    cover = {m: np.mean([(lo <= 0.4 <= hi) for lo, hi in zip(*intervals.ratio_bounds(d[ok], s[ok], w, 0.95, m))])
             for m in ("studentized", "fieller")}
    assert cover["studentized"] < 0.9 < regimes.LEVEL <= cover["fieller"], cover
    assert set(intervals.damage_method(s[ok])) == {"fieller"}
    assert set(intervals.damage_method(1 + 0.25 * rng.normal(size=(5, 60)))) == {"studentized"}


def test_fieller_matches_its_quadratic_and_the_studentized_one_matches_stats():
    """Fieller's bounds solve (D - r S)^2 = t^2 var(D - r S) / N; the studentized ratio interval is
    the one stats.ratio_intervals computes."""
    from scipy.stats import t as student

    rng = np.random.default_rng(3)
    d, s = rng.normal(1.0, 1.0, 30), rng.normal(3.0, 1.0, 30)
    lo, hi = intervals.ratio_bounds(d, s, stats.bootstrap_weights(30, 10, 0), 0.95, "fieller")
    q = student.ppf(0.975, 29)
    for r in (lo[0], hi[0]):
        diff = d - r * s
        assert np.isclose(diff.mean() ** 2, q ** 2 * diff.var(ddof=1) / 30)
    w = stats.bootstrap_weights(30, 500, 2)
    num = rng.normal(1.0, 1.0, (3, 30))
    a = stats.ratio_intervals(num, s, w, 0.95, "studentized")
    b = intervals.ratio_bounds(num, s, w, 0.95, "studentized")
    assert np.allclose(a, b)


def test_drop_intervals_report_the_method_and_the_flag():
    """A run of 10 prompts carries the few-prompts flag, one of 60 normal prompts does not; a quiet
    span never gets Fieller's interval."""
    rng = np.random.default_rng(4)
    for n, flagged in ((10, True), (59, True), (60, False), (200, False)):
        clean = 4 + rng.normal(size=n)
        iv = stats.drop_intervals(clean, [clean - 1.5 - 0.2 * rng.normal(size=n)], True, stats.Bootstrap(1000, 0),
                                  floor=0.0)
        assert iv["damage_ci"][0] in ("studentized", intervals.WIDENED), iv
        assert bool(iv["damage_ci_undercover"][0]) is flagged


def test_table1_says_where_the_damage_interval_was_widened_or_may_under_cover():
    """The top unit's interval note reaches Table 1 (scoring and held-out prompts): widened for
    skewed prompts, the few-prompts flag, both, or ""."""
    import polars as pl
    from helpers import model_card
    from test_conditioning import _frames

    from circuitloc.report.tables.localization import table1

    frames = {}
    cases = {"both": ("widened", True), "skewed": ("widened", False), "few": ("fieller", True),
             "quiet": ("studentized", False)}
    for name, (method, flag) in cases.items():
        s, c = _frames(3.0, 2.5)
        iv = {"drop_lo": pl.col("drop") - 0.1, "drop_hi": pl.col("drop") + 0.1, "damage_lo": pl.col("damage") - 0.05,
              "damage_hi": pl.col("damage") + 0.05, "damage_ci": pl.lit(method), "damage_ci_undercover": pl.lit(flag)}
        s = s.with_columns(**iv)
        c = c.with_columns(**{k: v for k, v in iv.items() if k.startswith("damage")})
        frames[name] = (s, c)
    card = model_card(family="f", attention="gqa", n_params=1000)
    t1 = table1("ioi", {m: card for m in frames}, {m: f[0] for m, f in frames.items()},
                {m: f[1] for m, f in frames.items()}, 0.8)
    want = [f"{intervals.SKEWED_NOTE}; {intervals.FEW_NOTE}", intervals.SKEWED_NOTE, intervals.FEW_NOTE, ""]
    assert t1["top_head_pct_ci_note"].to_list() == want
    assert t1["top_head_pct_heldout_ci_note"].to_list() == want
