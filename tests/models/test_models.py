"""The models stage: hf/local sources, cards, and the bad inputs a user will meet."""


import pytest
import torch
from transformers import AutoModelForCausalLM

from circuitloc.errors import ModelSourceError
from circuitloc.engine.select import engine_of
from circuitloc.modelcard import ModelCard
from circuitloc.models.build import build_model
from circuitloc.models.load import load, resolve_hf

EXPECT = {"neox": ("mha", 4, 4), "qwen_gqa": ("gqa", 4, 2), "qwen_mha": ("mha", 4, 4)}


@pytest.mark.parametrize("kind", sorted(EXPECT))
def test_hf_source_card_and_logits_equal_plain_transformers(tiny_dirs, tmp_path, kind):
    card_path = tmp_path / "card.json"
    build_model(kind, {"source": "hf", "hf": str(tiny_dirs[kind]), "family": "tiny"}, card_path, tmp_path / "w", engine_of)
    card = ModelCard.read(card_path)
    assert (card.attention, card.n_heads, card.n_kv_heads) == EXPECT[kind]
    assert card.n_layers == 3 and card.d_model == 64 and card.d_head == 16
    assert card.engine == "scan"  # GPT-NeoX and Qwen2: the fast engine is proven on both
    plain = AutoModelForCausalLM.from_pretrained(tiny_dirs[kind]).eval()
    assert card.n_params == sum(p.numel() for p in plain.parameters())
    bridge, tok = load(card)
    ids = torch.randint(4, len(tok), (2, 9))
    with torch.no_grad():
        assert torch.allclose(bridge(ids), plain(ids).logits, atol=1e-5)
    assert not (tmp_path / "w").exists()  # an hf source writes no weights of its own


def test_unknown_source_is_a_clear_error(tmp_path):
    with pytest.raises(ModelSourceError, match="'m1'.*unknown source 'bogus'"):
        build_model("m1", {"source": "bogus"}, tmp_path / "card.json", tmp_path / "w", engine_of)
    assert not (tmp_path / "card.json").exists()


def test_missing_local_directory_names_it(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ModelSourceError, match=f"'m2'.*{missing}"):
        build_model("m2", {"source": "hf", "hf": str(missing)}, tmp_path / "card.json", tmp_path / "w", engine_of)
    assert not (tmp_path / "card.json").exists()


def test_hub_model_not_cached_offline_says_where_it_looked(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelSourceError) as e:
        resolve_hf("pythia", "EleutherAI/pythia-nonexistent-1m")
    msg = str(e.value)
    assert "pythia" in msg and "cache" in msg and "hf download" in msg
