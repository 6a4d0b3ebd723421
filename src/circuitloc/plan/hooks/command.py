"""The command the user started the run with, so that a job's recovery hint can print it back with
only a forcerun added: the same cores, config files, directory and options, typed as printed. The
Snakefile's start handler records it (`record`, in the main Snakemake process only) while the run is
planned, in environment variables the jobs inherit (a cluster job too). The jobs read
it back through circuitloc.usercommand (ground floor: atomic's hints use it too)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys

from circuitloc.usercommand import CWD, ENV, command_with, rerun  # noqa: F401  (the jobs' half, re-exported)


def record(argv: list[str], targets, cwd: str) -> None:
    """Keep `argv` (sys.argv of the planning Snakemake) without its target files, and the directory
    it was typed in (`cwd`: Snakemake's working directory before --directory), replacing any record
    this process inherited (a run started from another run's job, or a stale shell): only the main
    Snakemake process records (plan.hooks.handlers), and the jobs it starts inherit its record."""
    drop = {str(t) for t in targets or ()}
    words = [w for w in argv[1:] if w.startswith("-") or w not in drop]
    os.environ[ENV] = shlex.join([*program(argv[0]), *words])
    os.environ[CWD] = cwd


def program(argv0: str) -> list[str]:
    """The words that started Snakemake, as the user typed them: `snakemake` where that name on the
    PATH is the program that ran; else its path as given (`.venv/bin/snakemake`, relative to the
    directory it was typed in, or absolute); `python -m snakemake` (argv[0] is then the package's
    __main__.py) with this interpreter, by its name where the PATH finds it."""
    if os.path.basename(argv0) == "__main__.py":
        python = os.path.basename(sys.executable)
        return [python if _on_path(python, sys.executable) else sys.executable, "-m", "snakemake"]
    name = os.path.basename(argv0) or "snakemake"
    if os.sep not in argv0 or (os.path.isabs(argv0) and _on_path(name, argv0)):
        return [name]
    return [argv0]


def _on_path(name: str, path: str) -> bool:
    """Whether `name` typed alone runs the file `path` (the PATH's first match is it)."""
    found = shutil.which(name)
    try:
        return bool(found) and os.path.samefile(found, path)
    except OSError:
        return False
