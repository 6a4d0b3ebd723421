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
