"""`hf:` takes what from_pretrained takes: a hub id with or without an owner, or a local directory.
A path that does not exist is an error when the plan is made, naming models.<name>.hf (in a dry
run: workflow/test_hf_names_snakemake.py)."""

import pytest

from circuitloc.errors import ConfigError
from circuitloc.plan.config import hub

CANDIDATES = ["gpt2", "EleutherAI/pythia-160m", "Qwen/Qwen2.5-0.5B", "pythia_1.4b", "_x", "x_", "a.b-c_d",
              ".repo", "repo.", "-repo", "repo-", "foo--bar", "foo..bar", "foo.git", "a/b/c", "/abs", "a/", "/a",
              "", "a b", "a:b", "x/.y", "x/y.git", "a" * 96, "a" * 97, "o" * 96 + "/" + "n" * 96]


@pytest.mark.parametrize("value", CANDIDATES)
def test_hub_ids_are_what_huggingface_hub_accepts(value):
    """The plan's stdlib rule agrees with huggingface_hub's own validator on every candidate."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)
        theirs = value != ""
    except HFValidationError:
        theirs = False
    assert hub.is_hub_id(value) == theirs


def test_a_local_directory_is_a_path_whatever_it_looks_like(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt2").mkdir()
    (tmp_path / "org" / "name").mkdir(parents=True)
    assert hub.hf_source("m", "gpt2") == ("dir", "gpt2")
    assert hub.hf_source("m", "org/name") == ("dir", "org/name")
    assert hub.hf_source("m", str(tmp_path / "gpt2")) == ("dir", str(tmp_path / "gpt2"))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert hub.hf_source("m", "~/gpt2") == ("dir", str(tmp_path / "gpt2"))


def test_a_missing_directory_is_a_hub_id_only_when_it_can_be_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert hub.hf_source("m", "gpt2") == ("hub", "gpt2")
    assert hub.hf_source("m", "EleutherAI/pythia-160m", "main") == ("hub", "EleutherAI/pythia-160m")
    for path in ("/no/such", "./gpt2", "../gpt2", "~/gpt2-nope", "models/org/name"):
        with pytest.raises(ConfigError, match=r"^config: models\.m\.hf: local directory .* does not exist"):
            hub.hf_source("m", path)
    with pytest.raises(ConfigError, match=r"models\.m\.hf: 'foo--bar' is neither"):
        hub.hf_source("m", "foo--bar")
    (tmp_path / "w.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"models\.m\.hf: w\.safetensors is a file"):
        hub.hf_source("m", "w.safetensors")
    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError, match=r"models\.m\.hf: revision 'v1' is for hub ids"):
        hub.hf_source("m", "d", "v1")


def test_a_path_beside_a_local_folder_is_not_taken_for_a_hub_id(tmp_path, monkeypatch):
    """`my_models/gpt2_small` where my_models/ is a local folder without gpt2_small: refused at plan
    time (a mistyped local path, which from_pretrained would send to the hub), one line naming the
    field and the folder; the same id once the hub cache holds it, or with no such folder, is a hub id."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    (tmp_path / "my_models").mkdir()
    with pytest.raises(ConfigError) as e:
        hub.hf_source("m", "my_models/gpt2_small")
    msg = str(e.value)
    assert msg.startswith("config: models.m.hf: local directory ") and "my_models/ does" in msg and "\n" not in msg
    (tmp_path / "my_models" / "gpt2_small").mkdir()
    assert hub.hf_source("m", "my_models/gpt2_small") == ("dir", "my_models/gpt2_small")
    assert hub.hf_source("m", "other/gpt2_small") == ("hub", "other/gpt2_small")
    snap = tmp_path / "cache" / "models--my_models--pythia" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    assert hub.hf_source("m", "my_models/pythia") == ("hub", "my_models/pythia")
