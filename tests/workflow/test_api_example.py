"""The Python API's worked example (docs/api.md), executed as the page prints it: on the tiny
test config it gives the scores table and Table 1 row the workflow's jobs wrote for the same model,
prompts and ablation (the shared tiny run)."""

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


def example_code() -> str:
    """The first python block under '## A worked example' in docs/api.md."""
    section = DOC.read_text().split("## A worked example", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _same(a, b, col) -> None:
    """Equal, floats to float32 rounding (the example runs torch on the process's threads, a job on
    one); a missing value (None, NaN, an empty CSV cell) only against a missing one."""
    missing = [x is None or (isinstance(x, float) and math.isnan(x)) for x in (a, b)]
    if any(missing):
        assert all(missing), (col, a, b)
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, rel=1e-6, abs=1e-9), (col, a, b)
    else:
        assert a == b, (col, a, b)


def _same_frames(got: pl.DataFrame, want: pl.DataFrame) -> None:
    assert got.columns == want.columns and len(got) == len(want)
    for col in want.columns:
        for a, b in zip(got[col].to_list(), want[col].to_list(), strict=True):
            _same(a, b, col)


def test_the_documented_example_equals_the_pipelines_scores_and_table1_row(tiny_run, tmp_path):
    code = example_code()
    assert "run.scores(" in code and "run.table1(" in code  # the page still shows what this compares
    (tmp_path / ".test").symlink_to(ROOT / ".test")  # the config and the toys' paths, as from a checkout
    save = ("\nscores.write_parquet('api_scores.parquet')\ntable1.write_parquet('api_table1.parquet')\n"
            "curves.write_parquet('api_curves.parquet')\n")
    (tmp_path / "example.py").write_text(code + save)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "top_head" in p.stdout  # the example prints Table 1's columns

    results = tiny_run / "results"
    want = pl.read_parquet(results / "scores" / "ioi" / "tiny_mha" / "zero-query.parquet")
    _same_frames(pl.read_parquet(tmp_path / "api_scores.parquet").sort("unit"), want.sort("unit"))
    _same_frames(pl.read_parquet(tmp_path / "api_curves.parquet"),
                 pl.read_parquet(results / "curves" / "ioi" / "tiny_mha" / "zero-query.parquet"))

    row = pl.read_csv(results / "tables" / "table1_ioi_zero-query.csv").filter(pl.col("model") == "tiny_mha")
    got_row = pl.read_parquet(tmp_path / "api_table1.parquet")
    assert len(row) == 1 and len(got_row) == 1
    assert set(row.columns) == set(got_row.columns)
    for col in ("top_head", "top_head_score", "top_head_pct", "top_head_pct_heldout", "heads_to_80",
                "heads_to_80_greedy", "curve_area", "cpr", "cmd", "n_score_prompts", "n_curve_prompts"):
        _same(got_row[col][0], row[col][0], col)
