"""Weights hashed once per model, not once per job. Every job that loads a model checks that its
weights are the ones its card was built from (models.load.check_weights: each file's size, then its
sha256). Hashing 13.7 GB takes about 9 s, and a run loads each model in many jobs; the sha256 is
computed when the card is built and, where it matches, a stamp records it: the file's path, size,
modification time and inode, and the sha256 the card expects. A later job finds the stamp and reuses
the card's hash instead of reading the file again; a file written, replaced or resized since (any
of the four changed) is hashed again. A stamp is trusted only where the file was last written at
least `RACY_NS` before the stamp (a write in the same clock tick as the check would leave the same
time), so a stamp made right after a file was written is not trusted and is remade by a later check.

The stamps live in `.snakemake/circuitloc/verified/` of the run's directory; a job turns them on
(`runner.setup`), anything else (a test, a notebook) hashes every time. Standard library and circuitloc.atomic only."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from circuitloc.atomic import write_text
from circuitloc.errors import ArtifactError

DIRECTORY = Path(".snakemake") / "circuitloc" / "verified"
RACY_NS = 2_000_000_000  # 2 s: far above any file system's time granularity
_where: list[Path] = []  # the stamp directory once `use` turned stamps on


def use(directory=DIRECTORY) -> None:
    """Turn stamps on for this process, kept in `directory` (an absolute path from here on)."""
    _where[:] = [Path(directory).absolute()]


def _stamp(path: Path, sha256: str) -> tuple[Path, int] | None:
    """(the stamp file of `path` as it is now, expected to hash to `sha256`; the file's mtime in ns)."""
    if not _where:
        return None
    st = path.stat()
    key = f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{sha256}"
    return _where[0] / hashlib.sha256(key.encode()).hexdigest(), st.st_mtime_ns


def known(path, sha256: str) -> bool:
    """Whether `path` was hashed to `sha256` as it is now (same path, size, time and inode)."""
    found = _stamp(Path(path), sha256)
    if found is None:
        return False
    stamp, mtime = found
    try:
        return stamp.stat().st_mtime_ns - mtime >= RACY_NS
    except OSError:
        return False


def remember(path, sha256: str) -> None:
    """Record that `path` hashed to `sha256` (called right after hashing it). A stamp that cannot be
    written (a read-only directory) is skipped: the next job hashes again."""
    found = _stamp(Path(path), sha256)
    if found is None:
        return
    stamp, _ = found
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        write_text(f"{Path(path).resolve()} {sha256} {time.time_ns()}\n", stamp)
    except (OSError, ArtifactError):
        pass
