"""Can the sweep's primary family say "yes" at all? Checked while the workflow is planned, before a
toy is trained (standard library only).

A primary verdict "yes" needs both of its tests significant after adjustment within the primary
family: the top head score's paired t-test and the heads-to measure's exact sign-flip test. The
t-test's p can be as small as the data make it; the sign-flip test's cannot: with m pairs whose
difference is not zero its smallest p is 2 / 2^m. The threshold it must pass is the one it faces
when one comparison's difference stands alone in a family of N tests (the others null): that
comparison's two tests are the family's two smallest p-values, and the sign-flip test is at best the
second, which Holm rejects below alpha / (N - 1) and Benjamini-Hochberg at or below 2 alpha / N
(`yes_threshold`). A sweep whose seeds cannot bring 2 / 2^seeds under that threshold cannot give a
"yes" to any comparison of the family on its own: `check_sweep_power` refuses it in one line, naming
the comparison and the seeds it would need.

The same arithmetic gives each comparison's minimum detectable effect on the heads-to side
(`min_concordant`, `concordance_for_power`; report.sweep.mde writes them into the overview)."""

from __future__ import annotations

import math

from circuitloc.errors import ConfigError
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.jobs.targets import sweep_adjust_with, sweep_pairs
from circuitloc.plan.config.views import CURVE_DEFAULTS, curve_config, sweep_models

POWER = 0.8  # the power at which a minimum detectable effect is stated


def min_sign_flip_p(m: int) -> float:
    """The smallest two-sided p of the exact sign-flip test with m untied pairs: 2 / 2^m (1 for m <= 1)."""
    return 1.0 if m < 1 else min(1.0, 2.0 / 2 ** m)


def yes_threshold(alpha: float, n_tests: int, p_adjust: str = "holm") -> float:
    """The raw p below which the second-smallest p of a family of `n_tests` is significant when the
    two smallest are one comparison's and every other test is null: Holm alpha / (n - 1) (its
    adjusted p is max(n p1, (n - 1) p2)), Benjamini-Hochberg 2 alpha / n."""
    if n_tests <= 1:
        return alpha
    return alpha / (n_tests - 1) if p_adjust == "holm" else 2 * alpha / n_tests


def sign_test_p(k: int, m: int) -> float:
    """Two-sided p of the sign-flip test when k of m untied pairs point one way and every difference
    has the same size (the sign test): P(|2B - m| >= |2k - m|), B ~ Binomial(m, 1/2)."""
    if m < 1:
        return 1.0
    dev = abs(2 * k - m)
    return min(1.0, sum(math.comb(m, b) for b in range(m + 1) if abs(2 * b - m) >= dev) / 2 ** m)


def min_concordant(m: int, threshold: float) -> int | None:
    """The fewest of m untied pairs that must point one way for the sign test's p to fall below
    `threshold` (None: not even all m do)."""
    return next((k for k in range((m + 1) // 2, m + 1) if sign_test_p(k, m) < threshold), None)


def concordance_for_power(m: int, k: int | None, power: float = POWER) -> float | None:
    """The smallest chance q that an untied pair points the tested way at which at least k of m do
    with probability `power`: P(Binomial(m, q) >= k) >= power (bisection; None when k is)."""
    if k is None or m < 1:
        return None

    def reach(q: float) -> float:
        return sum(math.comb(m, b) * q ** b * (1 - q) ** (m - b) for b in range(k, m + 1))

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if reach(mid) < power else (lo, mid)
    return hi


def seeds_needed(threshold: float) -> int:
    """The fewest untied pairs whose smallest sign-flip p is below `threshold`."""
    m = 1
    while min_sign_flip_p(m) >= threshold:
        m += 1
    return m


def _measures_run(curves: dict) -> set:
    """The sweep measures a toy's curves give a test: top head where held out, heads-to of each curve
    method, the curve area (ranked curve), CPR and CMD where the sufficiency curve runs."""
    methods = set(curves.get("methods") or ())
    out = {f"heads_to_{m}" for m in methods}
    out |= {"top_head"} if curves["prompts"] == "heldout" else set()  # the schema's default where unset
    out |= {"curve_area"} if "ranked" in methods else set()
    return out | ({"cpr", "cmd"} if {**CURVE_DEFAULTS, **curves}["sufficiency"] else set())


def primary_comparisons(config: dict) -> list[dict]:
    """Every primary comparison the run's sweep makes (task, ablation, size, KV heads against MHA's,
    which of its verdict's measures are run and primary), and per comparison `n_primary`, its
    primary tests; tables that `sweep.adjust_with` adds count for their tasks."""
    sweep = config.get("sweep") or {}
    primary = sweep["primary"]  # the schema's default fills it and its keys
    units, kinds, measures = primary["units"], primary["kinds"], set(primary["measures"])
    toys = sweep_models(config)
    pairs = sweep_pairs(config)
    extra = [tuple(k.split("/", 1)) for k in sweep_adjust_with(config)]
    out = []
    for task, ablation in pairs + extra:
        kind, unit = registry.parse_ablation(ablation)
        if kind not in kinds or unit not in units or unit == "kv":  # kv: a fewer-KV toy has fewer groups
            continue
        base = task.split(" (")[0]  # 'facts (accuracy)': another run's facts
        run = _measures_run(curve_config(config, base, toys[0])) if toys else set()
        heads_to = "heads_to_greedy" if "heads_to_greedy" in run else "heads_to_ranked"
        for size, arch in sweep["sizes"].items():
            heads = int(arch.get("n_heads", sweep["recipe"].get("n_heads", 8)))
            for kv in arch.get("kv_heads", sweep["kv_heads"]):
                if int(kv) != heads:
                    out.append({"task": task, "ablation": ablation, "size": size, "kv_heads": int(kv),
                                "vs_kv_heads": heads, "heads_to": heads_to, "n_primary": len(run & measures),
                                "verdict_primary": {"top_head", heads_to} <= run & measures})
    return out


def check_sweep_power(config: dict) -> None:
    """Refuse, in one line, a sweep whose primary family cannot give any comparison a "yes": the
    verdict's exact sign-flip test cannot reach `yes_threshold` with the configured seeds (module
    docstring). `sweep.power_check: false` plans it anyway."""
    sweep = config.get("sweep") or {}
    if not sweep or not sweep.get("power_check", True):
        return
    rows = primary_comparisons(config)
    verdicts = [r for r in rows if r["verdict_primary"]]
    if not verdicts:
        return
    n_tests = sum(r["n_primary"] for r in rows)
    alpha, adjust = float(sweep.get("alpha", 0.05)), str(sweep.get("p_adjust", "holm"))
    threshold, seeds = yes_threshold(alpha, n_tests, adjust), len(sweep["seeds"])
    if min_sign_flip_p(seeds) < threshold:
        return
    r = verdicts[0]
    level = f"{alpha:g}/{n_tests - 1}" if adjust == "holm" else f"2 x {alpha:g}/{n_tests}"
    raise ConfigError(
        f"config: sweep.seeds: {seeds} seeds cannot give a primary \"yes\": the exact sign-flip test of "
        f"{r['heads_to']} ({r['task']}, {r['ablation']}, size {r['size']}, KV {r['kv_heads']} vs {r['vs_kv_heads']}, "
        f"and {len(verdicts) - 1} other primary comparisons alike) reaches at best p = 2/2^{seeds} = "
        f"{min_sign_flip_p(seeds):.3g}, and a yes needs p < {level} = {threshold:.3g} ({adjust} over the "
        f"{n_tests} primary tests): it needs at least {seeds_needed(threshold)} seeds (or a smaller sweep.primary; "
        "sweep.power_check: false plans it anyway)")
