"""The sweep's README paragraph and docs table are written from its overview (report/sweep/text.py):
comparisons are counted as comparisons, significance as significance, and each percentage comes with
its clean baseline."""

import polars as pl
import pytest
from test_sweep import _paired_row

from circuitloc.errors import ArtifactError
from circuitloc.report.sweep import stability
from circuitloc.report.sweep import text as sweep_text
from circuitloc.report.sweep.verdicts import overview


def _overview():
    """Three primary comparisons: 'yes' (both tests p 0.001), 'partial' (top head only) and no clear
    difference; CPR significantly lower in the first, higher in the second, not in the third."""
    rows = [_paired_row("small", 30.0, 0.001, 0.001, 0.5, wins=10, losses=0),
            _paired_row("dh32", 20.0, 0.001, 0.6, 0.5, wins=4, losses=3),
            _paired_row("dh32pm", 2.0, 0.7, 0.8, 0.5, wins=3, losses=3)]
    for r, (d, p), s in zip(rows, [(-0.2, 0.001), (0.1, 0.002), (-0.05, 0.6)], [1.0, 0.55, 0.9], strict=True):
        r.update({"cpr_diff": d, "cpr_p": p, "cpr_p_holm": p, "verdict_stability": s})
    tables = {("ioi", "zero-query"): pl.DataFrame(rows)}
    ov = stability.beside_overview(overview(tables), tables)  # no per-model rows: verdict_all's is null
    assert ov["verdict_all_stability"].null_count() == 3
    # verdict_all's own stability, as overview_stability would give it (the table's differs on purpose)
    return ov.with_columns(verdict_all_stability=pl.Series([0.97, 0.61, 0.88]))


def test_the_paragraph_counts_comparisons_significance_and_names_unstable_verdicts():
    ov = _overview()
    assert ov["n_tests_primary_all"][0] == 6
    text = sweep_text.paragraph(ov)
    assert "Of its 3 primary comparisons" in text and "6 tests" in text
    assert '1 of 3 say "fewer KV heads more concentrated: yes"' in text
    # a partial verdict names its measure and its direction, and the heads-to measure is named once
    # with the stability of the verdict it names (verdict_all's, not its table's 0.55), worded as what it is
    assert "ioi at dh32: partial (top head significant: fewer-KV more concentrated), in 61% of seed resamples" in text
    assert "greedy greedy" not in text
    assert "stable" not in text.lower() and "0.8" not in text  # no threshold that no simulation supports
    # CPR: 2 of 3 significant after the exploratory correction, one each way (not "lower in all three")
    assert "in 2 of 3 comparisons (1 lower, 1 higher for the fewer-KV toy)" in text


def test_the_table_quotes_each_percentage_with_its_clean_metric_and_the_stability():
    md = sweep_text.table(_overview())
    lines = md.splitlines()
    assert len(lines) == 2 + 3
    assert "| ioi | small (KV 1 vs 8) | ld 5 / 4 | 20 → 50 | +30 [29, 31] |" in lines[2]
    cells = [c.strip() for c in lines[3].rstrip(" |").split("|")]
    # verdict_all's stability (0.61), not verdict_table's (0.55), then the minimum detectable effect
    assert cells[-3] == "0.61" and "0.55" not in lines[3]
    assert "share of seed resamples giving it" in lines[0] and "minimum detectable effect" in lines[0]


def test_fill_replaces_between_markers_and_names_missing_ones():
    doc = "a\n<!-- sweep_summary:begin -->\nold 27% → 76%\n<!-- sweep_summary:end -->\nb"
    out = sweep_text.fill(doc, "sweep_summary", "new", "Measured on ...")
    assert out == "a\n<!-- sweep_summary:begin -->\nMeasured on ...\n\nnew\n<!-- sweep_summary:end -->\nb"
    with pytest.raises(ArtifactError, match="sweep_primary:begin"):
        sweep_text.fill(doc, "sweep_primary", "new", "n")


def test_the_shipped_documents_have_the_markers():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    for doc, name in (("README.md", "sweep_summary"), ("docs/sweep.md", "sweep_primary")):
        text = (root / doc).read_text()
        assert f"<!-- {name}:begin -->" in text and f"<!-- {name}:end -->" in text, doc


def test_verdict_words_carry_measure_and_direction():
    """Two partial verdicts on different measures or in opposite directions read differently."""
    less = "partial: top head significant (says fewer KV less concentrated), heads-to not (points the same way)"
    more = "partial: heads-to significant (says fewer KV more concentrated), top head not (points the same way)"
    assert sweep_text.words(less) == "partial (top head significant: fewer-KV less concentrated)"
    assert sweep_text.words(more) == "partial (heads-to significant: fewer-KV more concentrated)"
    assert sweep_text.words("no clear difference (holm-adjusted alpha 0.05)") == "no clear difference"
