"""The command the user started the run with, so that a job's recovery hint can print it back with
only a forcerun added: the same cores, config files, directory and options, typed as printed. The
Snakefile records it (`record`) while the run is planned, in an environment variable the jobs
inherit; a job Snakemake itself starts again (a cluster job) keeps the first record."""

from __future__ import annotations

import os
import shlex

ENV = "CIRCUITLOC_COMMAND"  # the user's command, shell-quoted, its targets left out
CWD = "CIRCUITLOC_COMMAND_CWD"  # the directory the user ran it in


def record(argv: list[str], targets, cwd: str) -> None:
    """Keep `argv` (sys.argv of the planning Snakemake) without its target files, and the directory
    it was typed in (`cwd`: Snakemake's working directory before --directory). The first record
    stands: a job that replans the workflow does not replace the user's command with its own."""
    if ENV in os.environ:
        return
    drop = {str(t) for t in targets or ()}
    words = [w for w in argv[1:] if w.startswith("-") or w not in drop]
    os.environ[ENV] = shlex.join(["snakemake", *words])
    os.environ[CWD] = cwd


def rerun(target: str) -> str | None:
    """The recorded command with `target` as its target and `--forcerun target`: only the job that
    makes `target` runs (a forcerun of the default target reruns everything that depends on it as
    well). The target goes first: after an option that takes several values it would be one. None when no
    command was recorded (a job run outside Snakemake)."""
    base = os.environ.get(ENV)
    if not base:
        return None
    t = shlex.quote(target)
    cmd = base.replace("snakemake", f"snakemake {t}", 1) + f" --forcerun {t}"
    cwd = os.environ.get(CWD)
    return cmd if not cwd or cwd == os.getcwd() else f"cd {shlex.quote(cwd)} && {cmd}"
