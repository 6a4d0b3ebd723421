"""Where a toy training step goes: data generation, forward (with the loss), backward, optimizer
(gradient clip, AdamW, lr schedule), on one thread, over N steps of a toy recipe from the config.

    python bench/toy_step.py                       # toy_mha of config/config.yaml, steps 0-79
    python bench/toy_step.py --model toy_gqa --steps 100

Three columns in one run, each from the same initial model, optimiser state and batches:
  per-step  every position projected onto the vocabulary, Corpus.batch(step) built each step
  up-front  the same, with the batches built once before the loop (the "generate the data once per
            run" lever)
  trained   the loss as circuitloc.models.toy.training.batch_loss takes it: under `loss: targets`
            only the labelled positions are projected (`--config config/sweep_capacity.yaml
            --model sweep_small_kv1_s0` for a sweep toy; under `loss: all` it equals per-step)
and a line with the step's cost relative to its forward + backward time, plus this core's fp32
matmul rate (a 2048^2 torch.mm) and the step's matmul FLOPs counted from the model's shapes, as a
fraction of it. The first `--warmup` steps of each column are not timed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from scan import matmul_rate  # noqa: E402  (the same measurement as bench/scan.py's)


def step_matmul_flops(s: dict, vocab: int, tokens: int, width: int) -> float:
    """Forward + backward matmul FLOPs of one step (3x the forward's: weights' and inputs' grads),
    from the recipe's shapes: per token the projections, MLP and tied unembedding, plus attention
    scores and mixing over `width` positions."""
    d, L, H, KV, F = (int(s[k]) for k in ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_mlp"))
    dh = d // H
    per_token = L * (2 * d * (H * dh) * 2 + 2 * d * (KV * dh) * 2 + 3 * 2 * d * F + 2 * 2 * H * dh * width) \
        + 2 * d * vocab
    return 3.0 * per_token * tokens


def setup(spec: dict):
    import torch

    from circuitloc.models import toy
    from circuitloc.tasks import facts as facts_task
    from circuitloc.tasks import induction as induction_task
    from circuitloc.tasks import ioi as ioi_task

    s = toy.resolve_spec(spec)
    seed = int(s["seed"])
    torch.manual_seed(seed)
    ioi_res = ioi_task.load_resources(s["ioi_resources"])
    taught = toy.select_facts(facts_task.load(s["facts_path"]), int(s["n_facts"]), seed)
    tok, _ = toy.build_tokenizer(ioi_res, taught, int(s["pool_size"]), seed)
    corpus = toy.Corpus(s, tok, ioi_res, taught, induction_task.candidate_tokens(tok))
    model = toy.build_model(s, len(tok), tok)
    opt, sched = toy.optimizer(model, s)
    return s, tok, corpus, model, opt, sched


def run(s, corpus, model, opt, sched, steps, warmup, upfront: bool, trained: bool = False) -> dict:
    """The training loop (same ops in the same order), each phase timed; `trained`: the loss as
    training.batch_loss takes it under the recipe's `loss`, else as under `loss: all` (every
    position's logits; with `loss: targets` labels, the same loss)."""
    from types import SimpleNamespace

    import torch

    from circuitloc.models.toy.training import batch_loss

    t = {"data": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    tokens = width = 0
    t_pre = 0.0
    if upfront:
        t0 = time.perf_counter()
        batches = [corpus.batch(i) for i in range(steps)]
        t_pre = time.perf_counter() - t0
    model.train()
    for step in range(steps):
        t0 = time.perf_counter()
        ids, labels = batches[step] if upfront else corpus.batch(step)
        t1 = time.perf_counter()
        loss = batch_loss(SimpleNamespace(s=s if trained else {**s, "loss": "all"}, model=model), ids, labels)
        t2 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t3 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(s["clip"]))
        opt.step()
        sched.step()
        loss.item()
        t4 = time.perf_counter()
        if step >= warmup:
            for k, v in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                t[k] += v
            tokens += ids.numel()
            width = max(width, ids.shape[1])
    n = steps - warmup
    out = {k: v / n for k, v in t.items()}
    out["data"] += t_pre / steps  # the up-front build, spread over every step it served
    out["tokens"], out["width"] = tokens / n, width
    return out


def main(argv=None):
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=str(ROOT / "config/config.yaml"))
    ap.add_argument("--model", default="toy_mha")
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args(argv)
    if args.steps <= args.warmup:
        sys.exit("bench/toy_step.py: --steps must exceed --warmup")
    sys.path.insert(0, str(ROOT / "src"))
    from circuitloc.plan.config.workflow_config import layered, resolve

    models = resolve(layered(ROOT, {}, [args.config]), ROOT)["models"]  # a sweep's toys too
    if args.model not in models or "toy" not in models[args.model]:
        sys.exit(f"bench/toy_step.py: {args.config} has no toy model {args.model!r}")
    torch.set_num_threads(1)
    cols = {}
    modes = ("per-step", "up-front", "trained")
    for mode in modes:
        s, tok, corpus, model, opt, sched = setup(dict(models[args.model]["toy"]))
        cols[mode] = run(s, corpus, model, opt, sched, args.steps, args.warmup, mode == "up-front", mode == "trained")
    rate = matmul_rate()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"toy {args.model}: {s['n_layers']}L d{s['d_model']} {s['n_heads']}q/{s['n_kv_heads']}kv, "
          f"{n_params / 1e6:.2f}M params, vocab {len(tok)}, batch {s['batch']}; steps {args.warmup}-"
          f"{args.steps - 1} timed ({args.steps - args.warmup}), 1 thread, torch {torch.__version__}, "
          f"loss: {s['loss']}")
    print(f"{'ms per step':18s}" + "".join(f"{m:>10s}" for m in modes))
    for mode, c in cols.items():
        c["step"] = sum(c[k] for k in ("data", "forward", "backward", "optimizer"))
        c["fb"] = c["forward"] + c["backward"]
    for k in ("data", "forward", "backward", "optimizer", "step"):
        print(f"{k:18s}" + "".join(f"{1e3 * cols[m][k]:10.1f}" for m in modes))
    print(f"{'step / (fwd+bwd)':18s}" + "".join(f"{cols[m]['step'] / cols[m]['fb']:9.2f}x" for m in modes))
    print(f"{'step / per-step':18s}" + "".join(f"{cols[m]['step'] / cols['per-step']['step']:9.2f}x" for m in modes))
    c = cols["per-step"]
    flops = step_matmul_flops(s, len(tok), c["tokens"], c["width"])
    print(f"fp32 matmul rate of this core (2048^2 torch.mm, 1 thread): {rate / 1e9:.1f} GFLOP/s; "
          f"forward+backward matmuls {flops / 1e9:.2f} GFLOP a step ({c['tokens']:.0f} tokens incl. padding) "
          f"-> {flops / c['fb'] / 1e9:.1f} GFLOP/s, {flops / c['fb'] / rate:.0%} of it")


if __name__ == "__main__":
    main()
