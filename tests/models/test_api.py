"""The Python API (docs/api.md) on a tiny Hugging Face model: `import circuitloc` stays light, a
local directory loads as a model, and your own prompts score units the way a hand computation
does (the zero ablation of one query head, done with a forward hook on the plain model)."""

import os
import subprocess
import sys

import pytest
import torch

import circuitloc as cl

TEXTS = ["when Mary and John went to the store , John gave a drink to",
         "when Tom and Anna went to the garden , Anna gave a book to",
         "then Paul and Kate went to the store , Kate gave a drink to",
         "when Lisa and Tom went to the garden , Tom gave a book to"]
ANSWERS, WRONG = ["Mary", "Tom", "Paul", "Lisa"], ["John", "Anna", "Kate", "Tom"]


def test_import_circuitloc_loads_no_torch_until_the_api_is_used():
    code = ("import sys, circuitloc\nassert 'torch' not in sys.modules and 'polars' not in sys.modules\n"
            "assert circuitloc.Run.__name__ == 'Run' and 'torch' in sys.modules\n"
            "try:\n    circuitloc.nope\nexcept AttributeError:\n    pass\nelse:\n    raise SystemExit('no error')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert p.returncode == 0, p.stderr[-2000:]


def _ld(hf, data, head=None):
    """Mean logit(answer) - logit(wrong) at the last position, with `head` = (layer, h) zeroed at
    the input of the attention's output projection (its z), by a hook on the plain model."""
    ids = torch.tensor(data.rows["input_ids"].to_list())
    hooks = []
    if head is not None:
        layer, h = head
        attn = hf.model.layers[layer].self_attn
        d = attn.head_dim

        def zero(_module, args):
            z = args[0].clone()
            z[..., h * d:(h + 1) * d] = 0
            return (z,)
        hooks.append(attn.o_proj.register_forward_pre_hook(zero))
    with torch.no_grad():
        logits = hf(ids).logits[:, -1]
    for hook in hooks:
        hook.remove()
    rows = torch.arange(len(ids))
    io, s = torch.tensor(data.rows["io_id"].to_list()), torch.tensor(data.rows["s_id"].to_list())
    return float((logits[rows, io] - logits[rows, s]).mean())


def test_own_prompts_on_a_local_model_score_as_a_hand_computation(tiny_dirs, tmp_path):
    run = cl.Run(workdir=tmp_path, bootstrap={"n": 20})
    model = run.model(str(tiny_dirs["qwen_gqa"]), name="tiny_qwen")
    assert model.card.source == "hf" and model.card.name == "tiny_qwen"
    data = cl.own_prompts(model, TEXTS, ANSWERS, WRONG, n_score=4)
    assert data.rows["score"].to_list() == [True] * 4 and len(set(map(len, data.rows["input_ids"]))) == 1
    assert run.self_check(model, data)  # the engine against a plain forward: measured differences
    scores = run.scores(model, data, "zero-query")
    assert len(scores) == model.card.n_layers * model.card.n_heads
    hf = model.loaded()[0]
    clean = _ld(hf, data)
    for row in scores.head(3).iter_rows(named=True):
        ablated = _ld(hf, data, (row["layer"], row["head"]))
        assert row["drop"] == pytest.approx(clean - ablated, rel=1e-4, abs=1e-5)
    with pytest.raises(ValueError, match="answer 'Mary John' is 2 tokens"):
        cl.own_prompts(model, TEXTS[:1], ["Mary John"], ["John"])
