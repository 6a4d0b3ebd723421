"""A model spread by accelerate (`device_map`) scores as it does on one device, within the
self-check's tolerance: on this CPU-only machine, accelerate's dispatch with two of three layers
and the output embedding offloaded to disk (their weights on the meta device, moved in by
accelerate's hooks for each forward), under the engine's own hooks: the cached residual streams,
the resume that skips layers, the stacked copies and the head-ablation hooks. And `device_map:
auto` with `max_memory` goes through the loader."""

import pytest
import torch
from arch_helpers import save_tiny_arch
from helpers import card_for, random_prompts, word_tokenizer

from circuitloc.engine.layout import input_device
from circuitloc.engine.scan import Scanner
from circuitloc.engine.selfcheck import tolerance
from circuitloc.models.load import load_hf, memory_map

OFFLOADED = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
             "model.layers.1": "disk", "model.layers.2": "disk", "model.norm": "cpu", "lm_head": "disk"}


def logit_a(logits, f):
    return logits[torch.arange(logits.shape[0]), f["a"]].float()


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny_arch("llama", tmp_path_factory.mktemp("dispatch") / "llama")


def scores(model, card, p):
    sc = Scanner(model, card.n_heads, card.d_head, max_batch_tokens=40)  # several buckets, stacked copies
    sc.self_check(p)
    sets = [{}] + [{layer: [h]} for layer in range(card.n_layers) for h in range(card.n_heads)]
    sets += [{0: [0, 1], 2: [3]}, {1: list(range(card.n_heads))}]
    return sc.run(p, sets, {"logit": logit_a})["logit"]


def test_offloaded_layers_give_the_scores_of_one_device(llama, tmp_path):
    from accelerate import dispatch_model

    card = card_for(llama)
    p = random_prompts(len(word_tokenizer()), n=6, seed=3)
    one, _ = load_hf(str(llama))
    want = scores(one, card, p)
    spread, _ = load_hf(str(llama))
    spread = dispatch_model(spread, device_map=OFFLOADED, main_device="cpu", offload_dir=str(tmp_path))
    assert spread.lm_head.weight.device.type == "meta" and spread.model.layers[1].mlp.up_proj.weight.is_meta
    assert input_device(spread) == torch.device("cpu")
    got = scores(spread, card, p)  # weights read back from disk may take another BLAS path: the last bits
    assert float((got - want).abs().max()) <= tolerance(torch.float32, float(want.abs().max()))
    assert not torch.equal(got[1:], got[:1].expand_as(got[1:]))  # the ablations move the scores


def test_device_map_auto_with_max_memory_through_the_loader(llama):
    card = card_for(llama)
    p = random_prompts(len(word_tokenizer()), n=6, seed=3)
    want = scores(load_hf(str(llama))[0], card, p)
    model, _ = load_hf(str(llama), device_map="auto", max_memory={"cpu": "1GiB"})
    got = scores(model, card, p)
    assert float((got - want).abs().max()) <= tolerance(torch.float32, float(want.abs().max()))


def test_max_memory_keys_as_accelerate_reads_them():
    """A card's JSON keeps GPU indices as strings; accelerate wants ints."""
    assert memory_map({"0": "70GiB", 1: "70GiB", "cpu": "200GiB"}) == {0: "70GiB", 1: "70GiB", "cpu": "200GiB"}
    assert memory_map(None) is None
