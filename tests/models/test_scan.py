"""The engine's numbers equal the naive TransformerLens loop and a hand computation."""

import numpy as np
import pytest
import torch
from helpers import card_for, ld
from helpers import random_prompts as _prompts

from circuitloc.engine.ablation import as_sets, units
from circuitloc.engine.bridge import naive_run
from circuitloc.engine.replacement import (
    mean_replacement,
    resample_replacement,
    resample_sources,
)
from circuitloc.engine.scan import Scanner
from circuitloc.models.load import engine_model, load


@pytest.mark.parametrize("kind", ["neox", "qwen_gqa", "qwen_mha"])
@pytest.mark.parametrize("budget", [100000, 40, 7])
@pytest.mark.parametrize("ablation", ["zero", "zero-kv", "zero-layer", "mean", "mean-kv", "mean_aligned", "resample",
                                      "resample-kv", "resample-layer"])
def test_engine_equals_naive_loop(tiny_dirs, kind, budget, ablation):
    card = card_for(tiny_dirs[kind])
    bridge, tok = load(card)
    p = _prompts(len(tok))
    unit_rows = units(card, ablation.partition("-")[2] or "query")
    sets = [{}] + [as_sets([u]) for u in unit_rows] + [as_sets(unit_rows[:3]), as_sets(unit_rows[2:7:2])]
    sc = Scanner(engine_model(bridge), card.n_heads, card.d_head, max_batch_tokens=budget)
    n = len(p)
    if ablation.startswith("mean_aligned"):  # per-position means of two groups (4-D, indexed by row)
        repl = mean_replacement(sc, p, groups=np.arange(n) % 2)
    elif ablation.startswith("mean"):
        repl = mean_replacement(sc, p)
    elif ablation.startswith("resample"):
        repl = resample_replacement(sc, p, np.arange(n), resample_sources(np.full(n, -1), np.ones(n), np.arange(n), 0))
    else:
        repl = None
    sc.replacement = repl or {}
    fast = sc.run(p, sets, {"ld": ld})["ld"]
    slow = naive_run(bridge, p, sets, ld, replacement=repl)
    assert fast.shape == slow.shape == (len(sets), len(p))
    assert (fast - slow).abs().max() <= 1e-4
    assert (fast[1:] - fast[0]).abs().max() > 1e-6  # the ablations change something


def test_prefix_reuse_reproduces_clean_logits(tiny_dirs):
    card = card_for(tiny_dirs["qwen_gqa"])
    bridge, tok = load(card)
    model = engine_model(bridge)
    p = _prompts(len(tok))
    sc = Scanner(model, card.n_heads, card.d_head)
    resid = sc.residuals(p)
    with torch.no_grad():
        ref = model(p.input_ids).logits[torch.arange(len(p)), p.last_pos]
        for start in range(card.n_layers):
            with sc._skipping(start):
                got = sc.logits_from_embeddings(resid[start], p.last_pos)
            assert torch.allclose(got, ref, atol=1e-5), start


@pytest.mark.parametrize("kind", ["neox", "qwen_gqa"])
def test_zero_ablation_equals_subtracting_head_output_by_hand(tiny_dirs, kind):
    """Zeroing head h in the last layer removes exactly z_h @ W_O[h] from what the layer adds
    (for Qwen2 the MLP then reads the changed residual; GPT-NeoX's parallel MLP does not)."""
    card = card_for(tiny_dirs[kind])
    bridge, tok = load(card)
    model = engine_model(bridge)
    p = _prompts(len(tok), n=3)
    layer, head, dh = card.n_layers - 1, 1, card.d_head
    names = {f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.hook_resid_post",
             f"blocks.{layer}.hook_mlp_out"}
    with torch.no_grad():
        _, cache = bridge.run_with_cache(p.input_ids, names_filter=lambda n: n in names)
        z = cache[f"blocks.{layer}.attn.hook_z"][:, :, head]  # [N, T, d_head]
        if kind == "neox":
            W = model.gpt_neox.layers[layer].attention.dense.weight[:, head * dh:(head + 1) * dh]
            resid = cache[f"blocks.{layer}.hook_resid_post"] - z @ W.T
            final_norm = model.gpt_neox.final_layer_norm
        else:
            block = model.model.layers[layer]
            W = block.self_attn.o_proj.weight[:, head * dh:(head + 1) * dh]
            mid = cache[f"blocks.{layer}.hook_resid_post"] - cache[f"blocks.{layer}.hook_mlp_out"] - z @ W.T
            resid = mid + block.mlp(block.post_attention_layernorm(mid))
            final_norm = model.model.norm
        by_hand = model.get_output_embeddings()(final_norm(resid))
        sc = Scanner(model, card.n_heads, card.d_head)
        got = sc.run(p, [{}, {layer: [head]}], {"ld": ld})["ld"]
    ref = ld(by_hand[torch.arange(len(p)), p.last_pos], p.fields)
    assert torch.allclose(got[1], ref, atol=1e-4)
    assert (got[0] - ref).abs().max() > 1e-4  # the head mattered, so the check has teeth


def test_kv_unit_on_mha_is_the_query_unit(tiny_dirs):
    card = card_for(tiny_dirs["qwen_mha"])
    assert [u["heads"] for u in units(card, "kv")] == [u["heads"] for u in units(card, "query")]


def test_kv_unit_equals_zeroing_the_value_head(tiny_dirs):
    """Ablating a KV group = zeroing the output of v_proj for that kv head (with its bias)."""
    card = card_for(tiny_dirs["qwen_gqa"])
    bridge, tok = load(card)
    p = _prompts(len(tok))
    layer, g = 1, 1
    unit = [u for u in units(card, "kv") if u["layer"] == layer and u["head"] == g][0]
    assert unit["heads"] == [2, 3]
    sc = Scanner(engine_model(bridge), card.n_heads, card.d_head)
    ours = sc.run(p, [as_sets([unit])], {"ld": ld})["ld"][0]

    def zero_v(v, hook):
        v = v.clone()
        v[:, :, g] = 0
        return v
    with torch.no_grad():
        logits = bridge.run_with_hooks(p.input_ids, fwd_hooks=[(f"blocks.{layer}.attn.hook_v", zero_v)])
    ref = ld(logits[torch.arange(len(p)), p.last_pos], p.fields)
    assert torch.allclose(ours, ref, atol=1e-4)


def test_mean_replacement_is_the_mean_z_over_real_positions(tiny_dirs):
    card = card_for(tiny_dirs["qwen_gqa"])
    bridge, tok = load(card)
    p = _prompts(len(tok), n=6, seed=3)  # mixed lengths: padding must not enter the mean
    sc = Scanner(engine_model(bridge), card.n_heads, card.d_head, max_batch_tokens=12)
    mean = mean_replacement(sc, p)
    for layer in range(card.n_layers):
        zs = []
        for i in range(len(p)):
            with torch.no_grad():
                _, cache = bridge.run_with_cache(p.input_ids[i : i + 1, : int(p.last_pos[i]) + 1],
                                                 names_filter=lambda n: n == f"blocks.{layer}.attn.hook_z")
            zs.append(cache[f"blocks.{layer}.attn.hook_z"][0])
        for i in range(len(p)):  # each prompt's mean leaves the prompt itself out
            assert torch.allclose(mean[layer][i, 0], torch.cat(zs[:i] + zs[i + 1:]).mean(0), atol=1e-5)


def _hook_count(model) -> int:
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules())


def test_engine_leaves_no_hook_behind_even_when_a_run_fails(tiny_dirs):
    """Every engine entry point installs its hooks through one context manager: after a normal run,
    an attribution pass, a mean replacement and a forward that raises mid-run, the model carries
    exactly the hooks it had before (a stray hook would ablate every later run)."""
    from circuitloc.engine.attribution import attribute

    card = card_for(tiny_dirs["qwen_gqa"])
    bridge, tok = load(card)
    model = engine_model(bridge)
    before = _hook_count(model)
    p = _prompts(len(tok), n=4)
    sc = Scanner(model, card.n_heads, card.d_head)
    sets = [{}, {0: [1]}, {1: [0, 2]}]
    sc.run(p, sets, {"ld": ld})
    attribute(sc, p, ld)
    sc.replacement = mean_replacement(sc, p)
    sc.run(p, sets, {"ld": ld})
    assert _hook_count(model) == before

    sc.replacement = {1: torch.zeros(3)}  # fails inside the forward, with every run hook installed
    with pytest.raises(RuntimeError):
        sc.run(p, sets, {"ld": ld})
    assert _hook_count(model) == before


def test_hooked_removes_installed_hooks_when_a_later_registration_fails():
    from circuitloc.engine.layout import hooked

    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

    class Refuses(torch.nn.Module):
        def register_forward_pre_hook(self, *args, **kwargs):
            raise RuntimeError("no hooks here")

    with pytest.raises(RuntimeError, match="no hooks here"):
        with hooked([(a, lambda m, x: x), (b, lambda m, x: x), (Refuses(), lambda m, x: x)]):
            pass
    assert not a._forward_pre_hooks and not b._forward_pre_hooks
    with hooked([(a, lambda m, x: (x[0] * 0,))]):
        assert a(torch.ones(1, 2)).equal(a.bias.detach()[None])  # the hook is live inside
    assert not a._forward_pre_hooks
