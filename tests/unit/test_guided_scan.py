"""The guided scan's statistics (engine.guided_scan.walk) in simulation: synthetic exact drops and
attribution estimates whose errors are exchangeable across units (several laws, one heavy-tailed,
one whose spread grows with the drop). Over many runs the share of units left unscored whose exact
drop exceeds their bound stays at or below the stated level, and the true top units are scored
exactly; a bound that ignores the audit (q = 0) fails the same check, so the check can fail. One
case makes attribution wrong on purpose for the top unit (ranked last): it is caught only when the
audit draws it, and otherwise it is missed and honestly marked estimated with a bound below it."""

import numpy as np
import polars as pl
import pytest

from circuitloc.engine.guided_scan import conformal_offset, walk
from circuitloc.engine.settings import ScoreSettings, min_audit
from circuitloc.metrics import rank

K, TOP, RUNS = 300, 10, 300
PLAN = ScoreSettings(method="guided", audit=30, level=0.05, top=TOP, batch=16)


def truth(rng):
    """Mostly small drops, a few large ones (a circuit), as real scans look."""
    return rng.exponential(0.02, K) + (rng.random(K) < 0.04) * rng.exponential(0.4, K)


LAWS = {
    "normal": lambda rng, d: rng.normal(0, 0.05, K),
    "laplace": lambda rng, d: rng.laplace(0, 0.04, K),
    "student_t2": lambda rng, d: 0.02 * rng.standard_t(2, K),  # heavy-tailed: infinite variance
    "skewed": lambda rng, d: rng.lognormal(-3, 1, K) - np.exp(-3 + 0.5),  # attribution over- and under-shoots unevenly
    "proportional": lambda rng, d: d * rng.normal(0, 0.5, K),  # the error grows with the effect
}


def simulate(law, runs=RUNS, q_override=None, rig=None):
    """Per run: (violations among the unscored, unscored, not audited, top units missed, top unit exact)."""
    out = []
    for r in range(runs):
        rng = np.random.default_rng(1000 + r)
        d = truth(rng)
        est = d + LAWS[law](rng, d)
        if rig is not None:
            est = rig(d, est)
        w = walk(est, lambda idx, d=d: d[np.asarray(idx, int)], PLAN, rng)
        if q_override is not None:  # the same walk's units, judged against a bound without the audit's q
            w.q = q_override
        skipped = np.array([i for i in range(K) if i not in w.exact], int)
        over = int((d[skipped] > w.bound()[skipped]).sum())
        top = np.argsort(-d)[:TOP]
        out.append((over, len(skipped), K - len(w.audit), sum(int(t) not in w.exact for t in top),
                    int(np.argmax(d)) in w.exact, len(w.exact)))
    return np.array(out, float)


def slack(level, n):
    """Three Monte-Carlo standard errors of a share near `level` over `n` draws (at least 0.01)."""
    return max(0.01, 3 * np.sqrt(level * (1 - level) / n))


ADDITIVE = sorted(set(LAWS) - {"proportional"})


@pytest.mark.parametrize("law", sorted(LAWS))
def test_bound_holds_at_its_level(law):
    """The guarantee (engine.guided_scan): a unit not audited is above its bound with probability
    at most `level`, so the units left unscored hold at most level x the units not audited above
    their bound, on average. Among the unscored alone the share can be higher (they are chosen for
    their low estimates, which go with errors that undershoot: measured 3.1-6.7% at level 5%
    here, against 2.2-3.4% of the units not audited), so it is checked at twice the level, which a bound without the audit fails (below)."""
    res = simulate(law)
    over, skipped, not_audited, _, _, scored = res.T
    assert over.sum() / not_audited.sum() <= PLAN.level + slack(PLAN.level, RUNS * 20), law
    assert over.sum() / skipped.sum() <= 2 * PLAN.level, law
    assert scored.mean() < 0.6 * K, f"{law}: the guided scan saved little ({scored.mean():.0f} of {K} scored)"


@pytest.mark.parametrize("law", ADDITIVE)
def test_the_true_top_units_are_scored_exactly(law):
    """Errors of one law for every unit: each true top unit is missed at most at the level, all
    top N are scored exactly in nearly every run, and the top unit in every run."""
    _, _, _, top_missed, top_exact, _ = simulate(law).T
    assert top_exact.all(), f"{law}: the top unit was left unscored in {int((top_exact == 0).sum())} runs"
    assert top_missed.sum() / (RUNS * TOP) <= PLAN.level, law
    assert (top_missed == 0).mean() >= 0.9, law


def test_errors_that_grow_with_the_effect_weaken_the_top_guarantee():
    """Attribution off by 50% of each unit's own drop: the residuals are still exchangeable, so the
    bound holds on average (above), but the audit draws mostly small units, whose errors are small,
    and a large unit whose estimate falls near zero looks like them. Measured: each top-10 unit
    missed in about 5% of runs, all ten scored in about 60%, the top unit in about 97%. Not a
    guarantee the bound gives: the top N are protected only per unit at `level`, marginally."""
    _, _, _, top_missed, top_exact, _ = simulate("proportional").T
    assert top_exact.mean() >= 0.9
    assert top_missed.sum() / (RUNS * TOP) <= 2 * PLAN.level


def test_a_bound_without_the_audit_fails_the_same_check():
    """q = 0 (the estimate taken as the bound): the check above rejects it, so it can fail."""
    res = simulate("normal", runs=100, q_override=0.0)
    assert res[:, 0].sum() / res[:, 2].sum() > 3 * PLAN.level
    assert res[:, 0].sum() / res[:, 1].sum() > 3 * PLAN.level


def test_attribution_wrong_on_the_top_unit_is_caught_only_by_the_audit():
    """The top unit's estimate is put below every other: not exchangeable with the rest, so the
    bound does not cover it. When the audit draws it, its residual widens q past every gap and the
    scan scores it (and most units); when not, the scan misses it, reports another top unit, and
    the table says so: the unit is estimated, its bound below its true drop."""
    caught = missed = 0
    for r in range(60):
        rng = np.random.default_rng(5000 + r)
        d = truth(rng)
        d[0] = d.max() + 0.5  # the top unit, by a wide margin
        est = d + rng.normal(0, 0.05, K)
        est[0] = est.min() - 1.0
        w = walk(est, lambda idx, d=d: d[np.asarray(idx, int)], PLAN, rng)
        if 0 in w.audit:
            caught += 1
            assert 0 in w.exact and w.q > 1.0 and len(w.exact) > K // 2
        else:
            missed += 1
            assert 0 not in w.exact and w.bound()[0] < d[0]
            scored = pl.DataFrame({"unit": [f"u{i}" for i in range(K)], "layer": list(range(K)), "head": [0] * K,
                                   "drop": [w.exact.get(i, w.est[i]) for i in range(K)],
                                   "estimated": [i not in w.exact for i in range(K)], "drop_bound": w.bound()})
            assert rank(scored)["unit"][0] != "u0"  # the reported top unit is another one, exact
            assert not rank(scored)["estimated"][0]
    assert caught and missed  # both outcomes occur (the audit draws 30 of 300: about 10%)


def test_rank_puts_the_exact_top_units_before_any_estimate():
    """An estimate above the exact top (attribution overshoots, q < 0) still ranks below its bound."""
    df = pl.DataFrame({"unit": ["a", "b", "c", "d"], "layer": [0, 0, 1, 1], "head": [0, 1, 0, 1],
                       "drop": [1.0, 5.0, 0.8, 0.1], "estimated": [False, True, False, True],
                       "drop_bound": [float("nan"), 0.5, float("nan"), 0.05]})
    assert rank(df)["unit"].to_list() == ["a", "c", "b", "d"]
    assert rank(df.drop("estimated", "drop_bound"))["unit"].to_list() == ["b", "a", "c", "d"]  # exact tables: as before


def test_conformal_offset_is_the_upper_quantile_and_refuses_too_few():
    r = np.arange(1, 20, dtype=float)  # 19 residuals at level 0.05: the 19th smallest, the largest
    assert conformal_offset(r, 0.05) == 19.0
    assert conformal_offset(np.arange(1, 41, dtype=float), 0.05) == 39.0  # ceil(0.95 * 41) = 39
    assert conformal_offset(np.append(r, np.nan), 0.05) == np.inf  # a non-finite residual only widens
    with pytest.raises(ValueError, match="scores.audit"):
        conformal_offset(r[:18], 0.05)
    assert min_audit(0.05) == 19 and min_audit(0.1) == 9
    with pytest.raises(ValueError, match="scores.audit 10 is below 19"):
        ScoreSettings(method="guided", audit=10, level=0.05)


def test_every_unit_scored_when_the_audit_takes_them_all():
    rng = np.random.default_rng(0)
    d = rng.random(12)
    w = walk(d + 1.0, lambda idx: d[np.asarray(idx, int)], PLAN, rng)
    assert w.scored == list(range(12)) and np.isnan(w.q)
