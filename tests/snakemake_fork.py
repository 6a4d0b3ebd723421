"""Snakemake calls from tests without paying Snakemake's import each time, nor torch's in each job.

A Snakemake call costs about 2 s of CPU before it reads the Snakefile: Python's start and the import of
Snakemake and of its executor plugins (the SLURM plugin imports pandas and SQLAlchemy). The suite makes
a few hundred calls. A server process (one per test worker, started on first use) imports Snakemake
once and forks a child for each call; the child is what `python -m snakemake ARGS` would be from that
point on: its own process and session, the call's directory, environment, `sys.argv` and standard
streams (files the client reads back), and Python's normal exit (atexit handlers, flushes).

A job costs about 4 s of CPU before its first line of work: torch, transformers, TransformerLens and
the plotting libraries imported in a fresh interpreter. The server imports those third-party modules
once too (never circuitloc: a test may run another checkout's code; then gc.freeze, so that no child
walks or copies them), and a call that may run jobs forks a job zygote before Snakemake starts:
Snakemake runs a script job as `{py_exec} SCRIPT` with py_exec this interpreter, and the call hands
it a small launcher instead, which asks the zygote to fork the job, with the launcher's
directory, environment, umask and standard streams, and returns its exit status (a job killed by a
signal kills the launcher with it; a launcher killed kills its job). The job's process is in the
call's session and process group, so a timeout kills it with the call, and its CPU is counted in the
call's. A job runs fresh instead (the launcher execs the real interpreter) when its command is not
`python SCRIPT.py`, when it is a toy's training (build_model.py pins torch's CPU kernels before torch
is imported: circuitloc.kernels), or when its environment differs from the server's at import in any
variable that may be read at import (BENIGN below are not; so every such switch is the job's own).

Differences from fresh processes: forked calls and jobs share the server's string-hash salt, and a
job's `sys.modules` holds the preimported libraries from its start. A call or job whose PYTHONPATH
is the server's followed by more folders (a test's plugins) is forked with those folders on sys.path
where the interpreter puts them, unless one holds a module of a name already imported; a call with
another PYTHONPATH runs as a plain subprocess (what it imports at start would differ), as does every
call when CIRCUITLOC_TEST_FORK=0; CIRCUITLOC_TEST_FORK=calls forks the calls and starts every job
fresh. Run this file to serve (the client does).
"""

from __future__ import annotations

import array
import atexit
import gc
import importlib
import json
import locale
import os
import random
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ENV = "CIRCUITLOC_TEST_FORK"
TRACE = "CIRCUITLOC_TEST_FORK_TRACE"  # a file: a line a job the zygote was asked for, how it ran and why
# third-party modules the jobs import (never circuitloc: see above); a missing one is skipped
PREIMPORT = ("numpy", "polars", "yaml", "torch", "transformers", "transformers.models.qwen2.modeling_qwen2",
             "transformer_lens.model_bridge", "transformer_lens.factories.architecture_adapter_factory",
             "matplotlib", "matplotlib.pyplot", "seaborn")
FRESH_SCRIPTS = ("build_model.py",)  # pins torch's CPU kernels before it imports torch
# variables nothing reads at import: pytest sets PYTEST_CURRENT_TEST for each test, and torch writes
# TORCHINDUCTOR_CACHE_DIR into a test's environment when it first finds its compile cache (read then);
# nor CIRCUITLOC_*, since circuitloc is not preimported
BENIGN = {"PWD", "OLDPWD", "SHLVL", "_", "PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR"}
# what Snakemake sets for a one-thread job, and every job's _src_path before its first import: the
# server imports PREIMPORT under these, so that a one-thread job forks with what it would have read
JOB_ENV = {**{k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                                "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")},
           **{k: tempfile.gettempdir() for k in ("TMPDIR", "TEMP", "TMP", "TEMPDIR")}}
IMPORT_ENV: dict = {}  # the server's environment when it imported PREIMPORT

LAUNCHER = '''#!{real} -S
"""A job's `python SCRIPT.py`, forked by the call's job zygote (tests/snakemake_fork.py), else fresh."""
import array, json, os, signal, socket, sys

REAL, SOCK, FRESH = {real!r}, {sock!r}, {fresh!r}
args = sys.argv[1:]
if len(args) != 1 or not args[0].endswith(".py") or args[0].endswith(FRESH):
    os.execv(REAL, [REAL, *args])
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(SOCK)
except OSError:
    os.execv(REAL, [REAL, *args])
mask = os.umask(0)
os.umask(mask)
s.sendmsg([b"+"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
s.sendall(json.dumps({{"script": args[0], "cwd": os.getcwd(), "env": dict(os.environ), "umask": mask}}).encode() + b"\\n")
answer = json.loads(s.makefile("rb").readline() or b\'{{"rc": 1}}\')
if answer.get("fresh"):
    s.close()
    os.execv(REAL, [REAL, *args])
if answer.get("signal"):
    signal.signal(answer["signal"], signal.SIG_DFL)
    os.kill(os.getpid(), answer["signal"])
sys.exit(answer["rc"])
'''


def _exit_code(e: SystemExit) -> int:
    """The status `python SCRIPT` exits with on SystemExit(e.code)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


def _job(req: dict, fds: list, others: list) -> None:
    """In a job's forked process: become `python SCRIPT` in the launcher's place, and exit."""
    for s in others:
        s.close()
    for i, fd in enumerate(fds):
        os.dup2(fd, i)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.chdir(req["cwd"])
    os.umask(req["umask"])
    os.environ.clear()
    os.environ.update(req["env"])
    random.seed()  # a fresh interpreter's seeding, not the zygote's state
    tempfile.tempdir = None  # found again from the job's TMPDIR
    script = req["script"]
    sys.argv = [script]
    sys.orig_argv = [sys.executable, script]
    sys.path[0] = os.path.dirname(os.path.abspath(script))  # as `python SCRIPT` sets it
    _extend_path(_added_path(req["env"]))
    code = 0
    try:
        import runpy

        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        threading._shutdown()  # what the interpreter does at exit: wait for the job's own threads
        atexit._run_exitfuncs()
    finally:
        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except Exception:
                pass
        os._exit(code)


def _paths(env: dict) -> list[str]:
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _added_path(env: dict) -> list[str] | None:
    """The folders `env`'s PYTHONPATH puts after the server's (a test's plugins), or None where it
    does not extend the server's or one of them holds a module or package of a name already imported
    (the fresh process could have imported that one instead)."""
    ours, theirs = _paths(IMPORT_ENV), _paths(env)
    if theirs[: len(ours)] != ours:
        return None
    imported = {name.partition(".")[0] for name in sys.modules}
    for folder in theirs[len(ours) :]:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        if any(name.partition(".")[0] in imported for name in names):
            return None
    return theirs[len(ours) :]


def _extend_path(added: list[str]) -> None:
    """Put `added` on sys.path where the interpreter puts PYTHONPATH's last folders: after the server's."""
    ours = _paths(IMPORT_ENV)
    at = max((sys.path.index(p) + 1 for p in ours if p in sys.path), default=1)
    sys.path[at:at] = added


def _at_import(env: dict) -> dict:
    """What of `env` the preimported libraries may have read at import (PWD and such, CIRCUITLOC_*
    and PYTHONPATH aside: _added_path judges that one)."""
    return {k: v for k, v in {"TQDM_DISABLE": "1", **env}.items()
            if k not in BENIGN and k != "PYTHONPATH" and not k.startswith("CIRCUITLOC_")}


def _differs(env: dict) -> list[str]:
    """The variables of a job's environment that keep it from forking: none where it is the one
    PREIMPORT was imported under (a PYTHONPATH that only adds folders which shadow nothing imported)."""
    ours, theirs = _at_import(IMPORT_ENV), _at_import(env)
    keys = sorted(k for k in {**ours, **theirs} if ours.get(k) != theirs.get(k))
    return keys + ["PYTHONPATH"] * (_added_path(env) is None)


def _zygote(listener, ctl: int) -> None:
    """The call's job zygote: fork a job for each launcher that connects, answer its exit status,
    kill a job whose launcher is gone; when the call closes `ctl`, kill what is left and exit."""
    jobs, conns = {}, {}  # pid -> connection, connection -> pid
    watch = [listener, ctl]
    while True:
        ready, _, _ = select.select(watch + list(conns), [], [], 0.05)
        for r in ready:
            if r is listener:
                conn, _ = listener.accept()
                _, anc, _, _ = conn.recvmsg(1, socket.CMSG_SPACE(3 * array.array("i").itemsize))
                fds = array.array("i")
                for level, kind, data in anc:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                req = json.loads(conn.makefile("rb").readline())
                differs = _differs(req["env"])
                forked = len(fds) == 3 and not differs
                if os.environ.get(TRACE):  # a line a job: how it ran, its script, what kept it from forking
                    with open(os.environ[TRACE], "a", encoding="utf-8") as trace:
                        trace.write(f"{'forked' if forked else 'fresh'} {req['script']} {' '.join(differs)}\n")
                if not forked:
                    conn.sendall(b'{"fresh": true}\n')
                    conn.close()
                else:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:
                        try:
                            _job(req, list(fds), [listener, *conns, conn])
                        except BaseException:  # a job's process must never return into this loop
                            import traceback

                            traceback.print_exc()
                        finally:
                            os._exit(1)
                    jobs[pid], conns[conn] = conn, pid
                for fd in fds:
                    os.close(fd)
            elif r == ctl:
                if not os.read(ctl, 1):
                    for pid in jobs:
                        os.kill(pid, signal.SIGKILL)
                    for pid in jobs:
                        os.waitpid(pid, 0)
                    os._exit(0)
            elif not r.recv(1):  # the launcher is gone (killed): its job goes with it
                os.kill(conns[r], signal.SIGKILL)
        while jobs:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            conn = jobs.pop(pid)
            del conns[conn]
            answer = ({"signal": os.WTERMSIG(status)} if os.WIFSIGNALED(status)
                      else {"rc": os.waitstatus_to_exitcode(status)})
            try:
                conn.sendall((json.dumps(answer) + "\n").encode())
            except OSError:
                pass
            conn.close()


def _launcher(tmp: str) -> str:
    """Fork this call's job zygote and write its launcher into `tmp`; the launcher's path."""
    sock = os.path.join(tmp, "jobs.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sock)
    listener.listen(64)
    ctl, keep = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(keep)
        try:
            _zygote(listener, ctl)
        finally:
            os._exit(1)
    os.close(ctl)
    listener.close()

    def stop():
        os.close(keep)
        os.waitpid(pid, 0)  # so that its jobs' CPU is counted in this call's

    atexit.register(stop)
    path = os.path.join(tmp, "python")
    with open(path, "w", encoding="utf-8") as f:
        f.write(LAUNCHER.format(real=sys.executable, sock=sock, fresh=FRESH_SCRIPTS))
    os.chmod(path, 0o755)
    return path


def _fork_jobs(launcher: str) -> None:
    """Snakemake runs a Python script job as `{py_exec} SCRIPT` with py_exec this interpreter
    (snakemake.script.PythonScript.execute_script): the launcher instead. sys.executable itself stays,
    since the workflow records it (plan.hooks.command)."""
    from snakemake.script import PythonScript

    run = PythonScript._execute_cmd

    def _execute_cmd(self, cmd, **kwargs):
        if kwargs.get("py_exec") == sys.executable:
            kwargs["py_exec"] = launcher
        return run(self, cmd, **kwargs)

    PythonScript._execute_cmd = _execute_cmd


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
    added = _added_path(req["env"])
    if added is None:  # a module it would import at start may be another: start it fresh, here
        os.execv(sys.executable, [sys.executable, "-m", "snakemake", *req["args"]])
    _extend_path(added)
    import snakemake
    from snakemake.cli import main

    sys.argv = [os.path.join(os.path.dirname(snakemake.__file__), "__main__.py"), *req["args"]]  # as -m sets it
    sys.orig_argv = [sys.executable, "-m", "snakemake", *req["args"]]
    if req["jobs"]:
        _fork_jobs(_launcher(os.path.dirname(req["stdout"])))
    main(req["args"])  # raises SystemExit, so the child exits as Snakemake would


def serve() -> None:
    """Read one JSON request a line on stdin, fork a child for it, answer {rc, timed_out, cpu} a line."""
    from snakemake.cli import main  # noqa: F401 - the import every call would otherwise pay
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    ExecutorPluginRegistry()  # and its plugins' (found and imported on first use)
    os.environ.update(JOB_ENV)
    os.environ.setdefault("TQDM_DISABLE", "1")
    IMPORT_ENV.update(os.environ)
    for name in PREIMPORT if os.environ.get(ENV, "1") != "calls" else ():  # calls only: every job fresh
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    gc.freeze()  # what is imported stays out of every child's collections (and its pages shared)
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


def _runs_jobs(args) -> bool:
    """Whether a call may run script jobs (so needs a zygote: about 0.2 s of CPU a call)."""
    return os.environ.get(ENV, "1") != "calls" and not {"-n", "--dry-run", "--dryrun", "--touch", "-t"} & set(args)


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
        the one a call may only extend, or runs as a subprocess)."""
        cmd = [sys.executable, "-m", "snakemake", *args]
        if os.environ.get(ENV, "1") == "0" or not (env.get("PYTHONPATH") or "").startswith(
                serve_env.get("PYTHONPATH") or ""):
            return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        with self.lock, tempfile.TemporaryDirectory(prefix="snakemake-call-") as tmp:
            if self.proc is None or self.proc.poll() is not None:
                self._start(serve_env)
            req = {"args": [str(a) for a in args], "cwd": os.path.abspath(cwd), "env": dict(env),
                   "timeout": timeout, "jobs": _runs_jobs(args),
                   "stdout": os.path.join(tmp, "out"), "stderr": os.path.join(tmp, "err")}
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
