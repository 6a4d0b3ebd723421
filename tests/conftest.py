import fcntl
import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
from snakemake_fork import SERVER  # noqa: E402
from workflow_helpers import CORES, copy_workflow, smk  # noqa: E402


def pytest_addoption(parser):
    parser.addoption("--cpu-durations", type=int, default=25, metavar="N",
                     help="name the N tests that took the most CPU (setup to teardown, their subprocesses "
                          "included) and the whole suite's CPU, where --durations names wall-clock time "
                          "(default 25; 0: none). An option of tests/, not in pyproject's addopts, so that "
                          "pytest run elsewhere (docs/, bench/) does not meet an option it lacks")


def _cpu() -> float:
    """CPU seconds of this process and of its children that have ended (Snakemake and its jobs), and of
    the Snakemake calls the fork server ran for it (tests/snakemake_fork.py: not this process's children)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + SERVER.cpu


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.cpu_start = _cpu()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if call.when == "teardown" and hasattr(item, "cpu_start"):  # sent to pytest-xdist's controller with it
        report.user_properties.append(("cpu_s", _cpu() - item.cpu_start))


def pytest_terminal_summary(terminalreporter, config):
    n = config.getoption("cpu_durations", 0)
    cpu = [(dict(r.user_properties)["cpu_s"], r.nodeid) for reports in terminalreporter.stats.values()
           for r in reports if getattr(r, "when", None) == "teardown" and "cpu_s" in dict(r.user_properties)]
    if not n or not cpu:
        return
    terminalreporter.write_sep("=", f"most CPU: {min(n, len(cpu))} of {len(cpu)} tests, "
                                    f"{sum(c for c, _ in cpu):.0f} s of CPU in all")
    for c, nodeid in sorted(cpu, reverse=True)[:n]:
        terminalreporter.write_line(f"{c:8.2f}s cpu  {nodeid}")


def pytest_configure(config):
    """One torch thread in each process that runs tests (a worker, or pytest without workers);
    pytest-xdist's controller runs none and does not import torch (seconds of CPU a run)."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        import torch

        torch.set_num_threads(1)


KINDS = ("neox", "qwen_gqa", "qwen_mha")


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory, worker_id):
    """Tiny random GPT-NeoX (Pythia's architecture) and Qwen2 (MHA and GQA) in Hugging Face layout,
    made once for the test session (`_built_once`: 3 s of CPU a worker otherwise). Read-only."""

    def build(root):
        from helpers import tiny_model, word_tokenizer

        tok = word_tokenizer()
        for kind in KINDS:
            tiny_model(kind, len(tok)).save_pretrained(root / kind)
            tok.save_pretrained(root / kind)

    root = _built_once(_session_dir(tmp_path_factory, worker_id), "tiny_dirs", build)
    return {kind: root / kind for kind in KINDS}


def _session_dir(tmp_path_factory, worker_id) -> Path:
    """Where a test session keeps what its workers share (pytest-xdist: the parent of theirs)."""
    return tmp_path_factory.getbasetemp().parent if worker_id != "master" else tmp_path_factory.getbasetemp()


def _built_once(shared: Path, name: str, build) -> Path:
    """`shared/name`, made by `build(path)` once per test session: under pytest-xdist the first worker
    to need it builds it holding a file lock, and the others wait for it and reuse it. A build that
    failed (no `.done` mark) is redone from scratch."""
    work, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_file():
            shutil.rmtree(work, ignore_errors=True)
            build(work)
            done.touch()
    return work


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, worker_id):
    """The workflow copied to a scratch directory and run on the tiny test config (default target:
    every table and figure, and results/report.html). Shared by the workflow, report and SLURM tests,
    and built once per test session (`_built_once`). Tests that change a run copy it first."""

    given = os.environ.get("CIRCUITLOC_TEST_TINY_RUN")
    if given:  # a finished run of this checkout's code, reused as it is (a loop over a few tests)
        return Path(given)

    def build(work):
        copy_workflow(work)
        p = smk("--cores", CORES, "--configfile", ".test/config.yaml", cwd=work, timeout=1500)
        (work / "run.console").write_text(p.stdout + p.stderr)  # what the user saw, for the console tests

    return _built_once(_session_dir(tmp_path_factory, worker_id), "tiny_run", build)


@pytest.fixture(scope="session")
def shared_once(tmp_path_factory, worker_id):
    """`shared_once(name, build)`: the directory `build(path)` made once for the whole test session,
    itself (read-only: every worker reads the same one). For a module's fixture whose tests only read
    what it made: pytest-xdist hands a module's tests to both workers, and a worker that ran another
    module's test in between sets a module fixture up again, so a module-scoped fixture that computes
    (a subprocess of seconds) would compute two or three times a session."""
    shared = _session_dir(tmp_path_factory, worker_id)
    return lambda name, build: _built_once(shared, name, build)


@pytest.fixture(scope="session")
def built_once(tmp_path_factory, worker_id):
    """`built_once(name, build)`: a copy, this worker's own, of the directory `build(path)` made once
    for the whole test session. For a module's fixture whose tests change what they get (and put it
    back), which each worker would otherwise build for itself."""
    shared = _session_dir(tmp_path_factory, worker_id)

    def get(name, build):
        dest = tmp_path_factory.mktemp(name) / name
        shutil.copytree(_built_once(shared, name, build), dest, symlinks=True)  # modification times kept
        return dest

    return get


@pytest.hookimpl(tryfirst=True)  # the order is set before other plugins' hooks see the items
def pytest_collection_modifyitems(config, items):
    """The tiny run's first user first, so one worker builds it while the others run every test that
    does not need it; its other users last, when it is built, the `long` ones (tens of seconds of
    jobs) first among them, longest first (`long(seconds)`), so the short ones even out the workers'
    ends."""
    def uses(item):
        return "tiny_run" in getattr(item, "fixturenames", ())

    def seconds(item):
        mark = item.get_closest_marker("long")
        return (mark.args[0] if mark.args else 30) if mark else 0

    users = [item for item in items if uses(item)]
    rest = sorted(users[1:], key=seconds, reverse=True)  # stable: file order kept among equals
    items[:] = users[:1] + [item for item in items if not uses(item)] + rest
