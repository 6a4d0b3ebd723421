"""Every file a result depends on is an input: editing one resource file plans exactly the jobs that
read it and what follows from them, nothing else (dry runs on a scratch copy of the workflow whose
outputs are stand-in files, so no model is trained or run)."""

import os

import polars as pl
import pytest
import yaml
from workflow_helpers import copy_workflow, planned_jobs, smk, stand_in_outputs

MODELS = ("tiny", "hf_a", "hf_b")
CONFIG = {
    "seed": 0, "device": "cpu", "max_batch_tokens": 4096,
    "models": {
        # a toy's vocabulary and training data come from the IOI resources and the facts file
        "tiny": {"source": "toy", "family": "toy",
                 "toy": {"n_layers": 1, "d_model": 32, "n_heads": 2, "n_kv_heads": 2, "steps": 1}},
        # never loaded: the dry runs only plan (hf_b reads its IOI sentences from a local fahamu file)
        "hf_a": {"source": "hf", "hf": "EleutherAI/pythia-14m", "family": "fam"},
        "hf_b": {"source": "hf", "hf": "EleutherAI/pythia-31m", "family": "fam",
                 "tasks": {"ioi": {"source": {"kind": "fahamu", "path": "fahamu.parquet"}}}},
    },
    "tasks": {"ioi": {"source": {"kind": "generate"}, "n": 8, "n_score": 4},
              "induction": {"n": 8, "n_score": 4, "prefix_len": [3, 5], "suffix_len": [6, 10]},
              "facts": {"top_k": 3, "n_score": 4}},
    "curves": {"methods": ["ranked"], "threshold": 0.8, "max_steps": 2},
    # said here: the default config's ablations would merge in (config/config.yaml always loads)
    "ablation": {"kinds": ["zero"], "units": ["query"]},
}


def _planned(out: str) -> list[tuple[str, tuple]]:
    """(rule, wildcards) of every job a dry run lists, sorted."""
    return sorted((rule, tuple(sorted(wc.items()))) for rule, wc in planned_jobs(out))


def _dry(run, *args):
    return _planned(smk("-n", "--configfile", "inputs.yaml", *args, cwd=run).stdout)


def _build_finished(run):
    copy_workflow(run)
    (run / "inputs.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    # a dry run never reads its sentences, but checks the file is a parquet with their column
    pl.DataFrame({"ioi_sentences": ["stand-in"]}).write_parquet(run / "fahamu.parquet")
    out = smk("-n", "--configfile", "inputs.yaml", cwd=run).stdout
    stand_in_outputs(run, out)
    smk("--touch", "--cores", "1", "--configfile", "inputs.yaml", cwd=run)  # records, mtimes in DAG order
    assert _dry(run) == [], "the stand-in run is not up to date"


@pytest.fixture(scope="module")
def finished(built_once):
    """A scratch workflow whose every output exists and is up to date (stand-ins, then --touch),
    built once per session; each worker edits its own copy."""
    return built_once("inputs_finished", _build_finished)


def _dataset(task, *models):
    return [f"results/data/{task}/{m}.parquet" for m in models]


# resource file -> the outputs of the jobs that read it directly (everything after them follows)
CASES = {
    "resources/facts/facts.tsv": _dataset("facts", *MODELS) + ["results/models/tiny/card.json"],
    # the 30 templates: the generator's and the fahamu reader's (every IOI dataset) and the toy's vocabulary
    "resources/ioi/templates.txt": _dataset("ioi", "tiny", "hf_a", "hf_b") + ["results/models/tiny/card.json"],
    # the generator's names: not read for hf_b, whose sentences come from fahamu; its places and
    # objects are (a sentence outside the 30 templates takes its id from its skeleton)
    "resources/ioi/names.txt": _dataset("ioi", "tiny", "hf_a") + ["results/models/tiny/card.json"],
    "resources/ioi/places.txt": _dataset("ioi", "tiny", "hf_a", "hf_b") + ["results/models/tiny/card.json"],
    "resources/ioi/objects.txt": _dataset("ioi", "tiny", "hf_a", "hf_b") + ["results/models/tiny/card.json"],
    "fahamu.parquet": _dataset("ioi", "hf_b"),
    "resources/neutral.txt": [f"results/specificity/{m}/zero-query.parquet" for m in MODELS],
}


@pytest.mark.parametrize("resource", list(CASES))
def test_editing_a_resource_plans_exactly_its_dependent_jobs(finished, resource):
    expected = _dry(finished, "--forcerun", *CASES[resource])  # those jobs and everything downstream
    path = finished / resource
    original, st = path.read_bytes(), path.stat()
    try:
        # an edit: new content (a mere touch may be recognised by checksum); a parquet stays one
        if path.suffix == ".parquet":
            pl.DataFrame({"ioi_sentences": ["stand-in, edited"]}).write_parquet(path)
        else:
            path.write_bytes(original + b"\n")
        planned = _dry(finished)
    finally:  # the file as it was, content and time: the run is up to date again for the other cases
        path.write_bytes(original)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_mtime_ns == st.st_mtime_ns
    assert planned and planned == expected
    per_model = [(rule, dict(wc)) for rule, wc in planned if dict(wc).get("model")]
    if resource.endswith("facts.tsv"):
        # the hf models: only their facts jobs (and the specificity that reads every task's data)
        for rule, wc in per_model:
            assert wc["model"] == "tiny" or wc.get("task") in ("facts", "facts_shared") \
                or rule in ("dataset_shared_facts", "specificity"), (rule, wc)
    if resource == "fahamu.parquet":
        assert not any(rule in ("model", "model_hf") for rule, _ in planned)
        assert {wc["model"] for _, wc in per_model} == {"hf_b"}
