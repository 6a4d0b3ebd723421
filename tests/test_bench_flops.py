"""The FLOP counts the benches print beside this machine's matmul rate (bench/scan.py,
bench/toy_step.py) agree with torch's own FLOP counter on small random models."""

import sys
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import scan as bench_scan  # noqa: E402


def _linear_flops(fn) -> int:
    """FLOPs of the matrix products (mm, addmm, bmm) torch's counter sees while fn runs."""
    with FlopCounterMode(display=False) as fc:
        fn()
    ops = fc.get_flop_counts()["Global"]
    return sum(v for k, v in ops.items() if str(k).split(".")[-1] in ("mm", "addmm", "bmm"))


def test_scan_forward_flops_counts_every_linear_weight():
    """bench/scan.py's forward-pass equivalent, less its attention term, is exactly the Linear
    products of the base model's forward over the same (prompts x width) ids; no unembedding."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=96, vocab_size=200, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).eval()
    n, width = 5, 7
    ids = torch.randint(0, 200, (n, width))
    with torch.no_grad():
        counted = _linear_flops(lambda: model.model(input_ids=ids))
    total = bench_scan.forward_flops(model.model.layers, cfg, n, width)
    attention = n * width * cfg.num_hidden_layers * 2 * 2 * cfg.num_attention_heads * 16 * (width + 1) / 2
    assert total - attention == counted


def test_toy_step_flops_match_a_counted_training_step():
    """bench/toy_step.py's matmul FLOPs of a step (forward + backward), less its attention term, equal
    the matrix products torch counts in one forward and backward of a toy built from the same recipe."""
    import toy_step

    from circuitloc.models import toy

    s = toy.resolve_spec({"n_layers": 2, "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "d_mlp": 48})

    class Tok:
        bos_token_id, eos_token_id, pad_token_id = 0, 1, 2

    vocab, n, width = 50, 3, 9
    model = toy.build_model(s, vocab, Tok())
    ids = torch.randint(3, vocab, (n, width))

    def step():
        logits = model(input_ids=ids).logits
        torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), ids.reshape(-1)).backward()

    counted = _linear_flops(step)
    attention = 3.0 * n * width * s["n_layers"] * 2 * 2 * s["n_heads"] * (32 // 4) * width
    assert toy_step.step_matmul_flops(s, vocab, n * width, width) - attention == counted
