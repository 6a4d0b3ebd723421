"""Where a guided scan left unit scores to attribution (`estimated`, engine.guided_scan), every
report that reads whole-model numbers from the scores says so: Table 1's `scores_note` (and the
paper form's note, effective units starred), the heatmap's hatched cells and title line, MIB's
importances, the family-shared stability row. An exact scan's table (no `estimated` column) gives
today's output; a top unit that is estimated is refused."""

import numpy as np
import polars as pl
import pytest
from helpers import model_card

from circuitloc.report.figures import plots
from circuitloc.report.tables.analysis import shared_stability_row
from circuitloc.report.records import TableJob
from circuitloc.report.tables.mib import node_importances
from circuitloc.report.tables.paper import table1_form, table2_form
from circuitloc.report.tables.localization import table1, table2

CARD = model_card(family="f", attention="gqa", n_params=1000, n_layers=1, n_heads=4)


def frames(estimated=None, bound=None):
    """IOI scores of four heads (the last two estimated when asked) and their curves."""
    drops = np.array([0.6, 0.3, 0.2, 0.1])
    s = pl.DataFrame({"unit": [f"L0H{h}" for h in range(4)], "layer": [0] * 4, "head": list(range(4)),
                      "heads": [[h] for h in range(4)], "drop": drops, "damage": drops, "ld_clean": [1.0] * 4,
                      "floor": [0.0] * 4, "n_prompts": [40] * 4, "metric": ["ld"] * 4, "clean_span_lo": [0.9] * 4,
                      "aligned": [float("nan")] * 4})
    if estimated is not None:
        s = s.with_columns(estimated=pl.Series(estimated), drop_bound=pl.Series(bound, dtype=pl.Float64))
    dmg = np.cumsum(drops)
    c = pl.DataFrame({"method": ["ranked"] * 4, "step": [1, 2, 3, 4], "unit": [f"L0H{h}" for h in range(4)],
                      "layer": [0] * 4, "head": [0, 1, 2, 3], "ld": list(1 - dmg), "damage": list(dmg),
                      "clean": [1.0] * 4, "floor": [0.0] * 4, "n_prompts": [100] * 4, "prompts": ["heldout"] * 4,
                      "metric": ["ld"] * 4, "clean_span_lo": [0.9] * 4})
    return s, c


GUIDED = ([False, False, True, True], [float("nan"), float("nan"), 0.25, 0.15])


def test_table1_notes_estimated_scores_and_keeps_the_exact_tables_columns():
    s, c = frames()
    exact = table1("ioi", {"m": CARD}, {"m": s}, {"m": c}, 0.8)
    assert "scores_note" not in exact.columns
    assert "*" not in table1_form(exact)["effective units"][0]
    gs, _ = frames(*GUIDED)
    guided = table1("ioi", {"m": CARD}, {"m": gs}, {"m": c}, 0.8)
    row = guided.row(0, named=True)
    assert row["scores_note"].startswith("guided scan: 2 of 4 unit scores estimated")
    assert row["effective_units"] == exact["effective_units"][0]  # the same numbers, now marked
    paper = table1_form(guided).row(0, named=True)
    assert paper["effective units"].endswith(" *") and "* guided scan: 2 of 4" in paper["note"]
    assert table1_form(exact).row(0, named=True)["note"] == ""


def test_an_estimated_top_unit_is_refused():
    s, c = frames([True, False, False, False], [0.9, float("nan"), float("nan"), float("nan")])
    with pytest.raises(AssertionError, match="top unit L0H0 of a guided scan is not exact"):
        table1("ioi", {"m": CARD}, {"m": s}, {"m": c}, 0.8)


def _hatched(fig) -> int:
    return sum(1 for ax in fig.axes for p in ax.patches if p.get_hatch())


def test_the_heatmap_hatches_estimated_cells_and_says_so():
    s, _ = frames()
    gs, _ = frames(*GUIDED)
    fig = plots.heatmaps({"a": s, "b": gs}, title="ioi")
    assert _hatched(fig) == 2 and plots.ESTIMATED_NOTE in fig._suptitle.get_text()
    fig = plots.heatmaps({"a": s}, title="ioi")
    assert _hatched(fig) == 0 and fig._suptitle.get_text() == "ioi"


def test_mib_importances_and_shared_stability_name_the_estimates():
    s, _ = frames()
    gs, _ = frames(*GUIDED)
    doc = node_importances(CARD, gs, TableJob("ioi", "zero-query"))
    assert doc["circuitloc"]["estimated"] == ["L0H2", "L0H3"]
    assert "estimated" not in node_importances(CARD, s, TableJob("ioi", "zero-query"))["circuitloc"]
    row, _ = shared_stability_row("facts", "m", "gqa", "zero-query", gs, s)
    assert "guided scan" in row["note"]
    assert "note" not in shared_stability_row("facts", "m", "gqa", "zero-query", s, s)[0]


def test_table2_notes_estimated_scores_where_it_reads_them():
    s, c = frames()
    gs, _ = frames(*GUIDED)
    ctrl = pl.DataFrame({"draw": [0], "unit": ["L0H1"], "layer": [0], "head": [1], "ld": [0.7], "drop": [0.3]})
    exact = table2("ioi", {"m": CARD}, {"m": c}, {"m": ctrl}, {"m": s})
    guided = table2("ioi", {"m": CARD}, {"m": c}, {"m": ctrl}, {"m": gs})
    assert "scores_note" not in exact.columns and table2_form(exact)["note"][0] == ""
    assert "2 of 4" in guided["scores_note"][0] and "2 of 4" in table2_form(guided)["note"][0]


def test_the_stability_table_says_when_it_compares_only_the_exactly_scored_units(tmp_path):
    """A guided scan's per-prompt table holds the units it scored exactly: the stability rows say so."""
    from helpers import model_card as card_of

    from circuitloc import io
    from circuitloc.report.tables.writers import write_stability

    n = 8
    order = np.array(["ABBA", "BABA"] * (n // 2))
    clean = 4.0 + 0.01 * np.arange(n)
    io.write_parquet(pl.DataFrame({"row": np.arange(n), "clean": clean, "L0H0": clean - 1.0, "L0H1": clean - 0.5}),
                     tmp_path / "pp.parquet")
    io.write_parquet(pl.DataFrame({"order": order, "input_ids": [[1, 2]] * n}), tmp_path / "data.parquet")
    card_of().write(tmp_path / "card.json")
    s, _ = frames()
    gs, _ = frames(*GUIDED)
    notes = {}
    for name, scores in (("exact", s), ("guided", gs)):
        io.write_parquet(scores, tmp_path / f"{name}.parquet")
        entry = {"model": "m", "card": str(tmp_path / "card.json"), "ablation": "zero-query",
                 "scores": str(tmp_path / f"{name}.parquet"), "prompts": str(tmp_path / "pp.parquet"),
                 "dataset": str(tmp_path / "data.parquet")}
        write_stability("ioi", [entry], "zero-query", tmp_path / f"{name}.csv", tmp_path / f"{name}.md")
        notes[name] = io.read_csv(tmp_path / f"{name}.csv")
    assert "note" not in notes["exact"].columns
    assert (notes["guided"]["note"] == "guided scan: over the 2 units scored exactly").all()
