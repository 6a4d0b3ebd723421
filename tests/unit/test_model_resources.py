"""Resources from the model itself: a hub model without `size:` is sized from its config.json in the
hub cache (no network), a model that cannot be sized is named at plan time with what it will ask
for; the dtype a model runs in (bf16 by default for a hub model on cuda); the GPUs a model spread
with `device_map: auto` asks for."""

import json

import pytest

from circuitloc.plan.jobs.resources import config_size, estimate, gpus, model_dtype, unsized
from circuitloc.plan.config.views import model_build_spec

GPU = {"device": "cuda"}
# Qwen2.5-7B's and Pythia-6.9B's config.json, the fields that size them
QWEN = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
        "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False}
PYTHIA = {"model_type": "gpt_neox", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
          "intermediate_size": 16384, "vocab_size": 50432, "tie_word_embeddings": False}


def fake_hub(root, repo, cfg, commit="0123abcd"):
    """A hub cache holding one snapshot of `repo` with `cfg` as its config.json, main pointing at it."""
    base = root / "hub" / ("models--" + repo.replace("/", "--"))
    (base / "snapshots" / commit).mkdir(parents=True)
    (base / "snapshots" / commit / "config.json").write_text(json.dumps(cfg))
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(commit)


@pytest.fixture
def hf_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return tmp_path


def test_config_json_gives_the_published_parameter_counts():
    """Qwen2.5-7B has 7.62 B parameters, Pythia-6.9B 6.86 B (their model cards)."""
    params, units = config_size(QWEN)
    assert params == pytest.approx(7.62, abs=0.01) and units == 28 * 28
    params, units = config_size(PYTHIA)
    assert params == pytest.approx(6.86, abs=0.01) and units == 32 * 32
    assert config_size({"model_type": "llama"}) is None


def test_hub_model_without_size_gets_resources_from_its_cached_config_json(hf_home):
    fake_hub(hf_home, "Qwen/Qwen2.5-7B", QWEN)
    bare = {"source": "hf", "hf": "Qwen/Qwen2.5-7B"}
    sized = {**bare, "size": {"params_b": config_size(QWEN)[0], "n_layers": 28, "n_heads": 28}}
    for stage in ("scores", "curves", "dataset"):
        assert estimate(GPU, bare, stage) == estimate(GPU, sized, stage)
    got = estimate(GPU, bare, "scores")
    assert got["mem_mb"] >= 2 * 7.6 * 2 * 1024 and got["runtime"] > 10 and got["gpu"] == 1
    assert unsized(GPU, {"qwen": bare}) == []


def test_a_local_directory_is_read_too(tmp_path, hf_home):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(PYTHIA))
    spec = {"source": "hf", "hf": str(tmp_path / "m")}
    assert estimate(GPU, spec, "curves") == estimate(GPU, {**spec, "size": {"params_b": config_size(PYTHIA)[0],
                                                                           "n_layers": 32, "n_heads": 32}}, "curves")


def test_a_model_without_size_or_config_is_named_with_what_it_asks_for(hf_home):
    models = {"llama8b": {"source": "hf", "hf": "meta-llama/Llama-3.1-8B"},
              "toy": {"source": "toy"}, "sized": {"source": "hf", "hf": "x/y", "size": {"params_b": 1}}}
    lines = unsized(GPU, models)
    assert len(lines) == 1
    res = estimate(GPU, models["llama8b"], "scores")
    assert lines[0].startswith("model llama8b: no size: hint and no config.json")
    assert f"{res['mem_mb']} MB and {res['runtime']} min" in lines[0] and "models.llama8b.size" in lines[0]


def test_dtype_bf16_by_default_for_hub_models_on_cuda_only():
    hub, toy = {"source": "hf", "hf": "x/y"}, {"source": "toy"}
    assert model_dtype(GPU, hub) == "bfloat16" and model_dtype(GPU, {"source": "gguf"}) == "bfloat16"
    assert model_dtype({"device": "cpu"}, hub) == "float32" and model_dtype(GPU, toy) == "float32"
    assert model_dtype(GPU, {**hub, "dtype": "float32"}) == "float32"
    # the card records it (the model stage's spec), and a CPU run's spec is as it was
    cfg = {"device": "cuda", "models": {"m": hub}}
    assert model_build_spec(cfg, "m")["dtype"] == "bfloat16"
    assert "dtype" not in model_build_spec({**cfg, "device": "cpu"}, "m")


def test_device_map_auto_asks_for_the_gpus_it_needs():
    assert gpus({"source": "hf"}, 140) == 1
    assert gpus({"device_map": "auto"}, 140) == 3  # 70B in bf16: 1.2 x 140 GB over 80 GB GPUs
    assert gpus({"device_map": "auto", "max_memory": {0: "70GiB", 1: "70GiB", "cpu": "100GiB"}}, 140) == 2
    spec = {"source": "hf", "hf": "x/y", "size": {"params_b": 70.6, "n_layers": 80, "n_heads": 64},
            "device_map": "auto"}
    assert estimate(GPU, spec, "scores")["gpu"] == 3
    assert "gpu" not in estimate({"device": "cpu"}, spec, "scores")


def test_the_schema_takes_a_models_device_map_and_max_memory():
    from pathlib import Path

    import yaml
    from snakemake.utils import validate

    root = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((root / ".test" / "config.yaml").read_text())
    name = next(iter(cfg["models"]))
    cfg["models"][name].update(device_map="auto", max_memory={0: "70GiB", "cpu": "100GiB"}, dtype="bfloat16")
    validate(cfg, str(root / "config" / "schema.yaml"))
    cfg["models"][name]["device_map"] = "balanced"
    with pytest.raises(Exception, match="auto"):
        validate(cfg, str(root / "config" / "schema.yaml"))


def test_a_cards_device_map_is_written_only_where_set(tmp_path):
    """A card without device_map is byte for byte what it was; one with it reads back as written."""
    from helpers import model_card, round_trips

    plain = model_card()
    plain.write(tmp_path / "plain.json")
    assert "device_map" not in (tmp_path / "plain.json").read_text()
    round_trips(tmp_path / "plain.json")
    spread = model_card(device_map="auto", max_memory={"0": "70GiB", "cpu": "100GiB"})
    spread.write(tmp_path / "spread.json")
    assert round_trips(tmp_path / "spread.json") == spread
