"""The engine against the naive TransformerLens loop at the paper's largest shapes, on one GPU:
randomly initialised Qwen2.5-7B- and Pythia-6.9B-shaped models, built in bfloat16 straight on the
device, a per-head zero-ablation scan of a few layers by each (the engine: the clean residual
cached once, each head's run resumed at its layer, ablations stacked; naive: one hooked
TransformerLens forward per head, as bench/scan.py times it), with seconds, forward-pass
equivalents (the engine's unit: one forward over the prompt set), the FLOP/s each achieved as a
share of a bfloat16 matmul measured in the same run and of the device's published dense bfloat16
peak, and peak device memory (torch.cuda.max_memory_allocated). About 3 to 5 minutes on an H100.

    python bench/gpu.py                      # on the GPU: both 7B shapes
    python bench/gpu.py --tiny               # on the CPU: tiny models of the same two architectures
    python bench/gpu.py --out gpu.json       # also the records as JSON

`--tiny` is what tests/models/test_gpu_bench.py runs, so the script cannot rot where CI has no GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from rehearsal import SHAPES  # noqa: E402 - bench/ is not a package
from scan import _save_tokenizer, forward_flops, matmul_rate  # noqa: E402

TINY = {
    "tiny-qwen2": ("qwen2", dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                 intermediate_size=128, vocab_size=1024, tie_word_embeddings=False)),
    "tiny-neox": ("gpt_neox", dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128,
                                   vocab_size=1024, rotary_pct=0.25, use_parallel_residual=True,
                                   tie_word_embeddings=False)),
}
# Published dense (no sparsity) bfloat16 tensor-core peaks, FLOP/s, by a substring of the device name.
PEAK_BF16 = {"H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12}


def published_peak(name: str) -> float | None:
    """The device's published dense bf16 peak, or None for a device not in PEAK_BF16 (or a CPU)."""
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def build(kind: str, kw: dict, device: str, dtype, scratch: Path):
    """A random model built on `device` in `dtype` (no host copy, no float32 copy), and a directory
    with its config.json and a word-level tokenizer (TransformerBridge reads the config from a path)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(kind, **kw)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).eval()
    cfg.save_pretrained(scratch)
    _save_tokenizer(scratch, min(kw["vocab_size"], 4096))
    return model


def _sync(device: str):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(name: str, shape: tuple, args) -> list[dict]:
    """Engine, then naive, on one shape; the model is freed before the next shape is built."""
    import torch

    from circuitloc.engine.bridge import naive_run
    from circuitloc.engine.layout import decoder_layers
    from circuitloc.engine.scan import Scanner
    from circuitloc.models.load import bridge_over, load_tokenizer
    from circuitloc.prompts import Prompts
    from circuitloc.tasks.ioi import metric

    kind, kw = shape[0], shape[1]
    dtype = getattr(torch, args.dtype)
    with tempfile.TemporaryDirectory() as scratch:
        model = build(kind, kw, args.device, dtype, Path(scratch))
        L, H = kw["num_hidden_layers"], kw["num_attention_heads"]
        d_head = kw["hidden_size"] // H
        g = torch.Generator().manual_seed(0)
        vocab = min(kw["vocab_size"], 4096)
        ids = torch.randint(4, vocab, (args.prompts, args.width), generator=g)
        prompts = Prompts(ids, torch.full((args.prompts,), args.width - 1), {
            "io_id": torch.randint(4, vocab, (args.prompts,), generator=g),
            "s_id": torch.randint(4, vocab, (args.prompts,), generator=g)})
        layers = sorted({0, L // 2, L - 1}) if args.scan_layers is None else args.scan_layers
        sets = [{}] + [{layer: [h]} for layer in layers for h in range(H)]
        per_fwd = forward_flops(decoder_layers(model.base_model), model.config, args.prompts, args.width)
        out = []
        for mode in ("engine", "naive"):
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            if mode == "engine":
                sc = Scanner(model, H, d_head, args.batch_tokens)
                sc.run(prompts, sets[:2], {"ld": metric})  # warm-up (kernels, allocator)
                sc.forward_passes = 0.0
                _sync(args.device)
                t0 = time.perf_counter()
                vals = sc.run(prompts, sets, {"ld": metric})["ld"].float().mean(1)
                _sync(args.device)
                passes = sc.forward_passes
                del sc  # its caches must not count in the naive loop's peak memory
            else:
                card = SimpleNamespace(path=scratch, dtype=args.dtype)
                bridge = bridge_over(card, model, load_tokenizer(scratch), args.device)
                naive_run(bridge, prompts, sets[:1], metric)  # warm-up
                _sync(args.device)
                t0 = time.perf_counter()
                vals = naive_run(bridge, prompts, sets, metric).float().mean(1)
                _sync(args.device)
                passes = float(len(sets))
                del bridge
            dt = time.perf_counter() - t0
            peak = torch.cuda.max_memory_allocated() / 2**30 if args.device.startswith("cuda") else None
            out.append({"model": name, "mode": mode, "layers_scanned": layers, "sets": len(sets), "seconds": dt,
                        "forward_passes": passes, "tflop_per_s": passes * per_fwd / dt / 1e12,
                        "peak_gib": peak, "scores": vals.cpu().tolist()})
        del model
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="tiny models on the CPU (what the test runs)")
    ap.add_argument("--device", default=None, help="default: cuda, or cpu with --tiny")
    ap.add_argument("--dtype", default=None, help="default: bfloat16, or float32 with --tiny")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--width", type=int, default=18, help="tokens per prompt (IOI's are about 18)")
    ap.add_argument("--scan-layers", type=int, nargs="+", help="default: first, middle and last")
    ap.add_argument("--batch-tokens", type=int, default=32768)
    ap.add_argument("--out", help="write the records here as JSON")
    args = ap.parse_args(argv)
    import torch

    args.device = args.device or ("cpu" if args.tiny else "cuda")
    args.dtype = args.dtype or ("float32" if args.tiny else "bfloat16")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("bench/gpu.py: no CUDA device here; run it on a GPU node, or try it with --tiny on the CPU")
    shapes = TINY if args.tiny else {k: v[:2] for k, v in SHAPES.items()}
    cuda = args.device.startswith("cuda")
    device_name = torch.cuda.get_device_name() if cuda else "cpu"
    mm = matmul_rate(n=8192 if cuda else 256, device="cuda" if cuda else "cpu", dtype=args.dtype)
    peak = published_peak(device_name) if cuda else None
    records = [r for name, shape in shapes.items() for r in measure(name, shape, args)]
    for r in records:
        r["share_of_matmul"] = r["tflop_per_s"] * 1e12 / mm
        r["share_of_peak"] = r["tflop_per_s"] * 1e12 / peak if peak else None
    result = {"device": device_name, "dtype": args.dtype, "matmul_tflop_per_s": mm / 1e12,
              "published_peak_tflop_per_s": peak / 1e12 if peak else None, "prompts": args.prompts,
              "width": args.width, "records": records}
    print(f"{device_name}, {args.dtype}: matmul {mm / 1e12:.3g} TFLOP/s measured, published dense peak "
          f"{f'{peak / 1e12:.0f} TFLOP/s' if peak else 'unknown'}; {args.prompts} prompts x {args.width} tokens")
    print(f"{'model':14s}{'mode':8s}{'seconds':>9s}{'fwd-eq':>8s}{'TFLOP/s':>9s}{'of mm':>7s}{'of peak':>8s}{'peak GiB':>9s}")
    for r in records:
        share = f"{r['share_of_peak']:.0%}" if r["share_of_peak"] is not None else "-"
        gib = f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "-"
        print(f"{r['model']:14s}{r['mode']:8s}{r['seconds']:9.2f}{r['forward_passes']:8.1f}{r['tflop_per_s']:9.3g}"
              f"{r['share_of_matmul']:7.0%}{share:>8s}{gib:>9s}")
    for name in shapes:
        e, n = (next(r for r in records if r["model"] == name and r["mode"] == m) for m in ("engine", "naive"))
        diff = max(abs(a - b) for a, b in zip(e["scores"], n["scores"]))
        print(f"{name}: engine {n['seconds'] / e['seconds']:.1f}x faster than naive; max |score difference| {diff:.3g}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
