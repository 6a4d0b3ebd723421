"""What a failed run prints last: each failed job's reason, from its own log (no heavy imports:
the Snakefile's onerror handler calls this)."""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import sys
from pathlib import Path

from circuitloc.plan import paths

_RULE_ERROR = re.compile(r"^Error in rule (\S+?):?\s*$")
_LOG_LINE = re.compile(r"^\s+log: (.+?)(?: \(check log file\(s\) for error details\))?\s*$")
_ERROR = re.compile(r"\b(ERROR|Error|error)\b|^\w*(Error|Exception)\b")
# what Snakemake logs when the user stops it (Ctrl-C: KeyboardInterrupt; SIGTERM) and what a job
# killed by that signal leaves: a job's failure then is the interruption, not a reason in its log
_USER_STOP = re.compile(r"Terminating processes on user request|Cancelling snakemake on user request")
_INTERRUPT = re.compile(r"^KeyboardInterrupt\b")
# how Snakemake says a job's command ended by a signal: killed by it, or a shell's exit status 128 + n
_SIGNALLED = re.compile(r"died with <Signals\.(SIG\w+): \d+>|returned non-zero exit status (1[3-5]\d)\b")
_STOP_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


def _log_lines(snakemake_logs):
    """The lines of each Snakemake log (one path or several) that can be read."""
    for path in [snakemake_logs] if isinstance(snakemake_logs, (str, Path)) else snakemake_logs or ():
        try:
            yield Path(path).read_text(errors="replace").splitlines()
        except OSError:
            continue


def failed_logs(snakemake_logs, log_root=paths.LOGS, since: float | None = None) -> dict[str, str]:
    """{job log path: rule} for every job Snakemake reported as failed in its own log(s), plus any
    job log under `log_root` written since `since` that holds an ERROR line (a job that failed
    after the Snakemake log was last flushed)."""
    out: dict[str, str] = {}
    for lines in _log_lines(snakemake_logs):
        rule = None
        for line in lines:
            m = _RULE_ERROR.match(line)
            if m:
                rule = m.group(1)
                continue
            m = _LOG_LINE.match(line)
            if rule and m:
                for p in m.group(1).split(", "):
                    out.setdefault(p.strip(), rule)
                rule = None
            elif line and not line.startswith(" "):
                rule = None
    if since is not None and Path(log_root).is_dir():
        for p in sorted(Path(log_root).rglob("*.log")):
            try:
                if p.stat().st_mtime >= since and " ERROR " in p.read_text(errors="replace"):
                    out.setdefault(str(p), p.relative_to(log_root).parts[0])
            except OSError:
                continue
    return out


def _signal_name(m: re.Match) -> str | None:
    if m.group(1):
        return m.group(1)
    try:
        return signal.Signals(int(m.group(2)) - 128).name
    except ValueError:
        return None


def job_signals(snakemake_logs) -> dict[str, str]:
    """{job log path: signal} for every failed job whose command Snakemake says a signal ended (its
    "died with <Signals.SIGINT: 2>", or a shell's exit status 128 + n, in the lines of that job's
    error block up to its `log:` line)."""
    out: dict[str, str] = {}
    for lines in _log_lines(snakemake_logs):
        sig, rule = None, None
        for line in lines:
            m = _SIGNALLED.search(line)
            if m:
                sig = _signal_name(m) or sig
            if _RULE_ERROR.match(line):
                rule = True
                continue
            m = _LOG_LINE.match(line)
            if rule and m:
                if sig:
                    for p in m.group(1).split(", "):
                        out.setdefault(p.strip(), sig)
                sig, rule = None, None
    return out


def _read_lines(log_path) -> list[str]:
    return [ln.rstrip() for ln in Path(log_path).read_text(errors="replace").splitlines() if ln.strip()]


def _error_line(lines: list[str]) -> str | None:
    """The last line that reports an error (a logged ERROR, an exception's last line), or None."""
    for ln in reversed(lines):
        if " ERROR " in ln:
            return ln.split(" ERROR ", 1)[1]
    for ln in reversed(lines):
        if _ERROR.search(ln):
            return ln.strip()
    return None


def last_error_line(log_path) -> str:
    """The last line of a job log that reports an error (a logged ERROR, an exception's last
    line), else its last non-empty line."""
    try:
        lines = _read_lines(log_path)
    except OSError as e:
        return f"(log not readable: {e.strerror or e})"
    if not lines:
        return "(the log is empty: the job died before logging anything; see the Snakemake output above)"
    return _error_line(lines) or lines[-1].strip()


def user_stopped(snakemake_logs) -> bool:
    """Whether the run ended because the user stopped it (Ctrl-C), as Snakemake's own log says."""
    for path in [snakemake_logs] if isinstance(snakemake_logs, (str, Path)) else snakemake_logs or ():
        try:
            if _USER_STOP.search(Path(path).read_text(errors="replace")):
                return True
        except OSError:
            continue
    return False


def _job_line(log_path, rule: str, stopped: bool, sig: str | None = None) -> str:
    """One job's line. After a Ctrl-C, a job whose log reports no error of its own (or only the
    KeyboardInterrupt) was interrupted, not failed: its last INFO line is no reason. So is a job a
    signal ended (`sig`, from Snakemake's log) with no error in its log, even where Snakemake itself
    went on (a SIGINT it ignored, a scheduler's SIGTERM): the signal is named instead."""
    try:
        lines = _read_lines(log_path)
    except OSError:
        lines = None
    error = _error_line(lines) if lines else None
    if (stopped and error is None) or any(_INTERRUPT.search(ln) for ln in lines or ()):
        return f"circuitloc: {rule} job interrupted before it finished  [log: {log_path}]"
    if error is None and sig:
        if sig in _STOP_SIGNALS:
            return f"circuitloc: {rule} job interrupted ({sig}) before it finished  [log: {log_path}]"
        why = " (out of memory, or a scheduler's limit?)" if sig == "SIGKILL" else ""
        return f"circuitloc: {rule} job killed by {sig} before it finished{why}  [log: {log_path}]"
    return f"circuitloc: {rule} job failed: {last_error_line(log_path)}  [log: {log_path}]"


def explain_failures(snakemake_logs, log_root=paths.LOGS, since: float | None = None, stream=None) -> list[str]:
    """Print, for each failed job, its rule, the last error line of its log and the log's path; a run
    the user stopped (Ctrl-C) is reported as interrupted, each job it cut short as interrupted."""
    stream = stream or sys.stderr
    stopped = user_stopped(snakemake_logs)
    signals = job_signals(snakemake_logs)
    lines = [_job_line(p, rule, stopped, signals.get(p))
             for p, rule in failed_logs(snakemake_logs, log_root, since).items()]
    full = disk_full_line()
    if full:
        lines.append(full)
    if stopped:
        lines.append("circuitloc: the run was interrupted (Ctrl-C), not failed: the outputs it finished are kept; "
                     "rerun the same command to go on")
    if lines:
        title = " the run was interrupted " if stopped else " why the run failed "
        print("\n".join(["", "=" * 20 + title + "=" * 20, *lines]), file=stream, flush=True)
    return lines


LOW_DISK = 64 * 2**20  # bytes: less than this free where the run writes is a full disk to Snakemake's records


def disk_full_line(where=".") -> str | None:
    """The line that says the run's disk is full, when it is: Snakemake's own error is then about its
    metadata records, and no job log says why."""
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return None
    if free >= LOW_DISK:
        return None
    return (f"circuitloc: the disk of {os.path.abspath(where)} is full ({free} bytes free): no partial result was "
            "kept; free space, then rerun the same command")


def report_ready(report, stream=None) -> str | None:
    """The run's last line: where its report is, when the run made or kept one. Snakemake logs its
    own closing lines ("Complete log(s): ...") after the onsuccess handler returns, so the line is
    printed when the interpreter exits, after them."""
    if not os.path.exists(report):
        return None
    line = f"circuitloc: the report is {os.path.abspath(report)} (it opens on the run's answer)"
    atexit.register(lambda: print(line, file=stream or sys.stderr, flush=True))
    return line
