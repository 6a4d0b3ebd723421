"""A failed job's reason on the console of a real Snakemake run (the faults themselves:
unit/test_faults.py)."""

import json

import pytest
from workflow_helpers import copy_workflow, smk


@pytest.mark.workflow
def test_a_failing_jobs_reason_is_on_the_console(tmp_path):
    """A model directory without a model in it (a missing one is refused when the run is planned):
    the job's reason, not only `message: None`, is printed last."""
    work = copy_workflow(tmp_path / "wf")
    (work / "empty_model").mkdir()
    (work / "bad.yaml").write_text(json.dumps({
        "seed": 0, "device": "cpu", "max_batch_tokens": 4096,
        "models": {"bad": {"source": "hf", "hf": "empty_model"}},
        "tasks": {"ioi": {"source": {"kind": "generate"}, "n": 20, "n_score": 5}},
        "curves": {"methods": ["ranked"], "threshold": 0.8, "max_steps": 3}}))
    p = smk("results/models/bad/card.json", "--cores", "1", "--configfile", "bad.yaml", cwd=work, check=False,
            timeout=300)
    assert p.returncode != 0
    console = p.stdout + p.stderr
    tail = console[console.index("why the run failed"):]
    assert ("circuitloc: model_hf job failed: model 'bad': empty_model has no config.json (not a Hugging Face "
            "model directory)  [log: results/logs/models/bad.log]") in tail
