import os

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
def tiny_run(tmp_path_factory):
    """The workflow copied to a scratch directory and run on the tiny test config (default target:
    every table and figure, and results/report.html). Shared by the workflow, report and SLURM tests."""
    work = copy_workflow(tmp_path_factory.mktemp("wf"))
    p = smk("--cores", CORES, "--configfile", ".test/config.yaml", cwd=work, timeout=1500)
    (work / "run.console").write_text(p.stdout + p.stderr)  # what the user saw, for the console tests
    return work


def pytest_collection_modifyitems(config, items):
    """With pytest-xdist's `--dist loadgroup` (pyproject's addopts), the tests that share an expensive
    fixture run in one worker, so it is built once: every test over the tiny workflow run in one
    group, every other test with the tests of its file (module-scoped fixtures)."""
    for item in items:
        group = "tiny_run" if "tiny_run" in getattr(item, "fixturenames", ()) else item.path.name
        item.add_marker(pytest.mark.xdist_group(group))
