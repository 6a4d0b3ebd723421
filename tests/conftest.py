import fcntl
import os
import shutil
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
from workflow_helpers import CORES, copy_workflow, smk  # noqa: E402


def pytest_configure(config):
    """One torch thread in each process that runs tests (a worker, or pytest without workers);
    pytest-xdist's controller runs none and does not import torch (seconds of CPU a run)."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        import torch

        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """Tiny random GPT-NeoX (Pythia's architecture) and Qwen2 (MHA and GQA) in Hugging Face layout."""
    from helpers import tiny_model, word_tokenizer

    root = tmp_path_factory.mktemp("tiny")
    tok = word_tokenizer()
    out = {}
    for kind in ("neox", "qwen_gqa", "qwen_mha"):
        m = tiny_model(kind, len(tok))
        m.save_pretrained(root / kind)
        tok.save_pretrained(root / kind)
        out[kind] = root / kind
    return out


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

    def build(work):
        copy_workflow(work)
        p = smk("--cores", CORES, "--configfile", ".test/config.yaml", cwd=work, timeout=1500)
        (work / "run.console").write_text(p.stdout + p.stderr)  # what the user saw, for the console tests

    return _built_once(_session_dir(tmp_path_factory, worker_id), "tiny_run", build)


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
