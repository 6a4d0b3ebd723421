"""Loading where the model runs, in the dtype it runs in: the weights are read straight onto the
job's device (`device_map`, no host copy then `.to(device)`) in the card's dtype, and host memory
during a bf16 load stays near one bf16 copy of the weights (measured in a fresh process: its peak
resident memory, every weight touched after the load, against the bytes of the weights)."""

import importlib
import json
import subprocess
import sys

import pytest
import torch
from helpers import model_card, word_tokenizer

load_mod = importlib.import_module("circuitloc.models.load")  # the package exports a function `load`

PROBE = """
import sys
from circuitloc.models.load import load_hf
import transformers.models.llama.modeling_llama  # imported before the baseline, as a job has it
before = int(open("/proc/self/statm").read().split()[1]) * 4096
model, _ = load_hf(sys.argv[1], "bfloat16")
for p in model.parameters():  # every page of every weight resident
    p.sum()
# VmHWM: this process image's own peak; getrusage's ru_maxrss keeps the forking parent's resident
# size across exec (Linux), so a big pytest worker would show as this process's peak
peak = int(next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")).split()[1]) * 1024
weights = sum(p.numel() * p.element_size() for p in model.parameters())
print(json.dumps({"growth": peak - before, "weights": weights, "dtypes": sorted({str(p.dtype) for p in model.parameters()})}))
"""


@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory):
    """A Llama of about 100 M parameters (200 MB in bf16: well above the load's own overhead),
    saved in bf16 as the hub's 7B checkpoints are."""
    from transformers import LlamaConfig, LlamaForCausalLM

    path = tmp_path_factory.mktemp("mem") / "llama"
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=4096, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=8)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.fill_(0.01 * (i + 1))
    model.save_pretrained(path)
    word_tokenizer().save_pretrained(path)
    return path


def test_a_bf16_load_holds_one_bf16_copy(bf16_model):
    out = subprocess.run([sys.executable, "-c", "import json\n" + PROBE, str(bf16_model)], capture_output=True,
                         text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["dtypes"] == ["torch.bfloat16"]
    assert got["weights"] > 190e6
    assert got["growth"] < 1.3 * got["weights"], got  # a float32 copy on the way would be 2x at least


def test_weights_go_straight_to_the_jobs_device_in_the_cards_dtype(monkeypatch, tmp_path):
    """What the loader asks transformers for: the device itself as device_map (no host copy first),
    the card's dtype; with device_map auto, accelerate's placement within max_memory."""
    import transformers

    calls = []

    def fake(path, **kw):
        calls.append(kw)
        raise RuntimeError("stop here")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", staticmethod(fake))
    monkeypatch.setattr(load_mod, "load_tokenizer", lambda path: None)
    card = model_card(dtype="bfloat16", path=str(tmp_path), engine="scan")
    for device_map, max_memory in ((None, None), ("auto", {"0": "70GiB", "1": "70GiB"})):
        card = card.__class__(**{**card.__dict__, "device_map": device_map, "max_memory": max_memory})
        with pytest.raises(RuntimeError, match="stop here"):
            load_mod.load_engine(card, "cuda")
    assert calls[0]["device_map"] == "cuda" and calls[0]["dtype"] == torch.bfloat16
    assert calls[0]["attn_implementation"] == "sdpa"
    assert calls[1]["device_map"] == "auto" and calls[1]["max_memory"] == {0: "70GiB", 1: "70GiB"}
