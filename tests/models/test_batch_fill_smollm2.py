"""A score job's scan of SmolLM2-135M's architecture (a Llama with 9 query heads in 3 KV groups and
tied embeddings; narrow, random and 12 layers deep here instead of 30, so that it runs in seconds: a
pass per start layer and length bucket is the same rule at any depth, and the scan's cost grows with
the square of the depth) on IOI-length prompts at the CPU's token budget: with merged buckets and start layers (`Scanner.fill`, engine.batching) it runs
fewer forward passes than the CPU's exact-length buckets, with the same scores within 1e-5 in
float32; a CPU job's scanner keeps the exact buckets."""

import numpy as np
import torch
from helpers import ld, model_card

from circuitloc.engine.budget import CPU_TOKENS, batch_tokens
from circuitloc.engine.scan import Scanner
from circuitloc.engine.select import scanner_for
from circuitloc.prompts import Prompts

LAYERS, HEADS, KV, D_HEAD, VOCAB = 12, 9, 3, 8, 64  # SmolLM2-135M: 30 layers x 9 heads, 3 KV heads (d_head 64)


def smollm2_shaped():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HEADS * D_HEAD, intermediate_size=4 * HEADS * D_HEAD,
                      num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV,
                      tie_word_embeddings=True, max_position_embeddings=64)
    return LlamaForCausalLM(cfg).eval()


def ioi_length_prompts(n=20, seed=3):
    """n prompts of 15 to 21 tokens (the IOI sentences' lengths), two answer ids each."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(15, 22, (n,), generator=g)
    ids = torch.randint(4, VOCAB, (n, int(lens.max())), generator=g)
    return Prompts(ids, lens - 1, {"a": torch.randint(4, VOCAB, (n,), generator=g),
                                   "b": torch.randint(4, VOCAB, (n,), generator=g)})


def test_a_smollm2_scan_with_merged_buckets_runs_fewer_passes_with_the_same_scores():
    model = smollm2_shaped()
    card = model_card(name="smollm2_shaped", n_layers=LAYERS, n_heads=HEADS, n_kv_heads=KV,
                      d_model=HEADS * D_HEAD, d_head=D_HEAD, dtype="float32")
    budget = batch_tokens("auto", card, "cpu")
    assert budget == CPU_TOKENS
    today = scanner_for(card, (model, None), "auto", "cpu")  # what a CPU score job builds
    assert isinstance(today, Scanner) and not today.fill  # the CPU keeps exact-length buckets
    merged = Scanner(model, HEADS, D_HEAD, budget)
    merged.fill = True
    prompts = ioi_length_prompts()
    sets = [{}] + [{layer: [h]} for layer in range(LAYERS) for h in range(HEADS)]  # clean + every head
    want = today.run(prompts, sets, {"ld": ld})["ld"]
    got = merged.run(prompts, sets, {"ld": ld})["ld"]
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5, rtol=0)
    # passes of one exact-length bucket and one start layer, counted independently of the engine:
    # every length present has its own bucket (20 prompts of <= 21 tokens fit the budget), and in
    # each the 9 heads of a layer fit one pass (9 x 21 x 20 tokens < 4,096 only per bucket)
    lengths = (prompts.last_pos + 1).tolist()
    buckets = {n: lengths.count(n) for n in set(lengths)}
    assert all(HEADS * n * k <= budget for n, k in buckets.items())
    assert today.passes == len(buckets) * (LAYERS + 1)  # every start layer, and the clean run
    assert merged.passes < today.passes, (merged.passes, today.passes)
    assert merged.pass_tokens / merged.passes > today.pass_tokens / today.passes  # fuller
