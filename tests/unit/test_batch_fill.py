"""Fuller passes (engine.batching): prompts of different lengths padded into one group and passes
that take sets of later start layers give the numbers of exact-length groups and one start layer a
pass (within float rounding: 1e-5 in float32), in fewer passes, on tiny random models of two
architectures, for plain runs, replacement ablations, resumed curve steps and clean logits."""

import numpy as np
import pytest
import torch
from helpers import ld, random_prompts, tiny_model

from circuitloc.engine import batching
from circuitloc.engine.scan import Scanner
from circuitloc.prompts import Prompts

VOCAB = 40
BUDGET = 64


def scanners(kind, replacement=None):
    m = tiny_model(kind, VOCAB)
    out = [Scanner(m, n_heads=4, d_head=16, max_batch_tokens=BUDGET, replacement=replacement) for _ in range(2)]
    out[1].fill = True
    return out


def some_sets():
    """The clean run, every single head, and pairs across layers: many start layers."""
    singles = [{layer: [h]} for layer in range(3) for h in range(4)]
    pairs = [{0: [1], 2: [3]}, {1: [0, 2]}, {1: [3], 2: [0]}]
    return [{}] + singles + pairs


@pytest.mark.parametrize("kind", ["qwen_gqa", "neox"])
def test_filled_passes_equal_exact_ones_and_are_fewer(kind):
    prompts = random_prompts(VOCAB, n=20, seed=2)  # lengths 4 to 8: five exact-length buckets
    plain, filled = scanners(kind)
    want = plain.run(prompts, some_sets(), {"ld": ld})["ld"]
    got = filled.run(prompts, some_sets(), {"ld": ld})["ld"]
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5, rtol=0)
    assert filled.passes < plain.passes, (filled.passes, plain.passes)
    assert filled.pass_tokens / filled.passes > plain.pass_tokens / plain.passes  # fuller, too
    np.testing.assert_allclose(filled.last_logits(prompts).numpy(), plain.last_logits(prompts).numpy(), atol=1e-5)


def test_a_replacement_reads_each_prompts_own_rows_when_padded():
    prompts = random_prompts(VOCAB, n=12, seed=4)
    g = torch.Generator().manual_seed(0)
    repl = {layer: torch.randn(len(prompts), prompts.input_ids.shape[1], 4, 16, generator=g) for layer in range(3)}
    plain, filled = scanners("qwen_gqa", replacement=repl)
    want = plain.run(prompts, some_sets(), {"ld": ld})["ld"]
    np.testing.assert_allclose(filled.run(prompts, some_sets(), {"ld": ld})["ld"].numpy(), want.numpy(), atol=1e-5)


def test_resumed_steps_equal_full_set_runs_when_filled():
    prompts = random_prompts(VOCAB, n=15, seed=5)
    plain, filled = scanners("neox")
    base, adds = {0: [2], 1: [1]}, [{0: [0]}, {1: [3]}, {2: [1]}, {2: [2]}]
    full = [{layer: sorted(set(base.get(layer, [])) | set(a.get(layer, []))) for layer in range(3)} for a in adds]
    full = [{k: v for k, v in s.items() if v} for s in full]
    want = plain.run(prompts, full, {"ld": ld})["ld"]
    got = filled.extend(prompts, base, adds, {"ld": ld})["ld"]
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5)
    one = filled.extend(prompts, base, adds[:1], {"ld": ld})["ld"]  # one addition: its stream is kept
    np.testing.assert_allclose(one.numpy(), want[:1].numpy(), atol=1e-5)


def test_padded_buckets_hold_every_prompt_once_within_the_budget():
    lengths = torch.tensor([5, 9, 3, 9, 4, 7, 7, 2, 8, 6, 3, 5])
    p = Prompts(torch.zeros(len(lengths), 9, dtype=torch.long), lengths - 1)
    exact, padded = p.buckets(20), p.buckets(20, pad=True)
    rows = sorted(int(r) for b in padded for r in b)
    assert rows == list(range(len(lengths)))
    for b in padded:
        assert len(b) == 1 or len(b) * int(lengths[b].max()) <= 20
    assert len(padded) < len(exact)


def test_chunks_merge_start_layers_only_when_filled():
    starts = [2, 0, 1, 0, 2, 1, 3]
    assert list(batching.chunks(starts, 3)) == [([1, 3], 0), ([2, 5], 1), ([0, 4], 2), ([6], 3)]
    assert list(batching.chunks(starts, 3, fill=True, n_layers=4)) == [([1, 3, 2], 0), ([5, 0, 4], 1), ([6], 3)]
    # 16 layers: a pass at layer 0 takes sets up to layer 2, one at 8 up to 9; room is not enough
    starts = [0, 2, 3, 8, 9, 10]
    assert list(batching.chunks(starts, 6, fill=True, n_layers=16)) == [([0, 1], 0), ([2], 3), ([3, 4], 8), ([5], 10)]
    plain, _ = scanners("neox")
    assert batching.fill_line(plain) == "batch fill: no ablated pass"
    plain.run(random_prompts(VOCAB, n=4, seed=1), [{}], {"ld": ld})
    assert batching.fill_line(plain).startswith(f"batch fill: {plain.passes} passes")
