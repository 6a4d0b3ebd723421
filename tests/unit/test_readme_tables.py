"""The README's Table 1 and claims sections come from a run's tables, between their markers."""

import polars as pl
import pytest

from circuitloc.errors import ArtifactError
from circuitloc.report.pages.readme import fill
from workflow_helpers import ROOT


def _results(tmp_path):
    (tmp_path / "tables").mkdir(parents=True)
    (tmp_path / "tables" / "table1_ioi_zero-query.md").write_text("### Table 1\n\n| model |\n|---|\n| m |\n")
    (tmp_path / "tables" / "claims.md").write_text("### claims\n\n| claim |\n|---|\n| c |\n")
    return tmp_path


def _table1_csv(res, task, metric, baseline, top, pct, note):
    """A one-model Table 1 CSV with the columns the paper form reads."""
    pl.DataFrame({"model": ["m"], "attention": ["gqa"], "n_params": [135e6], "n_units": [270],
                  f"baseline_{metric}": [baseline], "top_head": [top], "top_head_pct_heldout": [pct],
                  "top_head_pct_heldout_lo": [pct - 4], "top_head_pct_heldout_hi": [pct + 4],
                  "heads_to_80_greedy": [2], "heads_to_80_greedy_bounded": [False], "curve_area": [0.99],
                  "effective_units": [53.8], "damage_note": [note]}).write_csv(
        res / "tables" / f"table1_{task}_zero-query.csv")


def test_sections_are_replaced_and_the_rest_kept(tmp_path):
    readme = "intro\n<!-- table1:begin -->\nold\n<!-- table1:end -->\nmid\n<!-- claims:begin -->x<!-- claims:end -->\nend\n"
    out = fill(readme, _results(tmp_path), "Measured on a test.")
    assert "old" not in out and "| m |" in out and "| c |" in out and "### " not in out
    assert out.startswith("intro\n") and "\nmid\n" in out and out.endswith("end\n")
    assert out.count("Measured on a test.") == 2
    assert fill(out, _results(tmp_path / "again"), "Measured on a test.") == out  # idempotent


def test_missing_markers_or_tables_are_errors(tmp_path):
    with pytest.raises(ArtifactError, match="markers <!-- table1:begin -->"):
        fill("no markers", _results(tmp_path), "n")
    readme = (ROOT / "README.md").read_text()
    with pytest.raises(ArtifactError, match="table1_ioi_zero-query.md: missing"):
        fill(readme, tmp_path / "nothing", "n")


def test_the_ladders_sections_are_its_own(tmp_path):
    """`--run ladder` fills the ladder's markers (Table 1 of every task as one table, Table 2,
    claims) and leaves the default run's alone."""
    res = _results(tmp_path)
    (res / "tables" / "table2_ioi_zero-query.md").write_text("### Table 2\n\n| t2 |\n|---|\n| x |\n")
    _table1_csv(res, "ioi", "ld", 4.32, "L23H3", 55.0, "")
    _table1_csv(res, "induction", "icl_loss", 1.5, "L1H5", 74.0, "")
    _table1_csv(res, "facts", "margin", 0.038, "L9H2", float("nan"), "clean metric at its floor")
    readme = ("<!-- table1:begin -->keep<!-- table1:end -->\n"
              + "".join(f"<!-- ladder_{n}:begin -->old<!-- ladder_{n}:end -->\n"
                        for n in ("table1", "table2", "claims")))
    out = fill(readme, res, "Ladder note.", run="ladder")
    assert "keep" in out and "old" not in out and "| t2 |" in out and out.count("Ladder note.") == 3
    tasks = out.split("<!-- ladder_table1:begin -->")[1].split("<!-- ladder_table1:end -->")[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in tasks.splitlines() if line.startswith("| ")]
    header, body = rows[0], rows[1:]
    assert header[:2] == ["task", "model"] and "baseline" in header
    assert [r[0] for r in body] == ["ioi", "induction", "facts"]
    cell = {(r[0], h): v for r in body for h, v in zip(header, r)}
    assert cell[("induction", "baseline")] == "icl_loss 1.5" and cell[("facts", "baseline")] == "margin 0.038"
    assert cell[("induction", "top unit score")] == "74% [70, 78]" and cell[("facts", "top unit score")] == ""
    assert cell[("facts", "note")] == "clean metric at its floor" and cell[("induction", "heads-to-80% (greedy)")] == "2"
    with pytest.raises(ArtifactError, match="markers <!-- ladder_table1:begin -->"):
        fill("<!-- table1:begin --><!-- table1:end -->", res, "n", run="ladder")
