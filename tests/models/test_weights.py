"""card.json depends only on what determines the model: a rebuild with identical weights writes the
same bytes (no wall-clock timings), and the card's weights hashes make a job refuse a truncated or
corrupt weights file with one line naming it and saying how to get it back."""

import hashlib
import itertools
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers import model_card

from circuitloc.engine.select import engine_of
from circuitloc.errors import ModelSourceError
from circuitloc.modelcard import ModelCard
from circuitloc.models import build
from circuitloc.models.load import check_weights, load_engine

ROOT = Path(__file__).resolve().parents[2]
TOY = {"source": "toy", "family": "toy",
       "toy": {"checkpoint": str(ROOT / ".test" / "models" / "tiny_gqa"), "acceptance": {"enforce": False},
               "eval": {"n_ioi": 40, "n_induction": 40, "prefix_len": [4, 8], "suffix_len": [10, 16]}}}


@pytest.fixture
def slow_clock(monkeypatch):
    """The build's clock runs ever faster (each reading 1000 s later than the step before): any duration
    it measured, written into the card, would differ between two builds."""
    ticks = itertools.accumulate(itertools.count(1000.0, 1000.0))
    monkeypatch.setattr(build, "perf_counter", lambda: next(ticks))


def _sha(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_an_hf_rebuild_writes_a_byte_identical_card(tiny_dirs, tmp_path, slow_clock):
    spec = {"source": "hf", "hf": str(tiny_dirs["qwen_gqa"]), "family": "tiny"}
    card_path = tmp_path / "card.json"
    build.build_model("m", spec, card_path, tmp_path / "w", engine_of)
    first = card_path.read_bytes()
    card_path.unlink()
    build.build_model("m", spec, card_path, tmp_path / "w", engine_of)
    assert card_path.read_bytes() == first
    card = ModelCard.read(card_path)
    assert not [k for k in card.to_dict() if "seconds" in k]
    weights = tiny_dirs["qwen_gqa"] / "model.safetensors"
    assert card.weights["files"] == {"model.safetensors": {"bytes": weights.stat().st_size, "sha256": _sha(weights)}}


def test_a_toy_rebuilt_from_its_checkpoint_writes_a_byte_identical_card(tmp_path, slow_clock):
    """Own weights (a directory() output), rebuilt in place: the same card, hashing the copied weights."""
    card_path, weights = tmp_path / "toy" / "card.json", tmp_path / "toy" / "weights"
    card = build.build_model("toy", TOY, card_path, weights, engine_of)
    first = card_path.read_bytes()
    shutil.rmtree(weights)
    card_path.unlink()
    build.build_model("toy", TOY, card_path, weights, engine_of)
    assert card_path.read_bytes() == first
    assert not [k for k in card.to_dict() if "seconds" in k]
    assert card.weights["files"]["model.safetensors"]["sha256"] == _sha(weights / "model.safetensors")
    assert _sha(weights / "model.safetensors") == _sha(ROOT / ".test" / "models" / "tiny_gqa" / "model.safetensors")


@pytest.fixture
def own_copy(tiny_dirs, tmp_path):
    """A card over a copy of a tiny model directory, which the test may then damage."""
    src = tmp_path / "model"
    shutil.copytree(tiny_dirs["qwen_mha"], src)
    card = build.build_model("mine", {"source": "hf", "hf": str(src)}, tmp_path / "card.json", tmp_path / "w", engine_of)
    return card, src / "model.safetensors"


def test_intact_weights_load(own_copy):
    card, _ = own_copy
    model, _ = load_engine(card)
    assert sum(p.numel() for p in model.parameters()) == card.n_params


def test_truncated_weights_are_one_line_naming_the_file(own_copy):
    card, weights = own_copy
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.truncate(size - 1000)
    with pytest.raises(ModelSourceError) as e:
        load_engine(card)
    msg = str(e.value)
    assert "\n" not in msg and str(weights) in msg and f"{size - 1000} bytes" in msg and str(size) in msg
    assert "snakemake results/models/mine/card.json --cores all --forcerun results/models/mine/card.json" in msg


def test_a_flipped_byte_is_refused_with_both_hashes(own_copy):
    card, weights = own_copy
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelSourceError) as e:
        check_weights(card)
    msg = str(e.value)
    assert "\n" not in msg and str(weights) in msg and "corrupt" in msg
    assert hashlib.sha256(bytes(data)).hexdigest() in msg and card.weights["files"]["model.safetensors"]["sha256"] in msg


def test_a_missing_weights_file_is_named(own_copy):
    card, weights = own_copy
    weights.unlink()
    with pytest.raises(ModelSourceError, match=rf"weights file {weights} is missing"):
        check_weights(card)


def test_each_source_says_how_to_get_its_weights_back(tmp_path, monkeypatch):
    """toy/gguf: a missing or cut file is rebuilt by rerunning the user's command (the plan sees it:
    plan.jobs.weights); a corrupt one of the right size by a forcerun of the card (Snakemake does not look
    inside a directory() output); a hub snapshot: fetch it again at the card's commit."""
    from circuitloc import usercommand

    monkeypatch.delenv(usercommand.ENV, raising=False)
    f = tmp_path / "model.safetensors"
    f.write_bytes(b"short")
    files = {"model.safetensors": {"bytes": 99, "sha256": "0" * 64}}
    base = {"path": str(tmp_path), "weights": {"files": files}}
    card = r"results/models/g/card\.json"
    with pytest.raises(ModelSourceError, match=r"'g': .* has 5 bytes, .*; rerun your command, which rebuilds the model"):
        check_weights(model_card(**base, name="g", source="gguf"))
    same_size = {"path": str(tmp_path), "weights": {"files": {"model.safetensors": {"bytes": 5, "sha256": "0" * 64}}}}
    with pytest.raises(ModelSourceError, match=rf"'g': .*corrupt.*snakemake {card} --cores all --forcerun {card} .*then rerun"):
        check_weights(model_card(**same_size, name="g", source="gguf"))
    hub = model_card(**base, name="h", source="hf", hf="org/tiny", revision="1" * 40)
    with pytest.raises(ModelSourceError, match=rf"hf download org/tiny --revision {'1' * 40} --force-download$"):
        check_weights(hub)
    check_weights(model_card(name="mem", path=str(tmp_path), source="toy"))  # built in memory, no record: not checked


@pytest.mark.parametrize("weights_layers, config_layers, what", [(2, 3, "the weights lack"),
                                                                  (3, 2, "config.json has no place for")])
def test_weights_that_do_not_match_config_json_are_refused(tmp_path, weights_layers, config_layers, what):
    """transformers fills a tensor the weights lack with random values and skips one config.json
    has no place for; either is one error naming the directory and the first such tensor."""
    from helpers import tiny_model, word_tokenizer

    from circuitloc.models.load import load_hf

    tok = word_tokenizer()
    model = tiny_model("qwen_gqa", len(tok))
    keep = [layer for i, layer in enumerate(model.model.layers) if i < weights_layers]
    model.model.layers = type(model.model.layers)(keep)
    model.config.num_hidden_layers = weights_layers
    model.config.layer_types = model.config.layer_types[:weights_layers] if model.config.layer_types else None
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    load_hf(str(tmp_path))  # weights and config agree: loads
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["num_hidden_layers"] = config_layers
    if cfg.get("layer_types"):
        cfg["layer_types"] = (cfg["layer_types"] * 3)[:config_layers]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    first = f"model.layers.{min(weights_layers, config_layers)}."
    with pytest.raises(ModelSourceError, match=rf"^{tmp_path}: weights do not match its config.json: {what} "
                                               rf"\d+ tensor\(s\), the first {re.escape(first)}"):
        load_hf(str(tmp_path))


def test_an_mlp_width_that_does_not_match_config_json_is_one_line(tmp_path):
    """config.json's intermediate_size against weights of another width: transformers raises from
    the middle of its loading report; here it is the one line naming the first such tensor and both
    shapes."""
    from helpers import tiny_model, word_tokenizer

    from circuitloc.models.load import load_hf

    tok = word_tokenizer()
    tiny_model("qwen_gqa", len(tok)).save_pretrained(tmp_path)  # intermediate_size 128
    tok.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelSourceError) as e:
        load_hf(str(tmp_path))
    assert str(e.value) == (f"{tmp_path}: weights do not match its config.json: the weights have another shape for "
                            "9 tensor(s), the first model.layers.0.mlp.down_proj.weight (the weights [64, 128], "
                            "config.json [64, 96]); restore the directory's weights or config.json")
