"""Every file a result depends on is an input: editing one resource file plans exactly the jobs that
read it and what follows from them, nothing else (dry runs on a scratch copy of the workflow whose
outputs are stand-in files, so no model is trained or run)."""

import copy
import json
import os
import shutil

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


# ---- a changed path: every changed input reruns what depends on it --------------------------------
# One stored toy whose IOI sentences come from a local fahamu parquet and whose facts from the run's
# own facts TSV; a finished stand-in run of it (no model is loaded: dry runs only plan).
STORED = {
    "seed": 0, "device": "cpu", "max_batch_tokens": 4096,
    "models": {"stored": {"source": "toy", "family": "toy", "toy": {"checkpoint": "ckpt_a"}}},
    "tasks": {"ioi": {"source": {"kind": "fahamu", "path": "ioi_a.parquet"}, "n": 8, "n_score": 4},
              "induction": None,
              "facts": {"top_k": 3, "n_score": 4, "path": "facts_a.tsv"}},
    "curves": {"methods": ["ranked"], "threshold": 0.8, "max_steps": 2},
    "ablation": {"kinds": ["zero"], "units": ["query"]},
}
WEIGHTS_BYTES = 1000  # the stand-in card's record of its one weights file


def _stored_dry(run, config, *args, check=True):
    (run / "case.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return smk("-n", "--configfile", "case.yaml", *args, cwd=run, check=check)


def _build_stored(run):
    copy_workflow(run)
    for ckpt, toy in (("ckpt_a", "tiny_mha"), ("ckpt_b", "tiny_gqa")):
        shutil.copytree(run / ".test" / "models" / toy, run / ckpt)
    for name in ("a", "b"):
        pl.DataFrame({"ioi_sentences": [f"stand-in {name}"]}).write_parquet(run / f"ioi_{name}.parquet")
    facts = (run / "resources" / "facts" / "facts.tsv").read_text().splitlines()
    (run / "facts_a.tsv").write_text("\n".join(facts) + "\n")
    (run / "facts_b.tsv").write_text("\n".join(facts[:-1]) + "\n")  # another file: one fact fewer
    out = _stored_dry(run, STORED).stdout
    stand_in_outputs(run, out)
    # the model's card as the model job writes it, as far as the plan reads it: its weights' record
    (run / "results/models/stored/weights/model.safetensors").write_bytes(b"w" * WEIGHTS_BYTES)
    record = {"files": {"model.safetensors": {"bytes": WEIGHTS_BYTES, "sha256": "0" * 64}}}
    (run / "results/models/stored/card.json").write_text(json.dumps({"name": "stored", "weights": record}))
    # every job recorded (its params, inputs): the model's too, whose inputs are older than its outputs
    smk("--touch", "--forceall", "--cores", "1", "--configfile", "case.yaml", cwd=run)
    assert _planned(_stored_dry(run, STORED).stdout) == [], "the stand-in run is not up to date"


@pytest.fixture(scope="module")
def stored(built_once):
    return built_once("inputs_stored", _build_stored)


def _changed(key, value):
    config = copy.deepcopy(STORED)
    *where, last = key.split(".")
    block = config
    for k in where:
        block = block[k]
    block[last] = value
    return config


# key -> (the file it names now, another that exists, the output of the job that reads it)
PATHS = {
    "tasks.facts.path": ("facts_b.tsv", "results/data/facts/stored.parquet"),
    "tasks.ioi.source.path": ("ioi_b.parquet", "results/data/ioi/stored.parquet"),
    "models.stored.toy.checkpoint": ("ckpt_b", "results/models/stored/card.json"),
}


@pytest.mark.workflow
@pytest.mark.parametrize("key", list(PATHS))
def test_a_changed_path_reruns_what_depends_on_it_and_a_missing_one_stops_the_plan(stored, key):
    """A finished run, one path pointed elsewhere: at a file that does not exist, the plan stops with
    one line naming the key and the path (Snakemake alone would skip the missing input, as its
    consumers' outputs exist, and keep the old file's numbers: `Nothing to be done`); at another file,
    the job that reads it and everything after it are planned, as a forcerun of its output plans them."""
    other, output = PATHS[key]
    missing = _stored_dry(stored, _changed(key, "nowhere"), check=False)
    assert missing.returncode != 0, missing.stdout[-2000:]
    what = "directory not found" if key.endswith("checkpoint") else "file not found"
    assert f"config: {key}: {what}: nowhere" in missing.stderr, missing.stderr[-2000:]
    assert planned_jobs(missing.stdout) == []
    expected = _planned(_stored_dry(stored, STORED, "--forcerun", output).stdout)
    assert expected and _planned(_stored_dry(stored, _changed(key, other)).stdout) == expected


@pytest.mark.workflow
@pytest.mark.parametrize("damage", ["deleted", "cut", "folder"])
def test_lost_weights_are_rebuilt_by_a_plain_rerun_and_nothing_after_them(stored, damage):
    """A weights file deleted (or cut short) inside the model's weights folder, which Snakemake does
    not look into, or the whole folder deleted: the plain command plans the model's job (rule
    model_rebuilt) and says why, and plans nothing that reads its card (the rebuild writes the same
    card), where a forcerun of the card would plan every job after it."""
    folder = stored / "results/models/stored/weights"
    weights = folder / "model.safetensors"
    before = weights.read_bytes()
    try:
        if damage == "folder":
            shutil.rmtree(folder)
        else:
            weights.unlink() if damage == "deleted" else weights.write_bytes(before[:10])
        p = _stored_dry(stored, STORED)
    finally:
        folder.mkdir(exist_ok=True)
        weights.write_bytes(before)
    card = "results/models/stored/card.json"
    why = f"has 10 bytes, its card says {WEIGHTS_BYTES}" if damage == "cut" else "is missing"
    assert f"circuitloc: {card}: its weights file results/models/stored/weights/model.safetensors {why}" in p.stderr
    assert _planned(p.stdout) == [("all", ()), ("model_rebuilt", (("model", "stored"),))]
    assert len(_planned(_stored_dry(stored, STORED, "--forcerun", card).stdout)) > 3  # the card's readers
