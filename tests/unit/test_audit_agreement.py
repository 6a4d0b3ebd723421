"""The guided greedy's audit a reader sees: from a curve file's audited steps (`audit_agrees`,
engine.greedy) Table 2 gets the share where attribution's pick was the exact best, with its exact
(Clopper-Pearson) 95% interval, per model; its markdown and HTML show it; a curve that was not
guided says so instead of a number."""

import math

import polars as pl
import pytest
from helpers import model_card

from circuitloc import intervals, io
from circuitloc.intervals import clopper_pearson
from circuitloc.report.records import TableFiles, TableJob
from circuitloc.report.tables.paper import table2_form
from circuitloc.report.tables.writers import write_table2

CARD = model_card(family="f", attention="gqa", n_params=1000, n_layers=1, n_heads=4)


def _binom_tail(k: int, n: int, p: float, upper: bool) -> float:
    """P(X >= k) (upper) or P(X <= k) for X ~ Binomial(n, p), summed term by term."""
    ks = range(k, n + 1) if upper else range(0, k + 1)
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in ks)


def curve(greedy: list[tuple]) -> pl.DataFrame:
    """A curve file: two ranked steps and greedy steps given as (chosen_by, audited, audit_agrees),
    the columns null where a step has no such value, as engine.greedy writes them."""
    rows = [{"method": "ranked", "step": s, "unit": f"L0H{s - 1}", "layer": 0, "head": s - 1, "ld": 1.0 - 0.4 * s,
             "damage": 0.4 * s, "clean": 1.0, "floor": 0.0, "n_prompts": 100, "prompts": "heldout", "metric": "ld",
             "clean_span_lo": 0.9} for s in (1, 2)]
    for s, (by, audited, agrees) in enumerate(greedy, 1):
        row = {**rows[0], "method": "greedy", "step": s, "chosen_by": by, "audited": audited}
        rows.append(row if agrees is None else {**row, "audit_agrees": agrees, "audit_gap": 0.0 if agrees else 0.2})
    return io.frame(rows)


# audited steps 1, 3, 4 and 6 (attribution's pick was the best on 1, 4 and 6), guided steps 2 and 5
GUIDED = [("exact", True, True), ("guided", False, None), ("exact", True, False), ("exact", True, True),
          ("guided", False, None), ("exact", True, True)]


def test_the_share_and_its_exact_interval_from_the_audit_flags(tmp_path):
    io.write_parquet(curve(GUIDED), tmp_path / "curve.parquet")  # through the file, as the table job reads it
    got = intervals.audit_agreement(io.read_parquet(tmp_path / "curve.parquet"))
    assert (got["n_guided_steps"], got["n_audited_steps"], got["n_audit_agrees"]) == (2, 4, 3)
    assert got["audit_agree_pct"] == pytest.approx(75.0)
    lo, hi = got["audit_agree_pct_lo"] / 100, got["audit_agree_pct_hi"] / 100
    # Clopper-Pearson by its definition: each tail of the binomial at a bound holds 2.5%
    assert _binom_tail(3, 4, lo, upper=True) == pytest.approx(0.025, abs=1e-9)
    assert _binom_tail(3, 4, hi, upper=False) == pytest.approx(0.025, abs=1e-9)
    assert 0 < lo < 0.75 < hi < 1


def test_the_interval_at_its_ends_and_with_no_audited_step():
    assert clopper_pearson(5, 5) == pytest.approx((0.025 ** (1 / 5), 1.0))  # all agree: lo = (alpha/2)^(1/n)
    assert clopper_pearson(0, 5) == pytest.approx((0.0, 1 - 0.025 ** (1 / 5)))
    lo, hi = clopper_pearson(0, 0)
    assert math.isnan(lo) and math.isnan(hi)
    assert clopper_pearson(3, 4, 0.8)[0] > clopper_pearson(3, 4)[0]  # a lower level, a narrower interval


def test_a_curve_that_was_not_guided_has_no_share():
    exact = intervals.audit_agreement(curve([("exact", False, None)] * 3))
    assert (exact["n_guided_steps"], exact["n_audited_steps"], exact["n_audit_agrees"]) == (0, 0, 0)
    assert all(math.isnan(exact[k]) for k in ("audit_agree_pct", "audit_agree_pct_lo", "audit_agree_pct_hi"))
    ranked_only = intervals.audit_agreement(curve([]).drop("chosen_by", "audited", strict=False))
    assert ranked_only["n_audited_steps"] == 0 and math.isnan(ranked_only["audit_agree_pct"])
    blind = intervals.audit_agreement(curve([("guided", False, None)] * 3))  # greedy_audit: 0
    assert blind["n_guided_steps"] == 3 and blind["n_audited_steps"] == 0
    screened = intervals.audit_agreement(curve([("screened", False, None)] * 2))  # a screened greedy's shortlist
    assert screened["n_guided_steps"] == 2 and screened["n_audited_steps"] == 0


def test_table2_shows_the_audit_per_model_in_its_csv_markdown_and_page(tmp_path):
    ctrl = pl.DataFrame({"draw": [0], "unit": ["L0H1"], "layer": [0], "head": [1], "ld": [0.7], "drop": [0.3]})
    models = {"guided": GUIDED, "blind": [("guided", False, None)] * 2, "exact": [("exact", False, None)] * 2}
    cards, curves, controls = {}, {}, {}
    for m, steps in models.items():
        CARD.write(tmp_path / f"{m}.json")
        io.write_parquet(curve(steps), tmp_path / f"{m}_curve.parquet")
        io.write_parquet(ctrl, tmp_path / f"{m}_ctrl.parquet")
        cards[m], curves[m], controls[m] = (str(tmp_path / f"{m}{s}") for s in (".json", "_curve.parquet",
                                                                                "_ctrl.parquet"))
    out = TableFiles(str(tmp_path / "t2.csv"), str(tmp_path / "t2.md"))
    write_table2(TableJob("ioi", "zero-query"), cards, curves, controls, out)
    df = io.read_csv(out.csv)
    assert df["n_audited_steps"].to_list() == [4, 0, 0] and df["n_audit_agrees"].to_list() == [3, 0, 0]
    lo, hi = clopper_pearson(3, 4)
    shown = f"3 of 4: 75% [{100 * lo:.0f}, {100 * hi:.0f}]"
    assert table2_form(df)["audit agrees"].to_list() == [shown, "no audited steps", "not guided"]
    md = (tmp_path / "t2.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| model"))
    assert "audit agrees" in header and shown in md and "not guided" in md and "Clopper-Pearson" in md
    assert shown in (tmp_path / "t2.html").read_text()
    assert len(table2_form(df).columns) <= 12
