"""Time the naive TransformerLens loop (one full forward per head, a hook on hook_z) against the
scan engine on the same model and prompts, check the scores agree, and print the ratios; and how
far the engine is from the hardware: this device's matmul rate (a 2048^2 torch.mm, --matmul-size, in the engine's
dtype on --threads threads, best of 5, measured in the same run) beside the engine's achieved rate,
the FLOPs of the forward-pass equivalents it did (counted from the model's shapes: every Linear
weight of a layer, 2 FLOPs per weight per token, plus causal attention scores and mixing, over the
padded prompt set; the last-position unembedding is left out) per second.

    python bench/scan.py                          # SmolLM2-135M (needs its card), IOI, 20 prompts
    python bench/scan.py --random pythia-160m     # random weights, a paper model's configuration
    python bench/scan.py --device cuda --dtype bfloat16
    python bench/scan.py --random tiny-llama --prompts 3 --in-process --matmul-size 256   # a check in seconds

Each measurement runs in a fresh process (its peak memory its own, its start-up outside the times);
--in-process runs them one after another in this one (no interpreter and torch import per mode, as
tests/models/test_bench_commands.py does: the peak memory is then the largest so far).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import queue
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

# Architectures of the paper's models, so a random-weight model of the same shape needs no hub.
RANDOM = {
    "pythia-160m": ("gpt_neox", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                     intermediate_size=3072, vocab_size=50304, rotary_pct=0.25)),
    "qwen2.5-0.5b": ("qwen2", dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                                   num_key_value_heads=2, intermediate_size=4864, vocab_size=151936)),
    "smollm2-135m": ("llama", dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9,
                                   num_key_value_heads=3, intermediate_size=1536, vocab_size=49152)),
    # not a paper model: small enough to check the bench's output in seconds
    "tiny-llama": ("llama", dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                                 num_key_value_heads=2, intermediate_size=688, vocab_size=4096)),
}


def matmul_rate(n: int = 2048, reps: int = 5, device: str = "cpu", dtype: str = "float32") -> float:
    """FLOP/s of one n x n x n torch.mm (best of `reps`) on the current thread count."""
    import torch

    dt = getattr(torch, dtype)
    a, b = torch.randn(n, n, device=device).to(dt), torch.randn(n, n, device=device).to(dt)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        torch.mm(a, b)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best


def forward_flops(layers, config, n_prompts: int, width: int) -> float:
    """FLOPs of one forward-pass equivalent (the engine's unit: one forward over the padded prompt
    set, without the unembedding): per token and layer 2 FLOPs per Linear weight of the layer, plus
    attention scores and mixing over (width + 1) / 2 positions on average (causal)."""
    import torch

    weights = sum(m.weight.numel() for m in layers[0].modules() if isinstance(m, torch.nn.Linear))
    heads = int(config.num_attention_heads)
    d_head = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    per_token = 2 * weights + 2 * 2 * heads * d_head * (width + 1) / 2
    return float(n_prompts * width * len(layers) * per_token)


def _save_tokenizer(path: Path, vocab_size: int):
    """A word-level tokenizer over the whole vocabulary (tokens t0, t1, ...): the random prompts are
    token ids, so it is never used to encode text, but loading a model needs one."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {t: i for i, t in enumerate(specials)} | {f"t{i}": i for i in range(len(specials), vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>").save_pretrained(path)


def _model(args):
    import torch

    from circuitloc.modelcard import ModelCard
    from circuitloc.models.load import load

    if args.random:
        from transformers import AutoConfig, AutoModelForCausalLM

        kind, kw = RANDOM[args.random]
        path = Path(args.cache) / args.random
        if not (path / "config.json").exists():
            torch.manual_seed(0)
            AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **kw)).save_pretrained(path)
        if not (path / "tokenizer.json").exists():  # load() opens a tokenizer beside the weights
            _save_tokenizer(path, kw["vocab_size"])
        from circuitloc.models.card import make_card
        from circuitloc.models.load import load_tokenizer

        card = make_card(args.random, {"source": "hf", "hf": str(path), "dtype": args.dtype}, str(path),
                         load_tokenizer(str(path)))  # a card as the model stage writes it, less the weights record
        bridge, _ = load(card, args.device)
        vocab = kw["vocab_size"]
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(1000, vocab, (args.prompts, 18), generator=g)
        from circuitloc.prompts import Prompts

        prompts = Prompts(ids, torch.full((args.prompts,), 17), {
            "io_id": torch.randint(1000, vocab, (args.prompts,), generator=g),
            "s_id": torch.randint(1000, vocab, (args.prompts,), generator=g)})
        return bridge, prompts, bridge.cfg.n_heads, bridge.cfg.d_head
    card = dataclasses.replace(ModelCard.read(args.card), dtype=args.dtype)
    bridge, tok = load(card, args.device)

    from circuitloc.tasks.common import pad_id
    from circuitloc.tasks.common import prompts as to_prompts
    from circuitloc.tasks.ioi import build, generate
    from circuitloc.tasks.registry import TASKS

    df, _ = build(generate(200, 0), tok, card.prepend_bos, args.prompts, args.prompts, 0)
    return bridge, to_prompts(df, TASKS["ioi"], pad_id(tok)), card.n_heads, card.d_head


def _measure(args, mode, queue):
    import torch

    torch.set_num_threads(args.threads)
    if mode == "matmul":
        queue.put({"mode": mode, "flops_per_s": matmul_rate(args.matmul_size, device=args.device, dtype=args.dtype)})
        return
    from circuitloc.engine.bridge import naive_run
    from circuitloc.engine.scan import Scanner
    from circuitloc.models.load import engine_model
    from circuitloc.tasks.ioi import metric

    bridge, prompts, n_heads, d_head = _model(args)
    L = bridge.cfg.n_layers
    sets = [{}] + [{layer: [h]} for layer in range(L) for h in range(n_heads)]
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    passes, flops = None, None
    if mode == "naive":
        vals = naive_run(bridge, prompts, sets, metric).mean(1)
        passes = float(len(sets))
    elif mode == "engine":
        sc = Scanner(engine_model(bridge), n_heads, d_head, args.batch_tokens)
        vals = sc.run(prompts, sets, {"ld": metric})["ld"].mean(1)
        passes = sc.forward_passes
        flops = passes * forward_flops(sc.layers, engine_model(bridge).config, *prompts.input_ids.shape)
    else:  # attribution
        from circuitloc.engine.attribution import attribute

        sc = Scanner(engine_model(bridge), n_heads, d_head, args.batch_tokens)
        vals = -attribute(sc, prompts, metric).flatten()  # estimated drop per head
        passes = sc.forward_passes  # a forward and a backward to the head outputs: 2
    if args.device == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    peak = (torch.cuda.max_memory_allocated() / 2**20 if args.device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    queue.put({"mode": mode, "seconds": dt, "values": vals.float().cpu().tolist(), "passes": passes, "flops": flops,
               "peak_mib": peak, "rss_before_mib": rss0 / 1024, "layers": L, "heads": n_heads})


def measure(args, mode):
    if args.in_process:
        import torch

        threads, q = torch.get_num_threads(), queue.Queue()
        try:
            _measure(args, mode, q)
        finally:
            torch.set_num_threads(threads)  # the caller's again
        return q.get()
    ctx = mp.get_context("spawn")  # a fresh process each, so peak memory is each mode's own
    q = ctx.Queue()
    p = ctx.Process(target=_measure, args=(args, mode, q))
    p.start()
    while True:  # a child that dies (an exception, the OOM killer) must not leave us waiting forever
        try:
            out = q.get(timeout=5)
            break
        except queue.Empty:
            if not p.is_alive():
                try:
                    out = q.get(timeout=5)
                    break
                except queue.Empty:
                    sys.exit(f"bench/scan.py: the {mode} measurement died (exit code {p.exitcode}); its error is above")
    p.join()
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--card", default=str(ROOT / "results/models/smollm2_135m/card.json"))
    ap.add_argument("--random", choices=sorted(RANDOM), help="random weights with this model's configuration")
    ap.add_argument("--cache", default=str(ROOT / "results/bench"))
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--no-attribution", action="store_true")
    ap.add_argument("--in-process", action="store_true",
                    help="measure in this process, not a fresh one per mode (peak memory: the largest so far)")
    ap.add_argument("--matmul-size", type=int, default=2048, help="n of the n x n x n torch.mm of the matmul rate")
    args = ap.parse_args(argv)
    if not args.random and not Path(args.card).exists():
        sys.exit(f"no card at {args.card}: run `snakemake --cores all results/models/smollm2_135m/card.json` "
                 "first, or use --random")
    naive, engine = measure(args, "naive"), measure(args, "engine")
    mm = measure(args, "matmul")
    import numpy as np
    from scipy.stats import spearmanr

    nv, ev = np.array(naive["values"]), np.array(engine["values"])
    drops_n = nv[0] - nv[1:]
    L, H = engine["layers"], engine["heads"]
    floor = sum(H * (L - layer) / L for layer in range(L))
    model = args.random or "smollm2-135m"
    print(f"model {model} ({L} layers x {H} heads), {args.prompts} IOI prompts, {args.device}/{args.dtype}, "
          f"{args.threads} thread(s)")
    print(f"{'':12s}{'seconds':>10s}{'fwd-equiv':>12s}{'peak MiB':>10s}")
    for r in (naive, engine):
        print(f"{r['mode']:12s}{r['seconds']:10.2f}{r['passes']:12.1f}{r['peak_mib']:10.0f}")
    print(f"speed-up engine vs naive: {naive['seconds'] / engine['seconds']:.2f}x")
    print(f"engine work: {engine['passes']:.1f} forward-pass equivalents; floor {floor:.1f} "
          f"(sum over layers of heads x remaining layers); naive {naive['passes']:.0f}")
    achieved = engine["flops"] / engine["seconds"]
    print(f"engine rate: {engine['flops'] / 1e9:.1f} GFLOP in {engine['seconds']:.2f} s = {achieved / 1e9:.1f} GFLOP/s, "
          f"{achieved / mm['flops_per_s']:.0%} of this {args.device}'s {args.dtype} matmul rate "
          f"({mm['flops_per_s'] / 1e9:.1f} GFLOP/s, {args.matmul_size}^2 torch.mm, {args.threads} thread(s))")
    print(f"max |score difference| (logit diff): {np.abs(nv - ev).max():.2e}  "
          f"({'identical within 1e-4' if np.abs(nv - ev).max() <= 1e-4 else 'DIFFERENT'})")
    result = {"model": model, "naive": naive, "engine": engine, "matmul": mm, "max_diff": float(np.abs(nv - ev).max())}
    if not args.no_attribution:
        att = result["attribution"] = measure(args, "attribution")
        rho = spearmanr(drops_n, np.array(att["values"])).statistic
        print(f"attribution: {att['seconds']:.2f} s ({naive['seconds'] / att['seconds']:.1f}x faster than naive), "
              f"Spearman vs exact drops {rho:.3f}, top head exact {int(np.argmax(drops_n)) // H}."
              f"{int(np.argmax(drops_n)) % H} vs attribution {int(np.argmax(att['values'])) // H}."
              f"{int(np.argmax(att['values'])) % H}")
    return result


if __name__ == "__main__":
    main()
