"""The README's Table 1 and claims sections come from a run's tables, between their markers."""

import pytest

from circuitloc.errors import ArtifactError
from circuitloc.report.readme import fill
from workflow_helpers import ROOT


def _results(tmp_path):
    (tmp_path / "tables").mkdir(parents=True)
    (tmp_path / "tables" / "table1_ioi_zero-query.md").write_text("### Table 1\n\n| model |\n|---|\n| m |\n")
    (tmp_path / "tables" / "claims.md").write_text("### claims\n\n| claim |\n|---|\n| c |\n")
    return tmp_path


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
    """`--run ladder` fills the ladder's markers (Table 1, Table 2, claims) and leaves the default
    run's alone."""
    res = _results(tmp_path)
    (res / "tables" / "table2_ioi_zero-query.md").write_text("### Table 2\n\n| t2 |\n|---|\n| x |\n")
    readme = ("<!-- table1:begin -->keep<!-- table1:end -->\n"
              + "".join(f"<!-- ladder_{n}:begin -->old<!-- ladder_{n}:end -->\n" for n in ("table1", "table2", "claims")))
    out = fill(readme, res, "Ladder note.", run="ladder")
    assert "keep" in out and "old" not in out and "| t2 |" in out and out.count("Ladder note.") == 3
    with pytest.raises(ArtifactError, match="markers <!-- ladder_table1:begin -->"):
        fill("<!-- table1:begin --><!-- table1:end -->", res, "n", run="ladder")
