"""What a job that runs several ablations keeps of its finished ones when it fails or is killed.

Snakemake deletes every output of a failed job, so one job per task and model would lose the
ablations it had finished. Each finished ablation's files are also hard-linked into a stash named
by a digest of everything the job depends on (its params, which include the code hash, its
wildcards and the size and modification time of its input files); a rerun with the same digest
links them back instead of recomputing them, and a job that succeeds removes its stash."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path


def for_job(snakemake, root) -> Stash:
    """The stash of a Snakemake job (in a script: `for_job(snakemake, snakemake.params.resume)`)."""
    return Stash(root, digest(dict(snakemake.params.items()), list(snakemake.input),
                              dict(snakemake.wildcards.items())))


def digest(params: dict, inputs, wildcards: dict) -> str:
    """One key for one job's inputs: a changed param, code, config or input file changes it."""
    files = []
    for f in inputs:
        st = os.stat(f)
        files.append([str(f), st.st_size, st.st_mtime_ns])
    blob = json.dumps({"params": params, "wildcards": wildcards, "inputs": files}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class Stash:
    """`root/<key>/`: a hard link (a copy where links fail) of each finished ablation's outputs."""

    def __init__(self, root, key: str):
        """`root`: one job's own folder; what is there under another key is from other inputs or
        code, and goes."""
        self.dir = Path(root) / key
        self.root = Path(root)
        for old in self.root.glob("*") if self.root.is_dir() else ():
            if old != self.dir:
                shutil.rmtree(old, ignore_errors=True)

    def _slot(self, ablation: str) -> Path:
        return self.dir / ablation

    def restore(self, ablation: str, paths: list) -> bool:
        """Put a finished ablation's files back at `paths`; False if it did not finish before."""
        slot = self._slot(ablation)
        if not (slot / "done").exists():
            return False
        for i, p in enumerate(paths):
            Path(p).parent.mkdir(parents=True, exist_ok=True)
            _link(slot / str(i), Path(p))
        return True

    def keep(self, ablation: str, paths: list) -> None:
        slot = self._slot(ablation)
        if slot.exists():
            shutil.rmtree(slot)
        slot.mkdir(parents=True)
        for i, p in enumerate(paths):
            _link(Path(p), slot / str(i))
        (slot / "done").write_text("")  # last: a slot without it is incomplete

    def part(self, prefix: str) -> Part:
        """The slots under `prefix/` as a stash of their own, for a stage inside a job that runs
        several (`engine.stages`): clearing it keeps them, the whole job's `clear` removes them."""
        return Part(self, prefix)

    def clear(self) -> None:
        """The job's stash, and its parent folders up to the first hidden one while they are empty."""
        shutil.rmtree(self.root, ignore_errors=True)
        for parent in self.root.parents:
            try:
                parent.rmdir()
            except OSError:
                break
            if parent.name.startswith("."):
                break


class Part:
    """A stage's view of its job's stash (`Stash.part`)."""

    def __init__(self, stash: Stash, prefix: str):
        self.stash, self.prefix = stash, prefix

    def restore(self, ablation: str, paths: list) -> bool:
        return self.stash.restore(f"{self.prefix}/{ablation}", paths)

    def keep(self, ablation: str, paths: list) -> None:
        self.stash.keep(f"{self.prefix}/{ablation}", paths)

    def clear(self) -> None:
        """Nothing: the stage's slots stay until the whole job succeeds."""


def _link(src: Path, dst: Path) -> None:
    if dst.exists():
        dst.unlink()
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)
