"""A rehearsal of the paper's largest models on a CPU machine: a randomly initialised model with
Qwen2.5-7B's or Pythia-6.9B's configuration in bfloat16, built from its config without a float32
copy, saved as a Hugging Face directory beside a real tokenizer, then through the pipeline's own
steps: the model stage (circuitloc.models.build.build_model: weights hashed, card written), the
job's load and engine (load_engine, engine.select.scanner_for), the self-check, and one layer's
per-head zero-ablation scores on IOI prompts. Each step runs in a fresh process, so the peak host
memory it reports (VmHWM, the resident-set high-water mark) is that step's own.

    python bench/rehearsal.py --shape qwen2.5-7b --tokenizer results/models/smollm2_135m/weights
    python bench/rehearsal.py --shape pythia-6.9b --layers 2       # a quick two-layer run first

The tokenizer directory needs tokenizer.json (and tokenizer_config.json); the default run's
SmolLM2 model directory has both. It is a stand-in for the real model's tokenizer: prompts are
tokenized as SmolLM2 would, and its ids lie inside either shape's vocabulary. Not a CI test: a
7B shape needs about 16 GB of memory and minutes per forward pass on a CPU.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import queue
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

# config.json fields of the published checkpoints (their hub config.json files).
SHAPES = {
    "qwen2.5-7b": ("qwen2", dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                                 num_key_value_heads=4, intermediate_size=18944, vocab_size=152064,
                                 max_position_embeddings=131072, rope_theta=1e6, rms_norm_eps=1e-6,
                                 tie_word_embeddings=False, hidden_act="silu"), False),
    "pythia-6.9b": ("gpt_neox", dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32,
                                     intermediate_size=16384, vocab_size=50432, rotary_pct=0.25,
                                     use_parallel_residual=True, max_position_embeddings=2048,
                                     rotary_emb_base=10000, layer_norm_eps=1e-5, tie_word_embeddings=False,
                                     hidden_act="gelu"), True),
}


def vm_hwm_mib(field: str = "VmHWM") -> float:
    """This process's peak resident memory so far (VmHWM of /proc/self/status), in MiB; or another
    field of it (RssAnon: memory of its own, RssFile: pages of files it maps, such as safetensors)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def load_model(card, device: str):
    """The one place this script loads a model: the jobs' own loader, as a score job calls it."""
    from circuitloc.models.load import load_engine

    return load_engine(card, device)


def fill_random(model, std: float = 0.02, pool_size: int = 1 << 22) -> None:
    """Random weights at memory-copy speed: every matrix is filled from one pool of normal draws
    (std `std`, Hugging Face's initializer range) at shifting offsets; biases 0, norm weights 1.
    Drawing 7 billion normals on a shared CPU takes many minutes; the scores of a random model mean
    nothing anyway, only its shapes and costs do."""
    import torch

    g = torch.Generator().manual_seed(0)
    pool = (torch.randn(pool_size, generator=g) * std).to(torch.bfloat16)
    offset = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() < 2:
                p.fill_(0.0 if name.endswith("bias") else 1.0)
                continue
            flat = p.view(-1)
            for start in range(0, flat.numel(), pool_size):
                n = min(pool_size, flat.numel() - start)
                offset = (offset + 7919) % (pool_size - n + 1) if pool_size > n else 0
                flat[start:start + n].copy_(pool[offset:offset + n])


def step_init(args) -> dict:
    """A random model of the shape, built in bfloat16 (default dtype switched before any parameter
    exists, and Hugging Face's own initialisation skipped, so no float32 copy is ever made), filled
    by `fill_random` and saved with the tokenizer's files."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    kind, kw, _ = SHAPES[args.shape]
    kw = dict(kw, num_hidden_layers=args.layers or kw["num_hidden_layers"])
    torch.set_default_dtype(torch.bfloat16)
    t0 = time.perf_counter()
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(kind, **kw), dtype=torch.bfloat16)
    fill_random(model)
    t_init = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    dtypes = sorted({str(p.dtype) for p in model.parameters()})
    model.save_pretrained(args.dir)
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (Path(args.tokenizer) / f).exists():
            shutil.copy(Path(args.tokenizer) / f, Path(args.dir) / f)
    return {"step": "init+save", "seconds": time.perf_counter() - t0, "init_seconds": t_init,
            "params": n_params, "param_dtypes": dtypes, "peak_mib": vm_hwm_mib()}


def step_model_stage(args) -> dict:
    """The model stage exactly as rule model_hf runs it on a local Hugging Face directory."""
    from circuitloc.engine.select import engine_of
    from circuitloc.models.build import build_model

    _, _, bos = SHAPES[args.shape]
    spec = {"source": "hf", "hf": str(args.dir), "dtype": "bfloat16", "prepend_bos": bos, "family": args.shape}
    t0 = time.perf_counter()
    card = build_model(args.shape.replace("-", "_"), spec, Path(args.work) / "card.json", None, engine_of)
    return {"step": "model stage", "seconds": time.perf_counter() - t0, "engine": card.engine,
            "n_params": card.n_params, "peak_mib": vm_hwm_mib()}


def step_score(args) -> dict:
    """Load as a job does, the self-check, then every head of one layer under zero ablation."""
    import torch

    from circuitloc.engine.select import scanner_for
    from circuitloc.modelcard import ModelCard
    from circuitloc.tasks.common import pad_id
    from circuitloc.tasks.common import prompts as to_prompts
    from circuitloc.tasks.ioi import build, generate, metric
    from circuitloc.tasks.registry import TASKS
    from scan import forward_flops

    torch.set_num_threads(args.threads)
    card = ModelCard.read(Path(args.work) / "card.json")
    t0 = time.perf_counter()
    model, tok = load_model(card, "cpu")
    t_load, rss_load = time.perf_counter() - t0, vm_hwm_mib()
    if args.no_forward:  # a forward reads every weight: touch them all, so mapped pages count too
        with torch.no_grad():
            for p in model.parameters():
                p.view(-1)[:: max(1, 2048)].sum()  # one element per 4 KiB page
        return {"step": "load", "load_seconds": t_load, "dtype": str(next(model.parameters()).dtype),
                "peak_after_load_mib": rss_load, "rss_anon_mib": vm_hwm_mib("RssAnon"),
                "rss_file_mib": vm_hwm_mib("RssFile"), "peak_mib": vm_hwm_mib()}
    df, _ = build(generate(200, 0), tok, card.prepend_bos, args.prompts, args.prompts, 0)
    prompts = to_prompts(df, TASKS["ioi"], pad_id(tok))
    sc = scanner_for(card, (model, tok), args.batch_tokens, "cpu")
    t1 = time.perf_counter()
    errors = sc.self_check(prompts)
    t_check = time.perf_counter() - t1
    print(json.dumps({"step": "self-check (interim)", "load_seconds": t_load, "self_check_seconds": t_check,
                      "self_check_errors": errors, "peak_mib": vm_hwm_mib()}), flush=True)
    layer = args.layer % card.n_layers
    sets = [{}] + [{layer: [h]} for h in range(card.n_heads)]
    sc.forward_passes = 0.0
    t2 = time.perf_counter()
    vals = sc.run(prompts, sets, {"ld": metric})["ld"].float().mean(1)
    t_scores = time.perf_counter() - t2
    flops = forward_flops(sc.layers, model.config, *prompts.input_ids.shape)
    return {"step": "load+self-check+scores", "load_seconds": t_load, "peak_after_load_mib": rss_load,
            "self_check_seconds": t_check, "self_check_errors": errors, "layer": layer,
            "scores_seconds": t_scores, "forward_passes": sc.forward_passes,
            "seconds_per_forward": t_scores / max(sc.forward_passes, 1e-9), "flops_per_forward": flops,
            "prompts": list(prompts.input_ids.shape), "drops": (vals[0] - vals[1:]).tolist(),
            "dtype": str(next(model.parameters()).dtype), "threads": args.threads, "rss_anon_mib": vm_hwm_mib("RssAnon"),
            "rss_file_mib": vm_hwm_mib("RssFile"), "peak_mib": vm_hwm_mib()}


STEPS = {"init": step_init, "stage": step_model_stage, "score": step_score}


def _child(name, args, q):
    try:
        q.put(STEPS[name](args))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which stops
        q.put({"step": name, "error": f"{type(e).__name__}: {e}"})


def run_step(name: str, args) -> dict:
    """One step in a fresh process (its own peak memory); a child that dies is an exit, not a hang."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(name, args, q))
    p.start()
    while True:
        try:
            out = q.get(timeout=5)
            break
        except queue.Empty:
            if not p.is_alive():
                sys.exit(f"bench/rehearsal.py: step {name} died (exit code {p.exitcode}; the OOM killer?)")
    p.join()
    if "error" in out:
        sys.exit(f"bench/rehearsal.py: step {name} failed: {out['error']}")
    print(json.dumps(out), flush=True)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--tokenizer", default=str(ROOT / "results/models/smollm2_135m/weights"),
                    help="a directory with tokenizer.json (default: the default run's SmolLM2)")
    ap.add_argument("--layers", type=int, default=0, help="fewer layers, to try the script quickly (0: all)")
    ap.add_argument("--layer", type=int, default=-1, help="the layer whose heads are scored (default: the last)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-tokens", type=int, default=4096)
    ap.add_argument("--work", default="/tmp/circuitloc-rehearsal", help="scratch directory, removed at the end")
    ap.add_argument("--no-forward", action="store_true",
                    help="stop after loading: the memory of every step without the forward passes, which "
                    "take hours in bfloat16 on a CPU without bfloat16 instructions (score a --layers run instead)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--out", help="write the steps' records here as JSON")
    args = ap.parse_args(argv)
    if not (Path(args.tokenizer) / "tokenizer.json").exists():
        sys.exit(f"no tokenizer.json in {args.tokenizer}: build the default run's SmolLM2 first "
                 "(snakemake --cores 1 results/models/smollm2_135m/card.json) or pass --tokenizer DIR")
    args.work = str(Path(args.work) / args.shape)
    args.dir = str(Path(args.work) / "weights")
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    try:
        records = [run_step(s, args) for s in ("init", "stage", "score")]
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"shape": args.shape, "layers": args.layers, "steps": records}, indent=1))
    peak = max(r["peak_mib"] for r in records)
    s = records[-1]
    print(f"{args.shape}: peak host memory {peak / 1024:.1f} GiB (steps: "
          + ", ".join(f"{r['step']} {r['peak_mib'] / 1024:.1f}" for r in records) + ")")
    if args.no_forward:
        return
    print(f"{s['seconds_per_forward']:.1f} s per forward-pass equivalent over {s['prompts']} tokens "
          f"({s['flops_per_forward'] / s['seconds_per_forward'] / 1e9:.2f} GFLOP/s); self-check {s['self_check_errors']}")


if __name__ == "__main__":
    main()
