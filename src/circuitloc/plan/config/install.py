"""What the jobs need installed, checked while the workflow is planned: without --use-conda (or a
container) every job runs in the Python that runs Snakemake, so a clone planned from an environment
with Snakemake alone (the workflow catalog's) would plan, then fail each job on an import."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path


def missing_packages(root) -> list[str]:
    """The distributions `root`/pyproject.toml's dependencies name that this Python lacks, in
    order; [] where there is no pyproject.toml (a remote Snakefile's mirror: the package, installed,
    brought them)."""
    path = Path(root) / "pyproject.toml"
    if not path.is_file():
        return []
    missing = []
    for requirement in tomllib.loads(path.read_text())["project"]["dependencies"]:
        name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group(0)
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def missing_line(root, python: str) -> str | None:
    """One line naming the missing distributions and the command that installs them, or None."""
    missing = missing_packages(root)
    if not missing:
        return None
    return (f"circuitloc: the jobs run in the Python that runs Snakemake ({python}), which lacks "
            f"{', '.join(missing)}: pip install -e {root} (or run with --use-conda)")
