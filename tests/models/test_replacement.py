"""Mean and resample ablation: what replaces a head's output, checked against hand computations."""

import numpy as np
import polars as pl
import torch
from helpers import card_for
from test_scan import _prompts, ld

from circuitloc.engine.ablation import as_sets, units
from circuitloc.engine.replacement import (
    aligned_groups,
    mean_replacement,
    resample_replacement,
    resample_sources,
)
from circuitloc.engine.scan import Scanner
from circuitloc.models.load import engine_model, load
from circuitloc.prompts import Prompts


def _scanner(tiny_dirs, kind="qwen_gqa", budget=4096):
    card = card_for(tiny_dirs[kind])
    bridge, tok = load(card)
    return card, bridge, tok, Scanner(engine_model(bridge), card.n_heads, card.d_head, max_batch_tokens=budget)


def _every_unit(card):
    return [{}] + [as_sets([u]) for u in units(card)] + [as_sets(units(card))]


def test_leave_one_out_mean_over_identical_prompts_is_a_no_op(tiny_dirs):
    """Mean ablation leaves the prompt itself out: over two copies of one prompt, each copy's mean is
    the other copy's activation, its own, so ablating any unit, or all of them, changes nothing."""
    card, _, tok, sc = _scanner(tiny_dirs)
    one = _prompts(len(tok), n=1, seed=5)
    p = Prompts(one.input_ids.repeat(2, 1), one.last_pos.repeat(2), {k: v.repeat(2) for k, v in one.fields.items()})
    sc.replacement = mean_replacement(sc, p, groups=np.zeros(2, int))
    out = sc.run(p, _every_unit(card), {"ld": ld})["ld"]
    assert torch.allclose(out, out[0:1].expand_as(out), atol=1e-4)
    sc.replacement = {}  # while zero ablation of the same units does change the metric
    assert (sc.run(p, _every_unit(card), {"ld": ld})["ld"][1:] - out[0]).abs().max() > 1e-4


def test_mean_leaves_the_prompt_itself_out(tiny_dirs):
    """Against an independent loop over TransformerLens' hook_z: prompt i's replacement is the mean
    over the other prompts of its group at each position, else over every real position of the other
    prompts; a group of one falls back to the latter."""
    card, bridge, tok, sc = _scanner(tiny_dirs, budget=13)
    p = _prompts(len(tok), n=7, seed=4)
    lengths = (p.last_pos + 1).numpy()
    groups = aligned_groups(pl.DataFrame({"k": [0] * 7}), ("k",), lengths, min_group=1)
    target = np.array([0, 2, 3, 6])
    repl = mean_replacement(sc, p, target=target, groups=groups)
    layer = 1
    _, cache = bridge.run_with_cache(p.input_ids, names_filter=lambda n: n == f"blocks.{layer}.attn.hook_z")
    z = cache[f"blocks.{layer}.attn.hook_z"]
    for slot, i in enumerate(target):
        others = [j for j in range(7) if j != i]
        peers = [j for j in others if lengths[j] == lengths[i]]
        if peers:
            want = z[peers, : lengths[i]].mean(0)
        else:
            want = torch.cat([z[j, : lengths[j]] for j in others]).mean(0).expand(lengths[i], -1, -1)
        assert torch.allclose(repl[layer][slot, : lengths[i]], want, atol=1e-5), i
    assert any(not any(lengths[j] == lengths[i] for j in range(7) if j != i) for i in target)  # both cases met
    assert any(any(lengths[j] == lengths[i] for j in range(7) if j != i) for i in target)


def test_resample_with_identical_prompts_is_a_no_op(tiny_dirs):
    card, _, tok, sc = _scanner(tiny_dirs, budget=20)
    one = _prompts(len(tok), n=1, seed=2)
    p = Prompts(one.input_ids.repeat(4, 1), one.last_pos.repeat(4), {k: v.repeat(4) for k, v in one.fields.items()})
    src = resample_sources(np.zeros(4, int), np.full(4, 5), np.arange(4), seed=0)
    assert all(s != t for s, t in enumerate(src))  # each prompt takes another prompt's activations
    sc.replacement = resample_replacement(sc, p, np.arange(4), src)
    out = sc.run(p, _every_unit(card), {"ld": ld})["ld"]
    assert torch.allclose(out, out[0:1].expand_as(out), atol=1e-4)


def test_resample_patches_the_source_prompts_activation(tiny_dirs):
    """Resampling every head of every layer from prompt j makes prompt i's heads output j's z; the
    result equals a hand computation with hook_z from j's own forward."""
    card, bridge, tok, sc = _scanner(tiny_dirs)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, len(tok), (2, 6), generator=g)
    p = Prompts(ids, torch.tensor([5, 5]), {"a": torch.tensor([5, 6]), "b": torch.tensor([7, 8])})
    src = np.array([1, 0])
    sc.replacement = resample_replacement(sc, p, np.arange(2), src)
    layer = 1
    got = sc.run(p, [{layer: list(range(card.n_heads))}], {"ld": ld})["ld"][0]
    _, cache = bridge.run_with_cache(ids, names_filter=lambda n: n == f"blocks.{layer}.attn.hook_z")
    z = cache[f"blocks.{layer}.attn.hook_z"]
    with torch.no_grad():
        logits = bridge.run_with_hooks(ids, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", lambda t, hook: z[src].clone())])
    ref = ld(logits[:, -1], p.fields)
    assert torch.allclose(got, ref, atol=1e-4)


def test_per_position_mean_is_the_groups_mean_at_each_position(tiny_dirs):
    card, bridge, tok, sc = _scanner(tiny_dirs, budget=13)
    p = _prompts(len(tok), n=7, seed=4)
    lengths = (p.last_pos + 1).numpy()
    groups = aligned_groups(pl.DataFrame({"k": [0] * 7}), ("k",), lengths, min_group=2)
    repl = mean_replacement(sc, p, groups=groups)
    layer = 2
    _, cache = bridge.run_with_cache(p.input_ids, names_filter=lambda n: n == f"blocks.{layer}.attn.hook_z")
    z = cache[f"blocks.{layer}.attn.hook_z"]
    for i in range(7):
        same = [j for j in range(7) if lengths[j] == lengths[i] and j != i]
        pooled = torch.cat([z[j, : lengths[j]] for j in range(7) if j != i]).mean(0)
        want = z[same, : lengths[i]].mean(0) if groups[i] >= 0 else pooled.expand(lengths[i], -1, -1)
        assert torch.allclose(repl[layer][i, : lengths[i]], want, atol=1e-5), i
    assert (groups >= 0).sum() == sum(1 for i in range(7) if (lengths == lengths[i]).sum() >= 2)


def test_aligned_groups_and_resample_pairs():
    df = pl.DataFrame({"template": ["t1", "t1", "t1", "t2", "t2", "t3"]})
    lengths = np.array([5, 5, 6, 5, 5, 5])
    g = aligned_groups(df, ("template",), lengths, min_group=2)
    assert g[0] == g[1] != g[3] == g[4] and g[2] == -1 and g[5] == -1
    assert (aligned_groups(df, (), lengths, 2) == -1).all()  # a task without alignment columns
    src = resample_sources(g, lengths, np.arange(6), seed=0)
    assert src[0] == 1 and src[1] == 0 and src[3] == 4 and src[4] == 3  # partner in the aligned group
    assert lengths[src[5]] == 5 and src[5] != 5  # no group: another prompt of the same length
    assert src[2] != 2  # no group, unique length: any other prompt
    assert (resample_sources(g, lengths, np.arange(6), seed=0) == src).all()  # seeded


def test_kv_group_on_mha_equals_query_head(tiny_dirs):
    card, _, tok, sc = _scanner(tiny_dirs, kind="qwen_mha")
    p = _prompts(len(tok))
    q = sc.run(p, [as_sets([u]) for u in units(card, "query")], {"ld": ld})["ld"]
    kv = sc.run(p, [as_sets([u]) for u in units(card, "kv")], {"ld": ld})["ld"]
    assert [u["heads"] for u in units(card, "kv")] == [[u["head"]] for u in units(card, "query")]
    assert torch.allclose(q, kv)
