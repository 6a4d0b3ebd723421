"""The user's command as the run recorded it (circuitloc.plan.hooks.command.record, while the run is
planned, in environment variables the jobs inherit), read back by a job's recovery hint: the same
program as typed, cores, config files, directory and options, with a forcerun added. Standard
library only."""

from __future__ import annotations

import os
import shlex

ENV = "CIRCUITLOC_COMMAND"  # the user's command, shell-quoted, its targets left out
CWD = "CIRCUITLOC_COMMAND_CWD"  # the directory the user ran it in


def _program_words(words: list[str]) -> int:
    """How many of a recorded command's words are the program (`python -m snakemake`: three)."""
    return 3 if len(words) >= 3 and words[1] == "-m" else 1


def command_with(*extra: str, target: str | None = None) -> str | None:
    """The recorded command with `extra` words added at its end and `target` (if any) first after the
    program (after an option that takes several values it would be one of them), prefixed with a
    `cd` to where it was typed when a job runs elsewhere (--directory); None when no command was
    recorded (a job run outside Snakemake)."""
    base = os.environ.get(ENV)
    if not base:
        return None
    words = shlex.split(base)
    n = _program_words(words)
    cmd = shlex.join([*words[:n], *([target] if target else []), *words[n:], *extra])
    cwd = os.environ.get(CWD)
    return cmd if not cwd or cwd == os.getcwd() else f"cd {shlex.quote(cwd)} && {cmd}"


def rerun(target: str) -> str | None:
    """The recorded command with `target` as its target and `--forcerun target`: only the job that
    makes `target` runs (a forcerun of the default target reruns everything that depends on it as
    well). None when no command was recorded (a job run outside Snakemake)."""
    return command_with("--forcerun", target, target=target)
