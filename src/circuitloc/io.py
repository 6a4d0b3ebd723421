"""The artifacts a job reads and writes: parquet and CSV tables, figures, JSON (a model's card:
circuitloc.modelcard), each written atomically (circuitloc.atomic): an artifact either exists whole
or not at all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from circuitloc.atomic import (  # noqa: F401  (one API for jobs)
    atomic_dir,
    atomic_path,
    read_json,
    rebuild_hint,
    write_json,
    write_text,
    writing,
)
from circuitloc.errors import ArtifactError


def read_parquet(path, columns: tuple | list = (), what: str = "table"):
    """A parquet artifact as a polars DataFrame; unreadable (truncated, not parquet) or lacking a
    required column is an ArtifactError naming the file, the problem and the missing columns."""

    try:
        df = pl.read_parquet(path)
    except FileNotFoundError as e:
        raise ArtifactError(f"{path}: no such file") from e
    except Exception as e:  # noqa: BLE001 - polars / pyarrow raise several types for one meaning
        raise ArtifactError(f"{path}: not a readable parquet file, truncated or corrupt "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                            f"{rebuild_hint(path)}") from e
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ArtifactError(f"{path}: this {what} lacks column(s) {missing} (has {list(df.columns)}); it was "
                            "written by another version or is not this stage's input")
    return df


# columns that name things (a unit: L0H3, L1G0, L2): strings, whatever a CSV reader would guess
TEXT_COLUMNS = ("top_head", "top_kv_group", "top_layer")


def read_csv(path, text: tuple | list = TEXT_COLUMNS):
    """A CSV table this pipeline wrote, as a polars DataFrame; the columns in `text` stay strings."""

    try:
        head = pl.read_csv(path, n_rows=0).columns
        return pl.read_csv(path, schema_overrides={c: pl.String for c in text if c in head},
                           infer_schema_length=None)
    except FileNotFoundError as e:
        raise ArtifactError(f"{path}: no such file") from e


def frame(rows, columns: list | None = None):
    """A polars DataFrame from a list of row dicts (or a dict of columns). Every row is inspected
    for the schema; a key missing from some rows is null there; ints and floats of one column
    become floats."""

    if isinstance(rows, dict):
        return pl.DataFrame(rows)
    if not rows:
        return pl.DataFrame(schema=columns or [])
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return pl.DataFrame([{k: _scalar(r.get(k)) for k in keys} for r in rows], infer_schema_length=None)


def _scalar(v):
    """numpy scalars as Python ones (polars would read a numpy bool as a float)."""

    return v.item() if isinstance(v, np.generic) else v


def write_parquet(df, path) -> None:
    with writing(path), atomic_path(path) as tmp:
        df.write_parquet(tmp)


def csv_ready(df):
    """As a CSV stores it: NaN empty (as null), booleans True / False."""

    return df.with_columns(
        [pl.col(c).fill_nan(None) for c, t in df.schema.items() if t.is_float()]
        + [pl.when(pl.col(c)).then(pl.lit("True")).when(pl.col(c).not_()).then(pl.lit("False"))
           .otherwise(pl.lit(None, pl.String)).alias(c) for c, t in df.schema.items() if t == pl.Boolean])


def write_csv(df, path) -> None:
    df = csv_ready(df)
    with writing(path), atomic_path(path) as tmp:
        df.write_csv(tmp)


def save_figure(fig, path) -> None:
    """Save PNG (and a PDF sibling when the path asks for .pdf too) atomically. A PDF is
    written without its creation date, so that two runs' figures are the same bytes."""
    fmt = Path(path).suffix.lstrip(".")
    undated = {"CreationDate": None} if fmt == "pdf" else None
    with writing(path), atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=150, bbox_inches="tight", format=fmt, metadata=undated)
