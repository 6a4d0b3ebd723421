"""Atomic writers: an artifact either exists whole or not at all. Standard library only, so the
workflow's plan (circuitloc.plan) writes its records the same way the jobs write theirs."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shlex
import shutil
import tempfile
from pathlib import Path

from circuitloc.errors import ArtifactError
from circuitloc.usercommand import command_with

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


# Writers in native code report an I/O failure as their own exception type, not as an OSError:
# polars' write_parquet a ComputeError, safetensors' save (a model's weights) a SafetensorError.
_NATIVE_WRITERS = ("polars", "safetensors", "tokenizers")
_IO_ERROR = re.compile(r"\b(?:io|i/o|os) error\b", re.IGNORECASE)


@contextlib.contextmanager
def writing(path):
    """A write that fails for want of disk space, quota or permission is one ArtifactError naming
    the target, a file or a directory (atomic_path and atomic_dir have already removed their
    temporaries, so nothing partial is left), not a traceback."""
    try:
        yield
    except OSError as e:
        raise ArtifactError(_unwritable(path, e.strerror or str(e).splitlines()[0])) from e
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if type(e).__module__.split(".")[0] in _NATIVE_WRITERS and _IO_ERROR.search(first):
            raise ArtifactError(_unwritable(path, first)) from e
        raise


def _unwritable(path, reason: str) -> str:
    return (f"{path}: cannot write ({reason}); no partial file was left: free disk space or fix the "
            "directory's permissions, then rerun")


def write_json(obj, path) -> None:
    text = json.dumps(obj, indent=2, sort_keys=False, default=_jsonable) + "\n"
    with writing(path), atomic_path(path) as tmp:
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
        raise ArtifactError(f"{path}: not valid JSON ({what}); {rebuild_hint(path)}") from e


def rebuild_hint(path) -> str:
    """The command that rebuilds an artifact of this run and exactly what depends on it. A deleted or
    rewritten intermediate is not enough: Snakemake plans nothing for a missing file whose
    consumers' outputs exist, and reruns the consumers (not the writer) of a rewritten one. The
    user's own command with `--forcerun path` added where the run recorded it (circuitloc.plan.hooks.command:
    its program as typed, config files, directory); else the plain form: a job runs in the run's
    directory, and one without a Snakefile was started with `--directory`, which the command then
    needs too (the artifact's path is relative to it)."""
    own = command_with("--forcerun", str(path))
    if own:
        return f"rebuild it and what depends on it: {own}"
    where = "" if Path("Snakefile").is_file() else f" --directory {shlex.quote(os.getcwd())}"
    return (f"rebuild it and what depends on it: snakemake --cores all{where} --forcerun {path} "
            "(with the run's --configfile)")


def write_text(text: str, path) -> None:
    with writing(path), atomic_path(path) as tmp:
        tmp.write_text(text)


def _jsonable(o):
    """numpy scalars and arrays (whose module is numpy: no import needed here) and paths."""
    if type(o).__module__ == "numpy" and hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")
