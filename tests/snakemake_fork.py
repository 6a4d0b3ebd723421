"""Snakemake calls from tests without paying Snakemake's import each time.

A Snakemake call costs about 2 s of CPU before it reads the Snakefile: Python's start and the import of
Snakemake and of its executor plugins (the SLURM plugin imports pandas and SQLAlchemy). The suite makes
a few hundred calls. A server process (one per test worker, started on first use) imports Snakemake
once and forks a child for each call; the child is what `python -m snakemake ARGS` would be from that
point on: its own process and session, the call's directory, environment, `sys.argv` and standard
streams (files the client reads back), and Python's normal exit (atexit handlers, flushes). Jobs the
call starts are fresh processes as before.

A call whose PYTHONPATH differs from the server's runs as a plain subprocess (what it imports at start
would differ), as does every call when CIRCUITLOC_TEST_FORK=0. Run this file to serve (the client does).
"""

from __future__ import annotations

import json
import locale
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ENV = "CIRCUITLOC_TEST_FORK"


def _child(req: dict, reply) -> None:
    """In the forked child: become `python -m snakemake ARGS` in the request's directory, and exit."""
    reply.close()  # the server's answers are not the child's to hold open
    os.setsid()  # a session of its own: a timeout kills the call with the jobs it started
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, req["stdout"]), (2, req["stderr"])):
        out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, fd)
        os.close(out)
    os.chdir(req["cwd"])
    os.environ.clear()
    os.environ.update(req["env"])
    import snakemake
    from snakemake.cli import main

    sys.argv = [os.path.join(os.path.dirname(snakemake.__file__), "__main__.py"), *req["args"]]  # as -m sets it
    sys.orig_argv = [sys.executable, "-m", "snakemake", *req["args"]]
    main(req["args"])  # raises SystemExit, so the child exits as Snakemake would


def serve() -> None:
    """Read one JSON request a line on stdin, fork a child for it, answer {rc, timed_out, cpu} a line."""
    from snakemake.cli import main  # noqa: F401 - the import every call would otherwise pay
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    ExecutorPluginRegistry()  # and its plugins' (found and imported on first use)
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything printed here goes to the server's log, never into a reply
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            try:
                _child(req, reply)
            except SystemExit:
                raise
            except BaseException:  # the child must never return into this loop
                import traceback

                traceback.print_exc()
                raise SystemExit(1) from None
            raise SystemExit(0)
        deadline = time.monotonic() + req["timeout"] if req["timeout"] else None
        status, timed_out = None, False
        while status is None:
            done, st, usage = os.wait4(pid, os.WNOHANG)
            if done:
                status = st
            elif deadline is not None and time.monotonic() > deadline:
                timed_out = True
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _, status, usage = os.wait4(pid, 0)
            else:
                time.sleep(0.02)
        cpu = usage.ru_utime + usage.ru_stime  # the call's, with the jobs it waited for
        reply.write(json.dumps({"rc": os.waitstatus_to_exitcode(status), "timed_out": timed_out, "cpu": cpu}) + "\n")
        reply.flush()


class Server:
    """The client: one server process for this test process, started on first use."""

    def __init__(self):
        self.proc = None
        self.lock = threading.Lock()
        self.cpu = 0.0  # CPU seconds of the calls served so far (not this process's children: the server's)

    def _start(self, env: dict) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="snakemake-fork-", suffix=".log", delete=False)
        self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, env=env, text=True)

    def run(self, args: list[str], cwd, env: dict, timeout, serve_env: dict) -> subprocess.CompletedProcess:
        """`python -m snakemake ARGS` in `cwd` with `env`, as subprocess.run(capture_output=True,
        text=True) returns it; `serve_env`: the environment the server starts in (its PYTHONPATH is
        the one calls may differ in only by running as a subprocess)."""
        cmd = [sys.executable, "-m", "snakemake", *args]
        if os.environ.get(ENV, "1") == "0" or env.get("PYTHONPATH") != serve_env.get("PYTHONPATH"):
            return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        with self.lock, tempfile.TemporaryDirectory(prefix="snakemake-call-") as tmp:
            if self.proc is None or self.proc.poll() is not None:
                self._start(serve_env)
            req = {"args": [str(a) for a in args], "cwd": os.path.abspath(cwd), "env": dict(env),
                   "timeout": timeout, "stdout": os.path.join(tmp, "out"), "stderr": os.path.join(tmp, "err")}
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            answer = self.proc.stdout.readline()
            if not answer:
                raise RuntimeError(f"the Snakemake fork server stopped (its log: {self.log.name})")
            res = json.loads(answer)
            self.cpu += res["cpu"]
            enc = locale.getpreferredencoding(False)
            out, err = (Path(req[k]).read_text(encoding=enc, errors="replace") for k in ("stdout", "stderr"))
        if res["timed_out"]:
            raise subprocess.TimeoutExpired(cmd, timeout, output=out, stderr=err)
        return subprocess.CompletedProcess(cmd, res["rc"], out, err)


SERVER = Server()


if __name__ == "__main__":
    serve()
