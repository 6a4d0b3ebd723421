"""The engine at the paper's largest shapes on one GPU, through the jobs' own path: randomly
initialised Qwen2.5-7B- and Pythia-6.9B-shaped models (bfloat16, built on the device) saved in
Hugging Face layout, given a card by the model stage (`models.build.build_model`: weights hashed,
engine chosen), an IOI dataset by the dataset stage's builder (`tasks.registry.build_dataset`: the
built-in generator's sentences, so IOI's lengths and length buckets, tokenized by a word-level
tokenizer over the generator's words) and loaded by `engine.job.AblationJob` as a score or curve
job loads it (`models.load.load_engine`: the card's weights checked, the attention kernel a GPU
gets; the engine's self-check; the token budget `max_batch_tokens: auto` sizes to the free memory,
`engine.budget`). Then, each stage timed `--repeats` times after one warm-up (median and minimum):

- `scan`: the score job's per-head zero ablation (the first, middle and last layers' heads, or
  `--scan-layers`) by the engine, and `naive`: the same sets by one hooked TransformerLens forward
  each (bench/scan.py's reference); the two must give the same scores;
- `ranked` and `ranked_today`: a ranked curve of `--curve-steps` steps with incremental resume
  (engine.incremental, each step resumed at its new unit's layer from the last step's kept stream)
  and without it (every set from the clean stream); the two must agree;
- `attribution`: every head's estimated drop (engine.attribution, as guided greedy and the guided
  scan call it): one forward and one backward to the head outputs; no weight may hold a gradient
  after it;
- `mean_build` and `mean_scan`: a mean-ablation job's replacement built (engine.replacement, over
  the dataset) and the same scan under it.

Each record has seconds, forward-pass equivalents (the engine's unit: one forward over the padded
scoring prompts; resumed layers count their share; attribution 2), the FLOP/s achieved as a share
of a matmul in the job's dtype measured in the same run and of the device's published dense
bfloat16 peak, and the stage's peak device memory (torch.cuda.max_memory_allocated). Budget: about
4 to 6 minutes per 7B shape on an H100 (a 15 GB save, hash and load each), `--layers 8` for less.

    python bench/gpu.py                                   # on the GPU: both 7B shapes
    python bench/gpu.py --shapes qwen2.5-7b --layers 8    # one shape, 8 of its layers
    python bench/gpu.py --tiny                            # on the CPU: tiny models of the same two architectures
    python bench/gpu.py --out gpu.json                    # also the records as JSON

`--tiny` is what tests/models/test_gpu_bench.py runs, so the script cannot rot where CI has no GPU.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from rehearsal import SHAPES  # noqa: E402 - bench/ is not a package
from scan import forward_flops, matmul_rate  # noqa: E402

TINY = {
    "tiny-qwen2": ("qwen2", dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                                 intermediate_size=128, vocab_size=1024, tie_word_embeddings=False)),
    "tiny-neox": ("gpt_neox", dict(hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128,
                                   vocab_size=1024, rotary_pct=0.25, use_parallel_residual=True,
                                   tie_word_embeddings=False)),
}
# Published dense (no sparsity) bfloat16 tensor-core peaks, FLOP/s, by a substring of the device name.
PEAK_BF16 = {"H200": 989e12, "H100 PCIe": 756e12, "H100": 989e12, "A100": 312e12}
MIN_GROUP = 8  # config/config.yaml's ablation.min_group


def published_peak(name: str) -> float | None:
    """The device's published dense bf16 peak, or None for a device not in PEAK_BF16 (or a CPU)."""
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


def ioi_tokenizer(path: Path):
    """A word-level tokenizer over the IOI generator's words (names, places, objects, template
    words, punctuation apart), saved to `path`: IO and S are one token each, so the dataset stage
    keeps the sentences, and a prompt is about as many tokens as a BPE tokenizer makes of it."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from circuitloc.tasks.ioi import generate

    raw = generate(4000, 0)
    words = sorted({w for text in raw["prompt"].to_list() + raw["io"].to_list() + raw["s"].to_list()
                    for w in re.findall(r"\w+|[^\w\s]+", text)})
    vocab = {t: i for i, t in enumerate(["<pad>", "<bos>", "<eos>", "<unk>"] + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>")
    fast.save_pretrained(path)
    return fast


def save_random(kind: str, kw: dict, device: str, dtype, weights: Path) -> None:
    """A random model built on `device` in `dtype` (no host float32 copy), saved in Hugging Face layout."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **kw), dtype=dtype).eval()
    model.save_pretrained(weights)
    del model
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _sync(device: str):
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn, args, reset=None):
    """(last result, [seconds of each repeat], peak GiB of the stage or None): one warm-up call, then
    `args.repeats` timed calls; `reset()` before each (e.g. zeroing the engine's pass count)."""
    import torch

    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    out, seconds = None, []
    for k in range(args.repeats + 1):
        if reset:
            reset()
        _sync(args.device)
        t0 = time.perf_counter()
        out = fn()
        _sync(args.device)
        if k:  # the first call warms kernels and the allocator
            seconds.append(time.perf_counter() - t0)
    return out, seconds, (torch.cuda.max_memory_allocated() / 2**30 if cuda else None)


def _max_diff(a, b) -> float:
    import numpy as np

    return float(np.max(np.abs(np.asarray(a, float) - np.asarray(b, float))))


def measure(name: str, shape: tuple, args, scratch: Path) -> tuple[dict, list[dict]]:
    """One shape, every stage: (what the job saw: card, budget, buckets, checks; the stage records)."""
    import numpy as np
    import torch

    from circuitloc.engine import ablation, attribution
    from circuitloc.engine.bridge import naive_run
    from circuitloc.engine.job import AblationJob
    from circuitloc.engine.layout import decoder_layers
    from circuitloc.engine.select import engine_of
    from circuitloc.engine.settings import JobSettings
    from circuitloc.models.build import build_model
    from circuitloc.models.load import load_tokenizer
    from circuitloc.tasks.ioi import metric
    from circuitloc.tasks.registry import build_dataset

    kind, kw = shape[0], dict(shape[1])
    if args.layers:
        kw["num_hidden_layers"] = args.layers
    weights = scratch / name / "weights"
    t0 = time.perf_counter()
    save_random(kind, kw, args.device, getattr(torch, args.dtype), weights)
    ioi_tokenizer(weights)
    t_save = time.perf_counter() - t0
    t0 = time.perf_counter()
    card = build_model(name, {"source": "hf", "hf": str(weights), "dtype": args.dtype, "prepend_bos": True},
                       scratch / name / "card.json", weights, engine_of)
    t_card = time.perf_counter() - t0
    df, _ = build_dataset("ioi", load_tokenizer(str(weights)), card.prepend_bos,
                          {"n": args.prompts * 2, "n_score": args.prompts}, 0)
    settings = JobSettings(card=card, batch_tokens=args.batch_tokens, task="ioi", device=args.device,
                           min_group=MIN_GROUP, seed=0)
    t0 = time.perf_counter()
    aj = AblationJob(settings, df, "zero-query")  # load_engine, self-check, budget: as a job
    _sync(args.device)
    t_load = time.perf_counter() - t0
    sc, prompts, L, H = aj.scanner, aj.prompts, card.n_layers, card.n_heads
    buckets = prompts.buckets(sc.max_batch_tokens)
    layers = sorted({0, L // 2, L - 1}) if args.scan_layers is None else args.scan_layers
    sets = [{}] + [{layer: [h]} for layer in layers for h in range(H)]
    n, width = prompts.input_ids.shape
    per_fwd = forward_flops(decoder_layers(aj.model.base_model, type(aj.model).__name__), aj.model.config, n, width)
    ld = {"ld": metric}
    records = []

    def record(stage, seconds, passes, peak, **extra):
        med = statistics.median(seconds)
        records.append({"model": name, "stage": stage, "seconds": med, "seconds_min": min(seconds),
                        "seconds_all": seconds, "repeats": len(seconds), "forward_passes": passes,
                        "tflop_per_s": passes * per_fwd / med / 1e12 if passes else None, "peak_gib": peak, **extra})

    def zero():
        sc.forward_passes = 0.0

    scan, secs, peak = timed(lambda: sc.run(prompts, sets, ld)["ld"].float().mean(1), args, zero)
    record("scan", secs, sc.forward_passes, peak, sets=len(sets), layers_scanned=layers, scores=scan.tolist())
    naive, secs, peak = timed(lambda: naive_run(aj.bridge, prompts, sets, metric).float().mean(1).cpu(), args)
    record("naive", secs, float(len(sets)), peak, sets=len(sets), scores=naive.tolist())
    if aj.engine == "scan":
        del aj._bridge  # TransformerLens' module tree must not count in the later stages' peaks

    drops = (scan[0] - scan[1:]).numpy()
    heads = [u for u in aj.units if u.layer in layers]  # the scanned heads, in the units' order
    order = [heads[i] for i in np.argsort(-drops, kind="stable")][: args.curve_steps]
    clean = float(scan[0])
    curves = {}
    for stage, incremental in (("ranked", True), ("ranked_today", False)):
        sc.incremental = incremental
        rows, secs, peak = timed(lambda: ablation.ranked_curve(aj.probe, order, ablation.Baseline(clean, 0.0),
                                                               ablation.RankedPlan(len(order))), args, zero)
        curves[stage] = [r["ld"] for r in rows]
        record(stage, secs, sc.forward_passes, peak, steps=len(rows), values=curves[stage])
    sc.incremental = True

    est, secs, peak = timed(lambda: attribution.estimated_drops(aj.probe, aj.units), args, zero)
    grads_left = sum(p.grad is not None for p in aj.model.parameters())
    exact = {u.label: float(d) for u, d in zip(heads, drops)}
    scanned = [i for i, u in enumerate(aj.units) if u.label in exact]
    from scipy.stats import spearmanr

    rho = float(spearmanr([exact[aj.units[i].label] for i in scanned], est[scanned]).statistic)
    record("attribution", secs, sc.forward_passes, peak, grads_left=grads_left, spearman_vs_exact=rho)

    mean_job, secs, peak = timed(lambda: AblationJob(settings, df, "mean-query", loaded=(aj.model, aj.tok),
                                                     self_check=False), args)
    record("mean_build", secs, 0.0, peak, aligned=mean_job.aligned)
    msc = mean_job.scanner
    mean_scan, secs, peak = timed(lambda: msc.run(mean_job.prompts, sets, ld)["ld"].float().mean(1), args,
                                  lambda: setattr(msc, "forward_passes", 0.0))
    record("mean_scan", secs, msc.forward_passes, peak, sets=len(sets), scores=mean_scan.tolist())

    job = {"model": name, "card": {k: getattr(card, k) for k in ("n_layers", "n_heads", "n_kv_heads", "d_model",
                                                                  "dtype", "engine", "architecture")},
           "weights_files": len((card.weights or {}).get("files") or {}), "seconds_save": t_save,
           "seconds_card": t_card, "seconds_load": t_load, "max_batch_tokens": sc.max_batch_tokens,
           "batch_tokens_setting": args.batch_tokens, "prompts": n, "width": width,
           "lengths": sorted({int(x) for x in (prompts.last_pos + 1).tolist()}), "buckets": len(buckets),
           "token_share": float((prompts.last_pos + 1).sum()) / (n * width),  # real tokens of the padded set
           "engine_vs_naive": _max_diff(scan, naive), "resume_vs_today": _max_diff(curves["ranked"],
                                                                                    curves["ranked_today"]),
           "attribution_grads_left": grads_left, "mean_vs_zero": _max_diff(mean_scan, scan)}
    return job, records  # the model is freed with this frame, before the next shape is built


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="tiny models on the CPU (what the test runs)")
    ap.add_argument("--shapes", nargs="+", help="which shapes (default: all of the mode's)")
    ap.add_argument("--layers", type=int, help="build the shapes with this many layers (default: their own)")
    ap.add_argument("--device", default=None, help="default: cuda, or cpu with --tiny")
    ap.add_argument("--dtype", default=None, help="default: bfloat16, or float32 with --tiny")
    ap.add_argument("--prompts", type=int, default=20, help="scoring prompts (IOI's score jobs: 20)")
    ap.add_argument("--repeats", type=int, default=3, help="timed calls per stage, after one warm-up")
    ap.add_argument("--curve-steps", type=int, default=20)
    ap.add_argument("--scan-layers", type=int, nargs="+", help="default: first, middle and last")
    ap.add_argument("--batch-tokens", default="auto", help="max_batch_tokens as a job gets it (default auto)")
    ap.add_argument("--scratch", help="where the models are saved (default: a temporary directory)")
    ap.add_argument("--out", help="write the records as JSON here")
    args = ap.parse_args(argv)
    import torch

    args.device = args.device or ("cpu" if args.tiny else "cuda")
    args.dtype = args.dtype or ("float32" if args.tiny else "bfloat16")
    args.batch_tokens = args.batch_tokens if args.batch_tokens == "auto" else int(args.batch_tokens)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("bench/gpu.py: no CUDA device here; run it on a GPU node, or try it with --tiny on the CPU")
    shapes = TINY if args.tiny else {k: v[:2] for k, v in SHAPES.items()}
    shapes = {k: v for k, v in shapes.items() if not args.shapes or k in args.shapes}
    cuda = args.device.startswith("cuda")
    device_name = torch.cuda.get_device_name() if cuda else "cpu"
    mm = matmul_rate(n=8192 if cuda else 256, device="cuda" if cuda else "cpu", dtype=args.dtype)
    peak = published_peak(device_name) if cuda else None
    jobs, records = [], []
    with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
        for name, shape in shapes.items():
            job, recs = measure(name, shape, args, Path(scratch))
            jobs.append(job)
            records += recs
            print(f"({name}: done, {len(recs)} stages)", flush=True)
    for r in records:
        r["share_of_matmul"] = r["tflop_per_s"] * 1e12 / mm if r["tflop_per_s"] else None
        r["share_of_peak"] = r["tflop_per_s"] * 1e12 / peak if peak and r["tflop_per_s"] else None
    result = {"device": device_name, "dtype": args.dtype, "matmul_tflop_per_s": mm / 1e12,
              "published_peak_tflop_per_s": peak / 1e12 if peak else None, "repeats": args.repeats,
              "jobs": jobs, "records": records}
    print(f"{device_name}, {args.dtype}: matmul {mm / 1e12:.3g} TFLOP/s measured, published dense peak "
          f"{f'{peak / 1e12:.0f} TFLOP/s' if peak else 'unknown'}; median of {args.repeats} after a warm-up")
    for j in jobs:
        print(f"{j['model']}: card {j['card']}; save {j['seconds_save']:.1f} s, card {j['seconds_card']:.1f} s, "
              f"load as a job {j['seconds_load']:.1f} s; max_batch_tokens {j['batch_tokens_setting']} -> "
              f"{j['max_batch_tokens']}; {j['prompts']} IOI prompts of {j['lengths'][0]}-{j['lengths'][-1]} tokens "
              f"in {j['buckets']} buckets")
    print(f"{'model':12s}{'stage':14s}{'median s':>9s}{'min s':>8s}{'fwd-eq':>8s}{'TFLOP/s':>9s}{'of mm':>7s}"
          f"{'of peak':>8s}{'peak GiB':>9s}")
    for r in records:
        cell = lambda v, f: f"{v:{f}}" if v is not None else "-"  # noqa: E731
        print(f"{r['model']:12s}{r['stage']:14s}{r['seconds']:9.3f}{r['seconds_min']:8.3f}{r['forward_passes']:8.1f}"
              f"{cell(r['tflop_per_s'], '9.3g'):>9s}{cell(r['share_of_matmul'], '7.0%'):>7s}"
              f"{cell(r['share_of_peak'], '8.0%'):>8s}{cell(r['peak_gib'], '9.1f'):>9s}")
    for j in jobs:
        by = {r["stage"]: r for r in records if r["model"] == j["model"]}
        print(f"{j['model']}: engine {by['naive']['seconds'] / by['scan']['seconds']:.1f}x faster than naive, "
              f"max |score difference| {j['engine_vs_naive']:.3g}; resume {by['ranked_today']['seconds'] / by['ranked']['seconds']:.2f}x "
              f"faster than today over {by['ranked']['steps']} ranked steps, max difference {j['resume_vs_today']:.3g}; "
              f"attribution {by['attribution']['seconds']:.3f} s, weights with a gradient after it "
              f"{j['attribution_grads_left']}, Spearman vs exact {by['attribution']['spearman_vs_exact']:.2f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
