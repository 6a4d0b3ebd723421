"""The Python API's examples (docs/api.md), executed as the page prints them, one after the other
in one script, on the tiny test config: the worked example gives the scores table, curves and
Table 1 row the workflow's jobs wrote for the same model, prompts and ablation (the shared tiny
run), and the ablations you choose, per-prompt drops, an own metric and a head's attention pattern
equal what the pipeline computed where both compute the same thing."""

import math
import os
import re
import subprocess
import sys

import polars as pl
import pytest
from workflow_helpers import ROOT

pytestmark = pytest.mark.workflow

DOC = ROOT / "docs" / "api.md"
# the page's sections whose code runs, in this order, as one script (a notebook's cells)
SECTIONS = ("A worked example", "Ablating what you choose", "Your own metric", "Attention patterns", "Figures")
# after the page's code: what the test compares, written to files (`curve_unit`: the unit the
# pipeline's resample-query ranked curve ablated first; `ld`: IOI's metric, written as your own)
SAVE = """
import os
scores.write_parquet('api_scores.parquet')
table1.write_parquet('api_table1.parquet')
curves.write_parquet('api_curves.parquet')
one.write_parquet('api_one.parquet')
pair.write_parquet('api_pair.parquet')
drops.write_parquet('api_drops.parquet')
run.per_prompt(model, data, 'L0H5').write_parquet('api_drops_one.parquet')
mine.write_parquet('api_mine.parquet')
def ld(logits, fields):
    i = torch.arange(len(logits))
    return logits[i, fields['io_id']] - logits[i, fields['s_id']]
run.ablate(model, data, 'L0H5', metric=ld).write_parquet('api_own_ld.parquet')
curve_unit = pl.read_parquet(os.environ['RESAMPLE_CURVE']).filter(pl.col('method') == 'ranked', pl.col('step') == 1)
run.ablate(model, data, curve_unit['unit'][0], 'resample-query', prompts='heldout').write_parquet('api_heldout.parquet')
pl.DataFrame({'to_b': [to_b['weight'].mean()], 'rows': [to_b['row'].n_unique()]}).write_parquet('api_to_b.parquet')
"""
INTERVALS = ("drop", "drop_lo", "drop_hi", "damage", "damage_lo", "damage_hi")


def section_code(title: str) -> str:
    """Every python block of the section `## title` of docs/api.md, in order."""
    section = DOC.read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, f"docs/api.md: no python block under '## {title}'"
    return "".join(blocks)


def _same(a, b, col, rel=1e-6) -> None:
    """Equal, floats to float32 rounding (the example runs torch on the process's threads, a job on
    one); a missing value (None, NaN, an empty CSV cell) only against a missing one."""
    missing = [x is None or (isinstance(x, float) and math.isnan(x)) for x in (a, b)]
    if any(missing):
        assert all(missing), (col, a, b)
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=rel, abs=1e-9), (col, a, b)
    else:
        assert a == b, (col, a, b)


def _same_frames(got: pl.DataFrame, want: pl.DataFrame) -> None:
    assert got.columns == want.columns and len(got) == len(want)
    for col in want.columns:
        for a, b in zip(got[col].to_list(), want[col].to_list(), strict=True):
            _same(a, b, col)


@pytest.fixture(scope="module")
def ran(tiny_run, shared_once):
    """The page's code run once a test session (as a notebook would, from a checkout), its frames in
    files (`shared_once`: the module's tests run on both workers, and the script takes seconds)."""

    def build(work):
        work.mkdir()
        code = "".join(section_code(t) for t in SECTIONS)
        (work / ".test").symlink_to(ROOT / ".test")  # the config and the toys' paths, as from a checkout
        (work / "example.py").write_text(code + SAVE)
        curve = tiny_run / "results" / "curves" / "ioi" / "tiny_mha" / "resample-query.parquet"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src"), "RESAMPLE_CURVE": str(curve)}
        p = subprocess.run([sys.executable, "example.py"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=1500)
        assert p.returncode == 0, p.stderr[-3000:]
        (work / "stdout.txt").write_text(p.stdout)

    return shared_once("api_example", build)


def _scores(tiny_run, task="ioi", ablation="zero-query", what="") -> pl.DataFrame:
    return pl.read_parquet(tiny_run / "results" / "scores" / task / "tiny_mha" / f"{ablation}{what}.parquet")


def test_the_documented_example_equals_the_pipelines_scores_and_table1_row(ran, tiny_run):
    code = section_code("A worked example")
    assert "run.scores(" in code and "run.table1(" in code  # the page still shows what this compares
    assert "top_head" in (ran / "stdout.txt").read_text()  # the example prints Table 1's columns
    results = tiny_run / "results"
    want = _scores(tiny_run)
    _same_frames(pl.read_parquet(ran / "api_scores.parquet").sort("unit"), want.sort("unit"))
    _same_frames(pl.read_parquet(ran / "api_curves.parquet"),
                 pl.read_parquet(results / "curves" / "ioi" / "tiny_mha" / "zero-query.parquet"))

    row = pl.read_csv(results / "tables" / "table1_ioi_zero-query.csv").filter(pl.col("model") == "tiny_mha")
    got_row = pl.read_parquet(ran / "api_table1.parquet")
    assert len(row) == 1 and len(got_row) == 1
    # the API names the raw drop top_head_drop (the CSV's top_head_score); every other column alike
    csv_name = {c: c.replace("top_head_drop", "top_head_score", 1) for c in got_row.columns}
    assert "top_head_drop" in got_row.columns and not any(c.startswith("top_head_score") for c in got_row.columns)
    assert set(csv_name.values()) == set(row.columns)
    for col in ("top_head", "top_head_drop", "top_head_drop_lo", "top_head_pct", "top_head_pct_heldout",
                "heads_to_80", "heads_to_80_greedy", "curve_area", "cpr", "cmd", "n_score_prompts",
                "n_curve_prompts"):
        _same(got_row[col][0], row[csv_name[col]][0], col)


def test_a_chosen_unit_is_its_row_of_the_scores_table_and_its_prompts_average_to_it(ran, tiny_run):
    want = _scores(tiny_run).filter(pl.col("unit") == "L0H5")
    one = pl.read_parquet(ran / "api_one.parquet")
    assert one["set"].to_list() == ["L0H5"] and one["interval_note"].to_list() == [""]
    for col in INTERVALS:  # the interval too: the run's bootstrap, the same prompts
        _same(one[col][0], want[col][0], col, rel=1e-5)
    _same(one["n_prompts"][0], want["n_prompts"][0], "n_prompts")

    # per prompt: the prompts file of the score job (clean and each unit's ablated metric per prompt)
    pp = _scores(tiny_run, what=".prompts")
    drops = pl.read_parquet(ran / "api_drops_one.parquet")
    assert drops["row"].to_list() == pp["row"].to_list()
    for col, want_col in (("clean", "clean"), ("ablated", "L0H5")):
        for a, b in zip(drops[col].to_list(), pp[want_col].to_list(), strict=True):
            assert a == pytest.approx(b, rel=1e-5, abs=1e-6), col
    assert drops["drop"].mean() == pytest.approx(one["drop"][0], rel=1e-6)

    pair, pair_pp = pl.read_parquet(ran / "api_pair.parquet"), pl.read_parquet(ran / "api_drops.parquet")
    assert pair["units"].to_list() == [["L0H5", "L1H2"]] and pair["set"].to_list() == ["L0H5+L1H2"]
    assert pair_pp["set"].unique().to_list() == ["L0H5+L1H2"] and len(pair_pp) == want["n_prompts"][0]
    assert pair_pp["drop"].mean() == pytest.approx(pair["drop"][0], rel=1e-6)
    assert pair["drop_lo"][0] < pair["drop"][0] < pair["drop_hi"][0]


def test_an_own_metric_that_is_the_tasks_gives_its_drop_and_another_its_own(ran, tiny_run):
    want = _scores(tiny_run).filter(pl.col("unit") == "L0H5")
    own = pl.read_parquet(ran / "api_own_ld.parquet")
    assert own["metric"][0] == "ld"
    for col in INTERVALS:
        _same(own[col][0], want[col][0], col, rel=1e-5)
    mine = pl.read_parquet(ran / "api_mine.parquet")  # a probability gap: in [-1, 1], not the logit difference
    assert mine["metric"][0] == "prob_gap" and -1 <= mine["clean"][0] <= 1
    assert mine["drop"][0] != pytest.approx(want["drop"][0])
    assert mine["damage"][0] == pytest.approx(mine["drop"][0] / mine["clean"][0], rel=1e-9)


def test_held_out_ablation_equals_the_curves_first_step(ran, tiny_run):
    """The resample ablation of the curve's first unit on the held-out prompts: the ranked curve's
    step 1 (same prompts, same replacement draws)."""
    curve = pl.read_parquet(tiny_run / "results" / "curves" / "ioi" / "tiny_mha" / "resample-query.parquet")
    first = curve.filter(pl.col("method") == "ranked", pl.col("step") == 1)
    got = pl.read_parquet(ran / "api_heldout.parquet")
    assert got["set"][0] == first["unit"][0] and got["prompts"][0] == "heldout"
    assert got["n_prompts"][0] == first["n_prompts"][0]
    for col in ("damage", "damage_lo", "damage_hi"):
        _same(got[col][0], first[col][0], col, rel=1e-5)
    _same(got["clean"][0], first["clean"][0], "clean")


def test_the_attention_pattern_gives_the_induction_scores_attention_to_b(ran, tiny_run):
    want = _scores(tiny_run, task="induction").filter(pl.col("unit") == "L1H3")
    got = pl.read_parquet(ran / "api_to_b.parquet")
    assert got["rows"][0] == want["n_prompts"][0]  # one weight per scoring prompt
    assert got["to_b"][0] == pytest.approx(want["attn_score"][0], rel=1e-5)


def test_the_figures_are_drawn(ran):
    for name in ("scores.png", "curves.png"):
        assert (ran / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
