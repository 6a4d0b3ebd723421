"""The workflow's checkout as local files, wherever its Snakefile was read from.

A Snakefile read from a local path has its checkout beside it. One read from a URL (`snakemake -s
https://.../Snakefile`, or a module's `github(...)`) has none: the files the plan reads (the
embedded default config, the schema, the resource files that are job inputs, the report's pages
and each script whose code is hashed) are fetched through Snakemake's source cache, relative to the
Snakefile's own source path, into one local folder per source (`MIRROR`), which then plays the
checkout. The circuitloc package itself must be importable (installed) for a remote Snakefile.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from circuitloc.atomic import atomic_path
from circuitloc.errors import ConfigError
from circuitloc.plan.vocabulary import builtin_tasks

MIRROR = Path(".snakemake") / "circuitloc" / "source"
# every file of the checkout the plan reads before any job runs (scripts are fetched as they are
# hashed: `Checkout.fetch`)
PLAN_FILES = (
    "config/config.yaml",
    "config/schema.yaml",
    "resources/neutral.txt",
    f"resources/{builtin_tasks.FACTS_FILE}",
    *(f"resources/{p}" for p in builtin_tasks.IOI_RESOURCES.values()),
    "report/workflow.rst",
    "report/style.css",
    "workflow/scripts/_src_path.py",
)


class Checkout:
    """The checkout of the workflow whose Snakefile is being parsed: `root` is a local directory
    (the Snakefile's own, or the mirror of a remote one), `fetch` makes one of its files local."""

    def __init__(self, workflow):
        self._base = workflow.current_basedir
        self._cache = workflow.sourcecache
        self.remote = not self._base.is_local
        uri = self._base.get_path_or_uri(secret_free=True)
        if not self.remote:
            self.root = uri
            return
        self.root = str((MIRROR / hashlib.sha256(uri.encode()).hexdigest()[:16]).resolve())
        for rel in PLAN_FILES:
            self.fetch(rel)

    def fetch(self, rel: str) -> str:
        """The local path of the checkout's file `rel` (a path relative to the Snakefile's folder);
        for a remote Snakefile, its text fetched from the source path (an unreachable file is an
        error naming its URL)."""
        local = os.path.join(self.root, rel)
        if self.remote:
            source = self._base.join(rel)
            try:
                with self._cache.open(source, "rb") as f:
                    data = f.read()
            except Exception as e:  # noqa: BLE001  (any fetch failure: one line naming the URL)
                raise ConfigError(f"workflow source: cannot fetch {source.get_path_or_uri(secret_free=True)}: {e}") from None
            if not os.path.exists(local) or Path(local).read_bytes() != data:
                with atomic_path(local) as tmp:  # a plan killed mid-write leaves no half-fetched file
                    tmp.write_bytes(data)
        return local
