"""`revision:` pins a hub model (and the fahamu dataset) to one snapshot: it is passed to the hub,
the commit the files came from is written into card.json, and changing it reruns the model and what
follows. The hub is unreachable in tests: a local Hugging Face cache layout stands in for it
(models--{org}--{name}/snapshots/{commit}/ and refs/{branch}), read with HF_HUB_OFFLINE=1."""

import json

import pytest
import yaml
from helpers import tiny_model, word_tokenizer
from workflow_helpers import copy_workflow, planned_jobs, smk, smk_env

from circuitloc.errors import ModelSourceError
from circuitloc.plan.config import hub
from circuitloc.tasks import fahamu

C1, C2, C3 = "1" * 40, "2" * 40, "3" * 40


def fake_cache(root):
    """HF_HUB_CACHE with org/tiny at two commits (main -> C1, a tag v2 -> C2), an id without an
    owner (`gpt2`, a NeoX stand-in) at C3, and fahamu/ioi at C1."""
    tok = word_tokenizer()
    model = tiny_model("qwen_gqa", len(tok))
    repo = root / "models--org--tiny"
    for commit in (C1, C2):
        snap = repo / "snapshots" / commit
        model.save_pretrained(snap)
        tok.save_pretrained(snap)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(C1)
    (repo / "refs" / "v2").write_text(C2)
    owner_less = root / "models--gpt2"
    tiny_model("neox", len(tok)).save_pretrained(owner_less / "snapshots" / C3)
    tok.save_pretrained(owner_less / "snapshots" / C3)
    (owner_less / "refs").mkdir()
    (owner_less / "refs" / "main").write_text(C3)
    data = root / "datasets--fahamu--ioi"
    (data / "snapshots" / C1).mkdir(parents=True)
    (data / "snapshots" / C1 / "mecha_ioi_200k.parquet").write_bytes(b"stand-in")
    (data / "refs").mkdir()
    (data / "refs" / "main").write_text(C1)
    return root


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return fake_cache(tmp_path_factory.mktemp("hf") / "hub")


@pytest.fixture
def offline(cache, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_snapshot_commit_reads_the_cache_layout(tmp_path):
    assert hub.snapshot_commit(f"/x/hub/models--a--b/snapshots/{C1}") == C1
    assert hub.snapshot_commit(f"/x/hub/datasets--a--b/snapshots/{C2}/sub/f.parquet") == C2
    assert hub.snapshot_commit(tmp_path) is None  # a local copy has no commit


def test_revision_reaches_the_hub_and_the_card(offline, tmp_path):
    from circuitloc.engine.select import engine_of
    from circuitloc.models.build import build_model
    from circuitloc.models.load import resolve_hf

    assert hub.snapshot_commit(resolve_hf("m", "org/tiny")) == C1  # main
    assert hub.snapshot_commit(resolve_hf("m", "org/tiny", "v2")) == C2  # a tag
    assert hub.snapshot_commit(resolve_hf("m", "org/tiny", C2)) == C2  # a commit
    with pytest.raises(ModelSourceError, match=r"at revision nope.*--revision nope"):
        resolve_hf("m", "org/tiny", "nope")
    with pytest.raises(ModelSourceError, match="revision .* is for hub ids"):
        resolve_hf("m", str(tmp_path), "v2")
    card = build_model("m", {"source": "hf", "hf": "org/tiny", "revision": "v2"}, tmp_path / "card.json",
                       tmp_path / "weights", engine_of)
    assert card.revision == C2 and card.revision_requested == "v2"
    assert json.loads((tmp_path / "card.json").read_text())["revision"] == C2


def test_a_hub_id_without_an_owner_resolves_through_the_cache(offline, tmp_path, monkeypatch):
    """`hf: gpt2` is what from_pretrained takes: a hub id, not a local directory named gpt2."""
    from circuitloc.engine.select import engine_of
    from circuitloc.models.build import build_model
    from circuitloc.models.load import resolve_hf

    monkeypatch.chdir(tmp_path)  # no ./gpt2 here
    path = resolve_hf("g", "gpt2")
    assert hub.snapshot_commit(path) == C3 and path.startswith(str(offline / "models--gpt2"))
    card = build_model("g", {"source": "hf", "hf": "gpt2"}, tmp_path / "card.json", tmp_path / "weights", engine_of)
    assert card.revision == C3 and card.architecture == "GPTNeoXForCausalLM"
    with pytest.raises(ModelSourceError, match=r"gpt3 not found in the Hugging Face cache"):
        resolve_hf("g", "gpt3")


def test_an_existing_local_directory_wins_over_a_hub_id(offline, tmp_dirs_gpt2):
    """A directory ./gpt2 in the working directory is what from_pretrained('gpt2') would open."""
    from circuitloc.models.load import resolve_hf

    assert resolve_hf("g", "gpt2") == "gpt2" and hub.snapshot_commit(resolve_hf("g", "gpt2")) is None


@pytest.fixture
def tmp_dirs_gpt2(tmp_path, monkeypatch):
    tok = word_tokenizer()
    tiny_model("qwen_mha", len(tok)).save_pretrained(tmp_path / "gpt2")
    tok.save_pretrained(tmp_path / "gpt2")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "gpt2"


def test_fahamu_revision_is_passed_and_recorded(offline):
    path, commit = fahamu.fahamu_source({"kind": "fahamu"})
    assert commit == C1 and path.name == "mecha_ioi_200k.parquet"
    assert fahamu.fahamu_source({"kind": "fahamu", "revision": C1})[1] == C1
    from circuitloc.errors import DatasetError

    with pytest.raises(DatasetError, match=r"at revision v9.*--revision v9"):
        fahamu.fahamu_source({"kind": "fahamu", "revision": "v9"})


@pytest.mark.workflow
def test_a_revision_change_reruns_the_model(cache, tmp_path):
    """Built at v2: the card records C2; asking for main (C1) plans the model again, and what follows."""
    run = copy_workflow(tmp_path / "wf")
    base = yaml.safe_load((run / ".test" / "config.yaml").read_text())
    cfg = {**base, "models": {"m": {"source": "hf", "hf": "org/tiny", "revision": "v2", "family": "t"}}}
    (run / "rev.yaml").write_text(yaml.safe_dump(cfg))
    env = smk_env(HF_HUB_CACHE=str(cache))
    smk("results/models/m/card.json", "--cores", "1", "--configfile", "rev.yaml", cwd=run, env=env)
    assert json.loads((run / "results/models/m/card.json").read_text())["revision"] == C2
    same = planned_jobs(smk("-n", "results/models/m/card.json", "--configfile", "rev.yaml", cwd=run, env=env).stdout)
    assert same == []
    cfg["models"]["m"]["revision"] = "main"
    (run / "rev.yaml").write_text(yaml.safe_dump(cfg))
    jobs = planned_jobs(smk("-n", "--configfile", "rev.yaml", cwd=run, env=env).stdout)
    assert ("model_hf", {"model": "m"}) in jobs
