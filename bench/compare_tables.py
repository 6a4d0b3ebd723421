"""Do two runs' results agree? Compares the tables (and with --all the scores and curves) of two
results directories: "the default run's tables equal a run of the previous code".

    python bench/compare_tables.py OLD/results NEW/results [--rtol 1e-6] [--atol 1e-6] [--all]

Every tables/*.csv (with --all also scores/**/*.parquet and curves/**/*.parquet) of either side:
the same files, the same columns (added and removed columns are reported apart), the same row
count and keys (the leading non-numeric columns: model, task, ...), numeric columns within
|new - old| <= atol + rtol * |old|, every other column equal; nulls and NaNs must sit in the same
cells. CSV cells are read as text, so labels that look like numbers (top_head 0.10 vs 0.1) are
never equal by value alone: a numeric cell whose text differs must differ by a nonzero amount within
tolerance, not be the same number written otherwise. The run's cost table (timings) is skipped.

One line per file (equal / differs: column, max abs diff, first differing row), then a summary.
Exit status 0 only if everything matched.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import polars as pl

SKIP = {"tables/cost.csv"}  # timings of the run: never equal
MAX_ROWS_SHOWN = 3


def files(root: Path, all_: bool) -> set[str]:
    found = {p.relative_to(root).as_posix() for p in (root / "tables").glob("*.csv")}
    if all_:
        for sub in ("scores", "curves"):
            found |= {p.relative_to(root).as_posix() for p in (root / sub).rglob("*.parquet")}
    return found


def read(path: Path) -> pl.DataFrame:
    if path.suffix == ".csv":  # every cell as text: no inference that could merge distinct labels
        return pl.read_csv(path, infer_schema_length=0)
    return pl.read_parquet(path)


def _as_float(s: pl.Series) -> pl.Series | None:
    """s as Float64 if every non-null value is a number, else None."""
    if s.dtype.is_numeric():
        return s.cast(pl.Float64)
    if s.dtype == pl.String:
        f = s.str.strip_chars().cast(pl.Float64, strict=False)
        if (f.is_null() & s.is_not_null()).any():
            return None
        return f
    return None


def key_columns(a: pl.DataFrame, b: pl.DataFrame, common: list[str]) -> list[str]:
    """The leading columns (in a's order) that are labels on both sides: not floats (parquet), not
    all-numeric text (CSV)."""
    keys = []
    for c in common:
        sa, sb = a[c], b[c]
        if a[c].dtype.is_float() or b[c].dtype.is_float() or isinstance(a[c].dtype, pl.List):
            break
        if sa.dtype == pl.String and (_as_float(sa) is not None and sa.drop_nulls().len() > 0):
            break
        if sb.dtype == pl.String and (_as_float(sb) is not None and sb.drop_nulls().len() > 0):
            break
        keys.append(c)
    return keys


def _key_text(df: pl.DataFrame, keys: list[str], i: int) -> str:
    if not keys:
        return f"row {i}"
    row = df.row(i, named=True)
    return f"row {i} (" + ", ".join(f"{k}={row[k]}" for k in keys) + ")"


def _keys_frame(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    return df.select(pl.col(k).cast(pl.String) for k in keys)


def compare_column(name: str, a: pl.Series, b: pl.Series, rtol: float, atol: float):
    """None if equal, else (max abs diff or None, number of differing rows, first differing index, note)."""
    if a.dtype != b.dtype and not (a.dtype == pl.String or b.dtype == pl.String):
        if not (a.dtype.is_numeric() and b.dtype.is_numeric()):
            return (None, a.len(), 0, f"dtype {a.dtype} -> {b.dtype}")
    fa, fb = _as_float(a), _as_float(b)
    null_diff = (a.is_null() != b.is_null())
    if fa is not None and fb is not None:
        va, vb = fa.to_numpy(), fb.to_numpy()
        import numpy as np

        both = ~(a.is_null() | b.is_null()).to_numpy()
        nan_a, nan_b = np.isnan(va), np.isnan(vb)
        diff = np.abs(vb - va)
        with np.errstate(invalid="ignore"):
            close = (diff <= atol + rtol * np.abs(va)) | (va == vb)  # va == vb: equal infinities
        bad = both & ((nan_a != nan_b) | (~nan_a & ~nan_b & ~close))
        if a.dtype == pl.String and b.dtype == pl.String:  # same number written otherwise: a label change
            same_text = (a == b).fill_null(True).to_numpy()
            bad |= both & ~same_text & (va == vb)
        bad |= null_diff.to_numpy()
        if not bad.any():
            return None
        idx = np.flatnonzero(bad)
        finite = bad & both & ~nan_a & ~nan_b
        mx = float(diff[finite].max()) if finite.any() else None
        note = ""
        if a.dtype == pl.String and b.dtype == pl.String and both[idx[0]] and va[idx[0]] == vb[idx[0]]:
            note = f"text {a[int(idx[0])]!r} -> {b[int(idx[0])]!r}"
        return (mx, len(idx), int(idx[0]), note)
    if a.dtype != b.dtype:
        return (None, a.len(), 0, f"dtype {a.dtype} -> {b.dtype}")
    eq = (a == b) if not isinstance(a.dtype, pl.List) else pl.Series([x == y for x, y in zip(a.to_list(), b.to_list())])
    bad = (~eq.fill_null(False) & ~(a.is_null() & b.is_null())) | null_diff
    if not bad.any():
        return None
    first = int(bad.arg_true()[0])
    return (None, int(bad.sum()), first, f"{a[first]!r} -> {b[first]!r}")


def compare_file(old: Path, new: Path, rtol: float, atol: float) -> tuple[bool, list[str]]:
    """(equal, details) for one file present on both sides."""
    try:
        a, b = read(old), read(new)
    except Exception as e:  # an unreadable file is a difference, not a crash of the whole comparison
        return False, [f"unreadable: {type(e).__name__}: {e}"]
    details, ok = [], True
    removed = [c for c in a.columns if c not in b.columns]
    added = [c for c in b.columns if c not in a.columns]
    if removed:
        ok = False
        details.append(f"columns removed: {', '.join(removed)}")
    if added:
        ok = False
        details.append(f"columns added: {', '.join(added)}")
    common = [c for c in a.columns if c in b.columns]
    if [c for c in b.columns if c in common] != common:
        ok = False
        details.append("column order differs")
    keys = key_columns(a, b, common)
    if a.height != b.height:
        ok = False
        details.append(f"rows {a.height} -> {b.height}")
    if keys:
        ka, kb = _keys_frame(a, keys), _keys_frame(b, keys)
        only_a = ka.join(kb, on=keys, how="anti", nulls_equal=True)
        only_b = kb.join(ka, on=keys, how="anti", nulls_equal=True)
        for what, df in (("only in old", only_a), ("only in new", only_b)):
            if df.height:
                ok = False
                shown = "; ".join(", ".join(f"{k}={v}" for k, v in r.items()) for r in df.head(MAX_ROWS_SHOWN).iter_rows(named=True))
                details.append(f"{df.height} key(s) {what} [{', '.join(keys)}]: {shown}"
                               + (" ..." if df.height > MAX_ROWS_SHOWN else ""))
        unique = ka.is_unique().all() and kb.is_unique().all()
        if not only_a.height and not only_b.height and a.height == b.height and not ka.equals(kb):
            ok = False
            details.append("row order differs (values compared by key)" if unique else "row order differs")
            if unique:  # align new to old by key
                order = ka.with_row_index("_i").join(kb.with_row_index("_j"), on=keys, nulls_equal=True).sort("_i")["_j"]
                b = b[order.to_list()]
    if a.height != b.height:
        if keys and a.height and b.height:  # compare the rows both have, by key, when keys are unique
            ka, kb = _keys_frame(a, keys), _keys_frame(b, keys)
            if ka.is_unique().all() and kb.is_unique().all():
                m = ka.with_row_index("_i").join(kb.with_row_index("_j"), on=keys, nulls_equal=True).sort("_i")
                a, b = a[m["_i"].to_list()], b[m["_j"].to_list()]
        if a.height != b.height:
            return ok, details
    for c in common:
        r = compare_column(c, a[c], b[c], rtol, atol)
        if r is None:
            continue
        ok = False
        mx, n, first, note = r
        parts = [f"column {c}: {n} row(s)"]
        if mx is not None and not math.isnan(mx) and mx > 0:
            parts.append(f"max abs diff {mx:.3g}")
        parts.append(f"first at {_key_text(a, keys, first)}")
        if note:
            parts.append(note)
        elif a[c].dtype != pl.List and a.height:
            parts.append(f"{a[c][first]!r} -> {b[c][first]!r}")
        details.append(", ".join(parts))
    return ok, details


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", type=Path, help="results directory of the reference run")
    ap.add_argument("new", type=Path, help="results directory of the run to check")
    ap.add_argument("--rtol", type=float, default=1e-6)
    ap.add_argument("--atol", type=float, default=1e-6)
    ap.add_argument("--all", action="store_true", help="also scores/**/*.parquet and curves/**/*.parquet")
    ap.add_argument("--quiet", action="store_true", help="print only files that differ, and the summary")
    args = ap.parse_args(argv)
    for d in (args.old, args.new):
        if not (d / "tables").is_dir():
            ap.error(f"{d} has no tables/ folder: give the results directories (…/results)")

    fa, fb = files(args.old, args.all), files(args.new, args.all)
    counts = {"equal": 0, "differs": 0, "only in old": 0, "only in new": 0, "skipped": 0}
    width = max(map(len, fa | fb), default=0)
    for f in sorted(fa | fb):
        if f in SKIP:
            counts["skipped"] += 1
            print(f"{'skipped':8s} {f:{width}s}  (timings of the run)")
            continue
        if f not in fb:
            counts["only in old"] += 1
            print(f"{'MISSING':8s} {f:{width}s}  only in old")
            continue
        if f not in fa:
            counts["only in new"] += 1
            print(f"{'ADDED':8s} {f:{width}s}  only in new")
            continue
        ok, details = compare_file(args.old / f, args.new / f, args.rtol, args.atol)
        counts["equal" if ok else "differs"] += 1
        if ok:
            if not args.quiet:
                print(f"{'equal':8s} {f}")
        else:
            print(f"{'DIFFERS':8s} {f:{width}s}  " + ("\n" + " " * (width + 11)).join(details))
    n = sum(counts.values()) - counts["skipped"]
    matched = counts["equal"] == n
    print(f"\n{n} files compared (rtol {args.rtol:g}, atol {args.atol:g}): "
          + ", ".join(f"{v} {k}" for k, v in counts.items() if v or k == "equal")
          + (" -- everything matched" if matched else " -- DIFFERENCES"))
    return 0 if matched and n > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
