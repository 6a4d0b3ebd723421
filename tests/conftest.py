import fcntl
import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

from helpers import tiny_model, word_tokenizer  # noqa: E402
from workflow_helpers import CORES, copy_workflow, smk  # noqa: E402


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """Tiny random GPT-NeoX (Pythia's architecture) and Qwen2 (MHA and GQA) in Hugging Face layout."""
    root = tmp_path_factory.mktemp("tiny")
    tok = word_tokenizer()
    out = {}
    for kind in ("neox", "qwen_gqa", "qwen_mha"):
        m = tiny_model(kind, len(tok))
        m.save_pretrained(root / kind)
        tok.save_pretrained(root / kind)
        out[kind] = root / kind
    return out


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory, worker_id):
    """The workflow copied to a scratch directory and run on the tiny test config (default target:
    every table and figure, and results/report.html). Shared by the workflow, report and SLURM tests,
    and built once per test session: under pytest-xdist the first worker to need it builds it in the
    session's directory, holding a file lock, and the others wait for it and reuse it. Tests that
    change a run copy it first."""
    shared = tmp_path_factory.getbasetemp().parent if worker_id != "master" else tmp_path_factory.mktemp("shared")
    work, done = shared / "tiny_run", shared / "tiny_run" / "run.console"
    with open(shared / "tiny_run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.is_file():  # not built yet, or a build that failed: from scratch
            shutil.rmtree(work, ignore_errors=True)
            copy_workflow(work)
            p = smk("--cores", CORES, "--configfile", ".test/config.yaml", cwd=work, timeout=1500)
            done.write_text(p.stdout + p.stderr)  # what the user saw, for the console tests
    return work


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
