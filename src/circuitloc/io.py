"""Atomic writers: an artifact either exists whole or not at all."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path, suffix: str | None = None):
    """Yield a temporary path beside `path`; rename it over `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
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


def write_json(obj, path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n")


def read_json(path):
    return json.loads(Path(path).read_text())


def write_parquet(df, path) -> None:
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)


def write_text(text: str, path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_csv(df, path) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)


def save_figure(fig, path) -> None:
    """Save PNG (and a PDF sibling when the path asks for .pdf too) atomically."""
    with atomic_path(path) as tmp:
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
