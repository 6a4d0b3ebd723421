"""Where hub data comes from: the fahamu/ioi file names and their resolution, which snapshot
(commit) of a Hugging Face repository a path belongs to, and whether a model's `hf:` names a local
directory or a hub id.

Standard library only: the rules import it when the DAG is built (a local fahamu file is a job
input). The download itself, which needs huggingface_hub, is a dataset job's
(circuitloc.tasks.fahamu.fahamu_source).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from circuitloc.errors import ConfigError

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


# huggingface_hub's own rule (utils.validate_repo_id), restated so the plan needs no hub import:
# `name` or `owner/name`, each of letters, digits, `-`, `_`, `.`, not starting or ending with `-`
# or `.`, at most 96 characters; no `--` or `..`; not ending in `.git`.
_HUB_NAME = r"(?![-.])[\w\-.]{1,96}(?<![-.])"
_HUB_ID = re.compile(rf"(?:{_HUB_NAME}/)?{_HUB_NAME}", re.ASCII)
_PATH_PREFIXES = ("/", "./", "../", "~")


def is_hub_id(value: str) -> bool:
    """Whether `value` is a valid Hugging Face hub id (`gpt2`, `EleutherAI/pythia-160m`)."""
    return bool(_HUB_ID.fullmatch(value)) and "--" not in value and ".." not in value and not value.endswith(".git")


def hf_source(name: str, value: str, revision: str | None = None) -> tuple[str, str]:
    """("dir", the expanded path) or ("hub", the id) for `models.<name>.hf`, as `from_pretrained`
    reads it: an existing local directory is a path; else a valid hub id is a hub id. Anything else
    (a path that does not exist, a string that is neither, an `owner/name` whose owner is a local
    folder and that the hub cache does not hold: a mistyped local path) is a ConfigError naming the
    field, raised when the plan is made, not hours later in the model job."""
    field = f"models.{name}.hf"
    local = os.path.expanduser(value)
    if os.path.isdir(local):
        if revision:
            raise ConfigError(f"config: {field}: revision {revision!r} is for hub ids; {value} is a local directory "
                              f"(drop models.{name}.revision)")
        return "dir", local
    if os.path.exists(local):
        raise ConfigError(f"config: {field}: {value} is a file, not a Hugging Face model directory")
    if value.startswith(_PATH_PREFIXES) or value.count("/") > 1:
        raise ConfigError(f"config: {field}: local directory {local} does not exist (from {os.getcwd()})")
    if not is_hub_id(value):
        raise ConfigError(f"config: {field}: {value!r} is neither an existing local directory nor a hub id "
                          "(`name` or `owner/name`: letters, digits, -, _ and .)")
    owner = value.split("/")[0] if "/" in value else None
    if owner and os.path.isdir(owner) and cached_config(value, revision) is None:
        # `my_models/gpt2_small` beside a local my_models/: a mistyped local path, not a hub id to fetch
        raise ConfigError(f"config: {field}: local directory {os.path.join(os.getcwd(), value)} does not exist, but "
                          f"{owner}/ does: a local model's directory must exist (from {os.getcwd()}); a hub id "
                          f"whose owner is also a local folder: download it to the hub cache first")
    return "hub", value


def check_model_sources(models: dict) -> None:
    """The plan-time check of every hf model's `hf:` (see hf_source)."""
    for name, spec in models.items():
        if isinstance(spec, dict) and spec.get("source") == "hf" and isinstance(spec.get("hf"), str):
            hf_source(name, spec["hf"], spec.get("revision"))


def snapshot_commit(path) -> str | None:
    """The commit of a file or directory inside a Hugging Face cache snapshot
    (`.../snapshots/<commit>/...`), else None (a local copy has no commit)."""
    parts = Path(os.path.abspath(path)).parts  # not resolved: a snapshot's files link into blobs/
    for i in range(len(parts) - 1, 0, -1):
        if parts[i - 1] == "snapshots":
            return parts[i]
    return None


def hub_cache() -> Path:
    """The Hugging Face hub cache as huggingface_hub finds it: HF_HUB_CACHE, else HF_HOME/hub, else
    ~/.cache/huggingface/hub."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def cached_config(value: str, revision: str | None = None) -> Path | None:
    """The config.json a model's `hf:` names without any network: the local directory's, or the
    hub cache's snapshot of `revision` (a branch or tag through refs/, or a commit; default main,
    else the newest snapshot held). None where there is none."""
    local = Path(os.path.expanduser(value))
    if local.is_dir():
        return local / "config.json" if (local / "config.json").is_file() else None
    if not is_hub_id(value):
        return None
    repo = hub_cache() / ("models--" + value.replace("/", "--"))
    ref = repo / "refs" / (revision or "main")
    commit = ref.read_text().strip() if ref.is_file() else revision
    snapshots = [repo / "snapshots" / commit] if commit else []
    if not revision:
        snapshots += sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime, reverse=True)
    return next((s / "config.json" for s in snapshots if (s / "config.json").is_file()), None)
