"""An interval's note (widened for skewed prompts, may under-cover with few prompts) is shown where
its number is: Table 1's markdown (the paper form), its report page's visible table, the README's
generated sections, the claims table's interval column and the report's landing page, all rendered
from a results tree whose one model has a flagged top unit."""

import polars as pl
import pytest
from helpers import model_card
from test_conditioning import _frames

from circuitloc import intervals, io
from circuitloc.report.claims import judge as claims
from circuitloc.report.pages.landing import landing
from circuitloc.report.tables.paper import table1_form
from circuitloc.report.pages.readme import fill
from circuitloc.report.tables.localization import table1, write_table

CARDS = {"pm": model_card(name="pm", attention="mha", family="pythia", n_params=10**8, source="gguf"),
         "qg": model_card(name="qg", attention="gqa", family="qwen", n_params=10**8, source="gguf")}
NOTE = intervals.SKEWED_NOTE  # qg's top unit: widened


def _run(tmp_path):
    """results/tables/table1_ioi_zero-query.{csv,md,html} and claims.{csv,md,html}, as the table
    and claims jobs write them, from planted scores and curves; qg's top unit interval widened."""
    scores, curves = {}, {}
    for m, (method, pct) in {"pm": ("studentized", 1.0), "qg": (intervals.WIDENED, 3.0)}.items():
        s, c = _frames(pct, 0.5 * pct)
        iv = {"drop_lo": pl.col("drop") - 0.1, "drop_hi": pl.col("drop") + 0.1,
              "damage_lo": pl.col("damage") - 0.05, "damage_hi": pl.col("damage") + 0.05,
              "damage_ci": pl.lit(method), "damage_ci_undercover": pl.lit(False)}
        scores[m] = s.with_columns(**iv)
        curves[m] = c.with_columns(**{k: v for k, v in iv.items() if k.startswith("damage")})
    t1 = table1("ioi", CARDS, scores, curves, 0.8)
    tables = tmp_path / "tables"
    tables.mkdir()
    csv = tables / "table1_ioi_zero-query.csv"
    write_table(t1, csv, csv.with_suffix(".md"), "Table 1", shown=table1_form(t1))
    run = claims.Run({claims.IOI_T1: io.read_csv(csv)}, CARDS, 0.8)  # read back, as the claims job does
    cl = claims.claims(run)
    write_table(cl, tables / "claims.csv", tables / "claims.md", "claims")
    return t1, cl


def test_table1_markdown_and_its_visible_page_show_the_note(tmp_path):
    t1, _ = _run(tmp_path)
    assert t1.filter(pl.col("model") == "qg")["top_head_pct_heldout_ci_note"][0] == NOTE
    md = (tmp_path / "tables" / "table1_ioi_zero-query.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| qg"))
    assert f"top unit score: {NOTE}" in row
    assert NOTE not in next(line for line in md.splitlines() if line.startswith("| pm"))
    page = (tmp_path / "tables" / "table1_ioi_zero-query.html").read_text()
    visible = page.split("<details>")[0]  # the paper form, above the folded every-column table
    assert f"top unit score: {NOTE}" in visible


def test_the_claims_interval_names_the_note(tmp_path):
    _, cl = _run(tmp_path)
    ratio = cl.filter(pl.col("claim_id") == "ioi_gqa_top_head_ratio").row(0, named=True)
    assert ratio["interval"].startswith("[") and f"(qg: {NOTE})" in ratio["interval"], ratio
    assert f"(qg: {NOTE})" in (tmp_path / "tables" / "claims.md").read_text()


def test_the_readme_sections_show_the_note(tmp_path):
    _run(tmp_path)
    readme = "<!-- table1:begin -->old<!-- table1:end -->\n<!-- claims:begin -->old<!-- claims:end -->\n"
    out = fill(readme, tmp_path, "Measured on a test.")
    table = out.split("<!-- table1:begin -->")[1].split("<!-- table1:end -->")[0]
    assert f"top unit score: {NOTE}" in table
    assert f"(qg: {NOTE})" in out.split("<!-- claims:begin -->")[1]
    tables = tmp_path / "tables"  # the ladder's one table of every task reads each task's CSV
    for task in ("induction", "facts"):
        (tables / f"table1_{task}_zero-query.csv").write_bytes((tables / "table1_ioi_zero-query.csv").read_bytes())
    (tables / "table2_ioi_zero-query.md").write_text("### Table 2\n\n| t2 |\n|---|\n| x |\n")
    ladder = fill("".join(f"<!-- ladder_{n}:begin -->x<!-- ladder_{n}:end -->\n" for n in ("table1", "table2", "claims")),
                  tmp_path, "n", run="ladder")
    rows = [line for line in ladder.split("<!-- ladder_table1:end -->")[0].splitlines() if "| qg" in line]
    assert len(rows) == 3 and all(f"top unit score: {NOTE}" in r for r in rows)


def test_the_landing_page_shows_the_note(tmp_path):
    t1, cl = _run(tmp_path)
    page = landing(cl, t1, ("ioi", "zero-query"), [], "tail")
    assert "interval widened (skewed prompts)" in page.replace("\\", "")


@pytest.mark.parametrize("few, want", [(True, intervals.FEW_NOTE), (False, "")])
def test_a_few_prompts_flag_reaches_table1s_note(few, want):
    s, c = _frames(3.0, 1.5)
    iv = {"damage_lo": pl.col("damage") - 0.05, "damage_hi": pl.col("damage") + 0.05,
          "damage_ci": pl.lit("studentized"), "damage_ci_undercover": pl.lit(few)}
    t1 = table1("ioi", {"qg": CARDS["qg"]}, {"qg": s.with_columns(drop_lo=pl.col("drop"), drop_hi=pl.col("drop"), **iv)},
                {"qg": c.with_columns(**iv)}, 0.8)
    note = table1_form(t1)["note"][0]
    assert (f"top unit score: {want}" in note) if want else note == ""
