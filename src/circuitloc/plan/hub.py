"""Where hub data comes from: the fahamu/ioi file names and their resolution, and which snapshot
(commit) of a Hugging Face repository a path belongs to.

Standard library only at import: the rules import it when the DAG is built (a local fahamu file is
a job input), and the dataset and model jobs import it to fetch and to record what they read.
"""

from __future__ import annotations

import os
from pathlib import Path

from circuitloc.errors import DatasetError

FAHAMU_REPO = "fahamu/ioi"
FAHAMU_FILES = {"200k": "mecha_ioi_200k.parquet", "26m": "mecha_ioi_26m.parquet"}


def fahamu_file(source: dict) -> str:
    """The parquet file name of a `{kind: fahamu}` source (`file`, '200k' and '26m' as shorthands)."""
    name = source.get("file") or FAHAMU_FILES["200k"]
    return FAHAMU_FILES.get(name, name)


def local_fahamu(source: dict) -> str | None:
    """A local source's parquet path (`path`: a file, or a directory holding `file`), without
    checking that it exists; None for the hub."""
    path = source.get("path")
    if not path:
        return None
    return os.path.join(path, fahamu_file(source)) if os.path.isdir(path) else path


def snapshot_commit(path) -> str | None:
    """The commit of a file or directory inside a Hugging Face cache snapshot
    (`.../snapshots/<commit>/...`), else None (a local copy has no commit)."""
    parts = Path(os.path.abspath(path)).parts  # not resolved: a snapshot's files link into blobs/
    for i in range(len(parts) - 1, 0, -1):
        if parts[i - 1] == "snapshots":
            return parts[i]
    return None


def fahamu_path(source: dict) -> tuple[Path, str | None]:
    """(parquet path, snapshot commit or None) of a `{kind: fahamu}` source: the local `path`, else
    `file` of the hub dataset `repo` at `revision` from the Hugging Face cache (downloaded when
    online; offline, a file missing from the cache is an error naming the cache and the command
    that fetches it)."""
    name = fahamu_file(source)
    local = local_fahamu(source)
    if local:
        p = Path(local)
        if not p.is_file():
            raise DatasetError(f"IOI parquet not found: {p} (tasks.ioi.source.path)")
        return p, None
    repo = source.get("repo") or FAHAMU_REPO
    revision = source.get("revision")
    from huggingface_hub import constants, hf_hub_download

    try:
        path = Path(hf_hub_download(repo, name, repo_type="dataset", revision=revision))
    except Exception as e:  # offline and not cached, or the hub unreachable
        rev = f" --revision {revision}" if revision else ""
        raise DatasetError(
            f"{repo}: {name}{f' at revision {revision}' if revision else ''} is not in the Hugging Face cache "
            f"{constants.HF_HUB_CACHE} and could not be downloaded ({type(e).__name__}; "
            f"HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '0')}). Fetch it where there is internet, "
            f"with the same HF_HOME: hf download {repo} {name} --repo-type dataset{rev}") from e
    return path, snapshot_commit(path)
