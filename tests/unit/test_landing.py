"""The report's first page (circuitloc.report.pages.landing): its tables are text, never markup, and the
page renders as reStructuredText without a warning; the report opens on it once a run wrote it."""

import os

import polars as pl
import pytest
from docutils.core import publish_parts

from circuitloc.plan.hooks.html_report import report_text
from circuitloc.report.pages.landing import landing, rst_table


def _html(rst: str) -> str:
    # halt on any warning: a malformed table or an unescaped cell fails here
    return publish_parts(rst, writer="html", settings_overrides={"halt_level": 2})["html_body"]


def test_cells_are_text_not_markup():
    df = pl.DataFrame({"claim": ["*not bold* and `code` and L1H2_ and |sub|", "- not a list"],
                       "value": [0.123456, float("nan")]})
    html = _html(rst_table(df, "T"))
    assert "<em>" not in html and "<code" not in html and "<ul" not in html
    assert "*not bold* and `code` and L1H2_ and |sub|" in html and "- not a list" in html
    assert "<td>0.1235</td>" in html


def test_the_page_leads_with_the_claims_then_table1(tmp_path):
    claims = pl.DataFrame({"claim_id": ["a"], "claim": ["GQA top head 4-8x MHA's"], "models": ["toy_mha, toy_gqa"],
                           "measured": ["5.1x"], "interval": ["[3.0, 9.2]"], "verdict": ["holds"], "reason": [""]})
    page = landing(claims, None, ("ioi", "zero-query"), [], "The workflow.\\n")
    html = _html(page)
    assert html.index("GQA top head 4-8x") < html.index("The workflow.")
    assert "<td>holds</td>" in html and "claim_id" not in html


def test_report_opens_on_the_landing_once_written(tmp_path, monkeypatch):
    root = tmp_path / "checkout"
    monkeypatch.chdir(tmp_path)
    assert report_text(root) == os.path.join(root, "report", "workflow.rst")
    (tmp_path / "results" / "report").mkdir(parents=True)
    (tmp_path / "results" / "report" / "landing.rst").write_text("x")
    assert report_text(root) == str(tmp_path / "results" / "report" / "landing.rst")


@pytest.mark.parametrize("empty", [pl.DataFrame({"claim": []}), pl.DataFrame()])
def test_an_empty_table_is_said(empty):
    assert "no rows" in _html(rst_table(empty, "T"))


def test_a_figure_is_embedded_whole(tmp_path):
    """A figure's data URI runs over many short lines (docutils refuses a line over 10,000 chars) and
    comes back whole in the page."""
    import base64

    from circuitloc.report.pages.landing import Figure, figure_rst

    png = tmp_path / "f.png"
    png.write_bytes(bytes(range(256)) * 200)
    html = _html(figure_rst(Figure(str(png), "F", "read it")))
    assert base64.b64encode(png.read_bytes()).decode() in html
