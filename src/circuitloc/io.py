"""Atomic writers: an artifact either exists whole or not at all."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from .errors import ArtifactError

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path, suffix: str | None = None):
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _drop_stale(path, suffix or path.suffix)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix or path.suffix, dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp's 0600 would hide results from a shared group
    tmp = Path(tmp)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def atomic_dir(path):
    """Yield a temporary directory beside `path`; it replaces `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _drop_stale(path, "")
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    os.chmod(tmp, 0o777 & ~_UMASK)
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _drop_stale(path: Path, suffix: str) -> None:
    """Remove what a killed writer of `path` left beside it (its own temporaries, named as
    tempfile names them): one job owns an output path, so such a file is from an interrupted run."""
    own = re.compile(rf"\.{re.escape(path.name)}\.[A-Za-z0-9_]{{8}}{re.escape(suffix)}")
    for old in path.parent.glob(f".{glob.escape(path.name)}.*"):
        if not own.fullmatch(old.name):
            continue
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


@contextlib.contextmanager
def _writing(path):
    """A write that fails for want of disk space, quota or permission is one ArtifactError naming
    the target (atomic_path has already removed its temporary, so nothing partial is left), not a
    traceback. polars reports an I/O failure of write_parquet as a ComputeError, not an OSError."""
    try:
        yield
    except OSError as e:
        raise ArtifactError(_unwritable(path, e.strerror or str(e).splitlines()[0])) from e
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if type(e).__module__.startswith("polars") and re.search(r"\b(io|os) error\b", first, re.IGNORECASE):
            raise ArtifactError(_unwritable(path, first)) from e
        raise


def _unwritable(path, reason: str) -> str:
    return (f"{path}: cannot write ({reason}); no partial file was left: free disk space or fix the "
            "directory's permissions, then rerun")


def write_json(obj, path) -> None:
    text = json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n"
    with _writing(path), atomic_path(path) as tmp:
        tmp.write_text(text)


def read_json(path):
    """A JSON artifact; a missing, empty or malformed file is an ArtifactError naming it."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ArtifactError(f"{path}: cannot read ({e.strerror or e})") from e
    except UnicodeDecodeError as e:
        raise ArtifactError(f"{path}: not JSON (not UTF-8 text: {e.reason} at byte {e.start})") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        what = "empty file" if not text.strip() else f"{e.msg} at line {e.lineno}, column {e.colno}"
        raise ArtifactError(f"{path}: not valid JSON ({what}); delete it and rerun the stage that "
                            "writes it") from e


# What every later stage reads from a model's card.json (circuitloc.models.card writes more).
CARD_KEYS = ("name", "source", "family", "attention", "n_layers", "n_heads", "n_kv_heads", "d_model", "d_head",
             "n_params", "dtype", "prepend_bos", "path")


class Card(dict):
    """A card.json whose missing key is an ArtifactError naming the file and the key, not a bare KeyError."""

    path = ""

    def __missing__(self, key):
        raise ArtifactError(f"{self.path}: model card has no {key!r}; delete it and rerun its models job "
                            f"(snakemake --forcerun model)")


def read_card(path):
    """A model's card.json, checked for the keys later stages read (CARD_KEYS)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise ArtifactError(f"{path}: model card is not a JSON object; delete it and rerun its models job")
    missing = [k for k in CARD_KEYS if k not in data]
    if missing:
        raise ArtifactError(f"{path}: model card lacks {', '.join(map(repr, missing))}; delete it and rerun "
                            f"its models job (snakemake --forcerun model)")
    card = Card(data)
    card.path = str(path)
    return card


def read_parquet(path, columns: tuple | list = (), what: str = "table"):
    """A parquet artifact as a polars DataFrame; unreadable (truncated, not parquet) or lacking a
    required column is an ArtifactError naming the file, the problem and the missing columns."""
    import polars as pl

    try:
        df = pl.read_parquet(path)
    except FileNotFoundError as e:
        raise ArtifactError(f"{path}: no such file") from e
    except Exception as e:  # noqa: BLE001 - polars / pyarrow raise several types for one meaning
        raise ArtifactError(f"{path}: not a readable parquet file, truncated or corrupt "
                            f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); delete it and "
                            "rerun the stage that writes it") from e
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ArtifactError(f"{path}: this {what} lacks column(s) {missing} (has {list(df.columns)}); it was "
                            "written by another version or is not this stage's input")
    return df


# columns that name things (a unit: L0H3, L1G0, L2): strings, whatever a CSV reader would guess
TEXT_COLUMNS = ("top_head", "top_kv_group", "top_layer")


def read_csv(path, text: tuple | list = TEXT_COLUMNS):
    """A CSV table this pipeline wrote, as a polars DataFrame; the columns in `text` stay strings."""
    import polars as pl

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
    import polars as pl

    if isinstance(rows, dict):
        return pl.DataFrame(rows)
    if not rows:
        return pl.DataFrame(schema=columns or [])
    keys = list(dict.fromkeys(k for r in rows for k in r))
    return pl.DataFrame([{k: _scalar(r.get(k)) for k in keys} for r in rows], infer_schema_length=None)


def _scalar(v):
    """numpy scalars as Python ones (polars would read a numpy bool as a float)."""
    import numpy as np

    return v.item() if isinstance(v, np.generic) else v


def write_parquet(df, path) -> None:
    with _writing(path), atomic_path(path) as tmp:
        df.write_parquet(tmp)


def write_text(text: str, path) -> None:
    with _writing(path), atomic_path(path) as tmp:
        tmp.write_text(text)


def csv_ready(df):
    """As a CSV stores it: NaN empty (as null), booleans True / False."""
    import polars as pl

    return df.with_columns(
        [pl.col(c).fill_nan(None) for c, t in df.schema.items() if t.is_float()]
        + [pl.when(pl.col(c)).then(pl.lit("True")).when(pl.col(c).not_()).then(pl.lit("False"))
           .otherwise(pl.lit(None, pl.String)).alias(c) for c, t in df.schema.items() if t == pl.Boolean])


def write_csv(df, path) -> None:
    df = csv_ready(df)
    with _writing(path), atomic_path(path) as tmp:
        df.write_csv(tmp)


def save_figure(fig, path) -> None:
    """Save PNG (and a PDF sibling when the path asks for .pdf too) atomically."""
    with _writing(path), atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=150, bbox_inches="tight", format=Path(path).suffix.lstrip("."))


def _jsonable(o):
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")
