"""The table layer is polars: no pandas in the library, and its CSV, parquet and markdown writers
keep what the pandas writers kept (empty NaN, True / False, list columns, the same sampled rows)."""

import re
from pathlib import Path

import numpy as np
import polars as pl

from circuitloc import io
from circuitloc.report.tables.localization import to_markdown
from circuitloc.tasks.common import sample_rows

SRC = Path(__file__).resolve().parents[2] / "src" / "circuitloc"
# plots.py hands seaborn what it needs at the plotting boundary (its own engineer's file)
PLOTTING_BOUNDARY = {"plots.py"}
PANDAS = re.compile(r"^\s*(import pandas|from pandas\b)|\bpd\.", re.MULTILINE)


def test_library_has_no_pandas():
    found = [f"{p.relative_to(SRC)}:{text[: m.start()].count(chr(10)) + 1}"
             for p in sorted(SRC.rglob("*.py")) if p.name not in PLOTTING_BOUNDARY
             for text in [p.read_text()] for m in PANDAS.finditer(text)]
    assert not found, f"pandas in the library (polars is the table layer): {found}"


def test_csv_writes_nan_empty_and_booleans_as_before(tmp_path):
    df = pl.DataFrame({"x": [1.5, float("nan"), None], "ok": [True, False, None], "h": ["4", "> 8", "2"],
                       "top_head": ["0.3", "1.10", "L2"]})
    io.write_csv(df, tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().splitlines() == ["x,ok,h,top_head", "1.5,True,4,0.3",
                                                             ",False,> 8,1.10", ",,2,L2"]
    back = io.read_csv(tmp_path / "t.csv", text=("h", "top_head"))
    assert back["top_head"].to_list() == ["0.3", "1.10", "L2"] and back["h"].dtype == pl.String


def test_parquet_list_columns_round_trip(tmp_path):
    df = pl.DataFrame({"input_ids": [[1, 2, 3], [4]], "score": [True, False]})
    io.write_parquet(df, tmp_path / "d.parquet")
    back = io.read_parquet(tmp_path / "d.parquet", ("input_ids",))
    assert back["input_ids"].to_list() == [[1, 2, 3], [4]] and back.equals(df)


def test_markdown_formats_floats_and_leaves_missing_empty():
    md = to_markdown(io.frame([{"m": "a", "v": 0.123456, "n": 3, "b": True}, {"m": "b", "v": float("nan"), "n": 4,
                                                                               "b": None}]), "T")
    lines = md.splitlines()
    assert lines[0] == "### T" and "0.1235" in lines[4] and "True" in lines[4]
    assert [c.strip() for c in lines[5].strip("|").split("|")] == ["b", "", "4", ""]


def test_sample_rows_picks_the_rows_pandas_sample_picked():
    # pandas' DataFrame.sample(n=k, random_state=seed) is RandomState(seed).choice(n, k, replace=False)
    assert sample_rows(10, 4, 3).tolist() == np.random.RandomState(3).choice(10, 4, replace=False).tolist()
    assert sorted(sample_rows(7, 7, 0).tolist()) == list(range(7))


def test_frame_unions_keys_and_keeps_numpy_booleans():
    df = io.frame([{"a": 1, "b": np.bool_(True)}, {"a": 2.5, "c": "x"}])
    assert df.columns == ["a", "b", "c"] and df.schema["a"] == pl.Float64 and df.schema["b"] == pl.Boolean
