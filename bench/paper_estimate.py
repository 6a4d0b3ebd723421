"""The whole paper's GPU time on one H200, recomputed from counts (nothing runs a model):

    python bench/paper_estimate.py [--configfile config/paper.yaml] [--json]

For each model of the config (read through the plan's own config code: its tasks, ablations, curve
settings and dtype), each task condition and each ablation (kind x unit) it counts the **forward-pass
equivalents** of the score, curve and specificity jobs, as the engine counts them
(`Scanner.forward_passes`: one forward over a stage's prompts; a set resumed at layer l costs
(L - l)/L of one; the scan's passes cut by `engine.batching.chunks` with the GPU's merged start
layers, at the token budget `engine.budget` gives on an H200), converts them to tokens (prompts x
their padded length: the GPU pads prompts into one group) and to FLOPs (2 x non-embedding
parameters x tokens), and to seconds at `UTILIZATION` of the H200's dense bfloat16 peak. Then
the fixed costs, from bench/loads.py's dry-run counts: each job's start, each model load (the
weights read from disk and copied to the GPU) and each weight hash, at the rates below.

What is counted per ablation (an MHA model's kv ablation is written from its query twin, engine.mha:
no passes):
- score job: the scan (the clean residual stream, every unit alone, the clean run), the clean
  metric, for induction its no-repeat floor and the attention-to-B pass, and for mean and resample
  the replacement (one forward over the task's dataset);
- curve job, on the curve prompts: the replacement, the clean metric (and induction's floor); the
  ranked curve with incremental resume (the clean stream, then one resumed set a step); the greedy
  curve, chosen on the scoring prompts (its selection job's replacement and clean metric; a step:
  the chosen set's stream extended, attribution, one forward and one backward, counted 2; the
  `greedy_guided` best candidates resumed, the whole pool on the `greedy_audit` share of steps)
  and reported on the curve prompts (one resumed set a step); the sufficiency curve (each distinct
  kept count from layer 0, circuitloc.sufficiency); the control (its draws in the middle third of
  the layers, metrics.control_layers);
- specificity job: on each task's scoring prompts and on the neutral text, the replacement, the
  clean metric and the tasks' top units.

Two scenarios: `bound`, every curve runs its whole length (the ranked curve all `max_steps` steps,
greedy all `greedy_steps`: neither stop fires), and `early`, the ranked curve stops after
`--early-ranked` steps and greedy after `--early-greedy` (the stops config/paper.yaml sets:
heads-to-80% plus the patience). A step's resumed set starts at a layer drawn evenly over the model
((L + 1) / 2L of a pass). Facts: every fact of the shipped file counts as known (an upper bound).
Prompt lengths: IOI's generator sentences and the facts prompts in words and punctuation marks (a
BPE tokenizer makes about one token of each of these common words), induction's from its
prefix_len and suffix_len, plus a BOS token where the model prepends one.
"""

from __future__ import annotations

import argparse
import functools
import inspect
import json
import re
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from rehearsal import SHAPES  # noqa: E402 - bench/ is not a package
from scan import RANDOM  # noqa: E402

# config.json fields of the published checkpoints (Qwen/Qwen2.5-0.5B, EleutherAI/pythia-1.4b,
# Qwen/Qwen2.5-1.5B on the hub) for the paper's models that bench/rehearsal.py and bench/scan.py lack
PUBLISHED = {
    "qwen2.5-0.5b": ("qwen2", dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                                   num_key_value_heads=2, intermediate_size=4864, vocab_size=151936,
                                   tie_word_embeddings=True)),  # bench/scan.py's leaves the embeddings untied
    "pythia-1.4b": ("gpt_neox", dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=16,
                                     intermediate_size=8192, vocab_size=50304, rotary_pct=0.25)),
    "qwen2.5-1.5b": ("qwen2", dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                                   num_key_value_heads=2, intermediate_size=8960, vocab_size=151936,
                                   tie_word_embeddings=True)),
}
PEAK = 989e12  # H200 SXM, dense bfloat16 FLOP/s (published)
UTILIZATION = 0.40  # of the peak, the review's assumption
DEVICE_BYTES = 141e9  # H200's memory
DISK = 2e9  # bytes/s a load reads the weights at (a local NVMe SSD, no page-cache credit)
PCIE = 25e9  # bytes/s host to GPU (PCIe 4.0 x16 in practice; PCIe 5 doubles it)
HASH = 1.5e9  # bytes/s of sha256 (the review: about 9 s for 13.7 GB)
JOB_START = 10.0  # s a job that loads a model takes to start: Python, torch, transformers, the CUDA context
BOUND = 10**9  # steps: as many as the config lets a curve run
STAGES = ("score", "curve", "specificity", "loads")


def shape(hf: str) -> tuple[str, dict]:
    key = hf.split("/")[-1].lower()
    table = {**RANDOM, **{k: v[:2] for k, v in SHAPES.items()}, **PUBLISHED}
    if key not in table:
        raise SystemExit(f"model {hf}: no published config sizes here (bench/paper_estimate.py PUBLISHED)")
    return table[key]


def sizes(hf: str) -> dict:
    """Layers, heads, KV heads, d_model, non-embedding and all parameters of the model's published
    configuration, counted on torch's meta device (no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kind, kw = shape(hf)
    cfg = AutoConfig.for_model(kind, **kw)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    emb = {id(p) for m in (model.get_input_embeddings(), model.get_output_embeddings()) for p in m.parameters()}
    params = list({id(p): p for p in model.parameters()}.values())
    return {"layers": cfg.num_hidden_layers, "heads": cfg.num_attention_heads,
            "kv": getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads, "d_model": cfg.hidden_size,
            "nonemb": sum(p.numel() for p in params if id(p) not in emb), "params": sum(p.numel() for p in params)}


def words(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]+", text))


def lengths(task: str, tcfg: dict, spec: dict, seed: int = 0) -> tuple[float, int]:
    """(mean, longest) tokens of a task's prompts for this model."""
    bos = 1 if spec.get("prepend_bos") else 0
    if task == "induction":
        (p0, p1), (s0, s1) = tcfg["prefix_len"], tcfg["suffix_len"]
        return bos + (p0 + p1) / 2 + 2 + (s0 + s1) / 2 + 1, bos + p1 + 2 + s1 + 1
    mean, longest = _text_lengths(task, spec.get("facts_form", "natural"), seed)
    return bos + mean, bos + longest


@functools.lru_cache(maxsize=None)
def _text_lengths(task: str, form: str, seed: int) -> tuple[float, int]:
    if task == "ioi":
        from circuitloc.tasks.ioi import generate

        n = [words(t) for t in generate(2000, seed)["prompt"].to_list()]
    elif task.startswith("facts"):
        from circuitloc.tasks.facts import load

        n = [words(t) for t in load()[form].to_list()]
    else:
        raise SystemExit(f"task {task}: no prompt length known here")
    return statistics.mean(n), max(n)


def resumed(starts: list[int], n_layers: int, copies_max: int) -> float:
    """Passes of sets resumed at `starts` (their first layers; n_layers: the clean run) in one prompt
    group, cut as the GPU cuts them (`engine.batching.chunks`, filled): a pass costs its copies x
    (L - its start) / L."""
    from circuitloc.engine.batching import chunks

    return sum(len(idx) * (n_layers - min(s, n_layers - 1)) / n_layers
               for idx, s in chunks(starts, max(1, copies_max), True, n_layers))


def spread(k: int, n_layers: int) -> list[int]:
    """k start layers drawn evenly over the model."""
    return [(i * n_layers) // k for i in range(k)] if k else []


def per_unit_layers(n_layers: int, per_layer: int) -> list[int]:
    return [layer for layer in range(n_layers) for _ in range(per_layer)]


def score_passes(m: dict, units: int, copies_max: int) -> float:
    """A score job's ablation, on its scoring prompts: the clean stream, every unit and the clean run
    (one `run`), and the clean metric (the task's own passes: `task_extras`)."""
    L = m["layers"]
    return 1 + resumed(per_unit_layers(L, units) + [L], L, copies_max) + (1 + 1 / L)


def curve_passes(m: dict, units: int, cs, steps: tuple[int, int], ratio: float, copies_max: int) -> dict:
    """A curve job's ablation, in curve-prompt passes by stage; `cs`: its CurveSettings, `steps`:
    (ranked, greedy) steps run, `ratio`: scoring-prompt tokens over curve-prompt tokens."""
    from circuitloc import metrics, sufficiency

    L = m["layers"]
    n_units = L * units
    share = (L + 1) / (2 * L)
    ranked = 1 + min(steps[0], cs.max_steps, n_units) * share
    greedy = 0.0
    if "greedy" in cs.methods:
        g = min(steps[1], cs.greedy_steps, n_units)
        pool = spread(min(cs.greedy_candidates, n_units), L)
        short = spread(min(cs.greedy_guided or n_units, n_units), L)
        audited = sum(1 for s in range(g) if cs.greedy_guided is None or _audited(s, cs.greedy_audit))
        attribution = 2 if cs.greedy_guided is not None else 0
        select = (1 + 1 / L) + g * (share + attribution) + audited * resumed(pool, L, copies_max) \
            + (g - audited) * resumed(short, L, copies_max)
        greedy = select * ratio + g * share
    needed = {sufficiency.kept_units(f, n_units) for f in sufficiency.FRACTIONS} | {0, n_units}
    suff = 1 + (len(needed) - 1) + 1 / L if cs.sufficiency else 0  # every count from layer 0; all kept: clean
    lo, hi = metrics.control_layers(L)
    draws = min(cs.control_draws, (hi - lo) * units)
    control = 1 + draws * statistics.mean((L - layer) / L for layer in range(lo, hi))
    return {"clean": 1 + 1 / L, "ranked": ranked, "greedy": greedy,
            "sufficiency": suff, "control": control}


def _audited(step: int, audit: float) -> bool:
    from circuitloc.engine.settings import Greedy

    return Greedy(1, 1, guided=1, audit=audit, attribution="linear").audited(step)


def card_of(m: dict, dtype: str) -> SimpleNamespace:
    """What engine.budget reads of a model card, from the model's sizes."""
    return SimpleNamespace(dtype=dtype, n_layers=m["layers"], d_model=m["d_model"], n_heads=m["heads"])


def token_budget(m: dict, dtype: str, keeps: int) -> int:
    """`max_batch_tokens: auto` on an H200 holding the model, less what the job keeps (engine.budget)."""
    from circuitloc.engine import budget
    from circuitloc.plan.jobs.resources import DTYPE_BYTES

    return budget.auto_tokens(max(0, DEVICE_BYTES - DTYPE_BYTES[dtype] * m["params"] - keeps), card_of(m, dtype))


def load_config(configfile: str) -> dict:
    """The config a run of `--configfile` plans: config/config.yaml with `configfile` on top."""
    from circuitloc.plan.config.configload import effective_config
    from circuitloc.plan.config.workflow_config import resolve

    return resolve(effective_config(ROOT / "config" / "config.yaml", [ROOT / configfile]), ROOT)


def task_extras(task: str, metric: str | None) -> tuple[int, int]:
    """(passes a score job adds, passes a curve job adds) for the task's own needs: a floor per
    prompt (induction's no-repeat sequences) in both, per-unit columns (attention to B) in the score."""
    import importlib

    from circuitloc.plan.vocabulary import catalog as registry
    from circuitloc.plan.vocabulary.vocab import FLOOR_PER_PROMPT

    spec = registry.task(task)
    floor = int(spec.floor(metric) == FLOOR_PER_PROMPT)
    return floor + int(hasattr(importlib.import_module(spec.module), "unit_columns")), floor


def model_rows(cfg: dict, model: str, m: dict, steps: tuple[int, int], padded: bool = True) -> dict:
    """Per stage: {passes (each in its own prompts' units), tokens, flops} of one model's jobs.
    `padded`: every prompt padded to the task's longest (the GPU's merged buckets), else at its own
    length (exact-length buckets)."""
    import importlib

    from circuitloc.engine import budget
    from circuitloc.engine.settings import CurveSettings
    from circuitloc.plan.config import views
    from circuitloc.plan.jobs.resources import DTYPE_BYTES
    from circuitloc.plan.vocabulary import catalog as registry

    spec, dtype = views.model_spec(cfg, model), views.model_build_spec(cfg, model).get("dtype", "float32")
    nbytes = DTYPE_BYTES[dtype]
    card = card_of(m, dtype)
    L, mha = m["layers"], m["kv"] == m["heads"]
    out = {s: {"passes": 0.0, "tokens": 0.0} for s in STAGES}
    tasks = [t for t in views.dataset_tasks(cfg) if model in views.models_for(cfg, t)]
    facts_pool = None
    for task in tasks:
        base = registry.task(task).base or task
        tcfg = views.task_config(cfg, task, model)
        cs = CurveSettings.of(views.curve_config(cfg, task, model))
        mean, longest = lengths(base, tcfg, spec, int(cfg.get("seed", 0)))
        if base.startswith("facts"):
            from circuitloc.tasks.facts import load

            facts_pool = facts_pool or len(load())
        n_data = int(tcfg.get("n") or facts_pool)
        n_score = min(int(tcfg["n_score"]), n_data)
        n_curve = min(cs.n_curve or n_data, n_data if cs.prompts == "all" else n_data - n_score)
        score_extra, curve_extra = task_extras(task, tcfg.get("metric"))
        per_prompt = longest if padded else mean
        score_tok, curve_tok, data_tok = n_score * per_prompt, n_curve * per_prompt, n_data * mean
        for ablation in views.model_ablations(cfg, model):
            kind, unit = registry.parse_ablation(ablation)
            units = {"query": m["heads"], "kv": m["kv"]}.get(unit, 1)
            if mha and unit == "kv":
                continue  # written from the query twin (engine.mha)
            repl = registry.kind(kind).builder is not None
            keeps = budget.reserve(card, int(curve_tok), int(L * curve_tok * m["d_model"] * nbytes) if repl else 0)
            tokens = token_budget(m, dtype, keeps)
            s = score_passes(m, units, tokens // int(score_tok)) + score_extra
            out["score"]["passes"] += s
            out["score"]["tokens"] += s * score_tok + repl * data_tok
            parts = curve_passes(m, units, cs, steps, score_tok / curve_tok, tokens // int(curve_tok))
            parts["clean"] += curve_extra
            c, made = sum(parts.values()), repl * data_tok * (2 if "greedy" in cs.methods else 1)
            out["curve"]["passes"] += c
            out["curve"]["tokens"] += c * curve_tok + made
            for k, v in [*parts.items(), ("replacement", made / curve_tok)]:
                split = out["curve"].setdefault("parts", {}).setdefault(f"{task}/{k}", 0.0)
                out["curve"]["parts"][f"{task}/{k}"] = split + 2 * m["nonemb"] * v * curve_tok / (PEAK * UTILIZATION)
    neutral = inspect.signature(importlib.import_module("circuitloc.tasks.neutral").windows).parameters
    neutral_tok = neutral["n"].default * neutral["length"].default
    for ablation in views.model_ablations(cfg, model):
        kind, unit = registry.parse_ablation(ablation)
        if mha and unit == "kv":
            continue
        repl = registry.kind(kind).builder is not None
        for task in [*views.model_tasks(cfg, model), None]:  # every task's scoring prompts, the neutral text
            if task is None:
                tok, data = neutral_tok, neutral_tok
            else:
                tcfg = views.task_config(cfg, task, model)
                mean, longest = lengths(registry.task(task).base or task, tcfg, spec, int(cfg.get("seed", 0)))
                n_data = int(tcfg.get("n") or facts_pool or 0)
                tok, data = min(int(tcfg["n_score"]), n_data) * (longest if padded else mean), n_data * mean
            p = 1 + (1 + 1 / L) + 1 + len(views.model_tasks(cfg, model)) * (L + 1) / (2 * L)
            out["specificity"]["passes"] += p
            out["specificity"]["tokens"] += p * tok + repl * data
    for s in ("score", "curve", "specificity"):
        out[s]["flops"] = 2 * m["nonemb"] * out[s]["tokens"]
        out[s]["seconds"] = out[s]["flops"] / (PEAK * UTILIZATION)
    return out


def fixed_costs(m: dict, dtype_bytes: int, counts: dict) -> dict:
    """Seconds of a model's loading jobs' starts and loads (disk, then PCIe) and its weight hashes
    (bench/loads.py's counts); its jobs that load no model (datasets of IOI and induction, tables)
    run on the CPU beside the GPU's jobs."""
    weights = dtype_bytes * m["params"]
    seconds = counts["loads"] * (JOB_START + weights * (1 / DISK + 1 / PCIE)) \
        + counts["hash_once"] * weights / HASH
    return {"passes": 0.0, "tokens": 0.0, "flops": 0.0, "seconds": seconds, "jobs": counts["jobs"],
            "loads": counts["loads"], "hashes": counts["hash_once"], "weights_gb": weights / 1e9}


def dry_run_loads(configfile: str) -> dict:
    """bench/loads.py's per-model counts of jobs, model loads and weight hashes (a Snakemake dry run)."""
    import loads as bench_loads

    return bench_loads.count(bench_loads.planned_jobs(configfile, []), {"facts"},
                             bench_loads.own_weights_models(configfile, []))


def estimate(configfile: str, steps: tuple[int, int], loads: dict, sizes_of=sizes, padded: bool = True) -> dict:
    """{models: {model: {sizes, stages: {stage: {passes, tokens, flops, seconds}}}}, total_seconds, ...}
    for the config; `loads`: bench/loads.py's per-model counts (`dry_run_loads`); `sizes_of(hf)`: a
    model's sizes (`sizes`); `padded`: as `model_rows`."""
    from circuitloc.plan.config import views
    from circuitloc.plan.jobs.resources import DTYPE_BYTES

    cfg = load_config(configfile)
    models = {}
    for model in views.models(cfg):
        m = sizes_of(views.model_spec(cfg, model)["hf"])
        rows = model_rows(cfg, model, m, steps, padded)
        dtype = views.model_build_spec(cfg, model).get("dtype", "float32")
        rows["loads"] = fixed_costs(m, DTYPE_BYTES[dtype], loads[model])
        rows["total"] = {"seconds": sum(rows[s]["seconds"] for s in STAGES)}
        models[model] = {"sizes": m, "stages": rows}
    total = sum(v["stages"]["total"]["seconds"] for v in models.values())
    return {"configfile": configfile, "steps": {"ranked": steps[0], "greedy": steps[1]}, "padded": padded,
            "models": models,
            "total_seconds": total, "total_hours": total / 3600,
            "assumptions": {"peak_flops": PEAK, "utilization": UTILIZATION, "disk_bytes_s": DISK,
                            "pcie_bytes_s": PCIE, "hash_bytes_s": HASH, "job_start_s": JOB_START}}


def table(est: dict, label: str) -> list[str]:
    steps = {k: "every" if v >= BOUND else str(v) for k, v in est["steps"].items()}
    lines = [f"## {label}: ranked curves {steps['ranked']} steps, greedy {steps['greedy']} steps, prompts "
             + ("padded to the task's longest" if est["padded"] else "at their own lengths"),
             f"{'model':<14}{'nonemb B':>9}" + "".join(f"{s + ' s':>14}" for s in STAGES) + f"{'total s':>10}"]
    for model, v in est["models"].items():
        st = v["stages"]
        lines.append(f"{model:<14}{v['sizes']['nonemb'] / 1e9:>9.2f}"
                     + "".join(f"{st[s]['seconds']:>14.0f}" for s in STAGES) + f"{st['total']['seconds']:>10.0f}")
    col = {s: sum(v["stages"][s]["seconds"] for v in est["models"].values()) for s in STAGES}
    lines.append(f"{'total':<14}{'':>9}" + "".join(f"{col[s]:>14.0f}" for s in STAGES)
                 + f"{est['total_seconds']:>10.0f}")
    lines.append(f"whole paper: {est['total_hours']:.2f} h on one H200 at {100 * UTILIZATION:.0f}% of "
                 f"{PEAK / 1e12:.0f} TFLOP/s ({'within' if est['total_hours'] <= 1 else 'ABOVE'} 1 h); "
                 f"largest stage: {max(col, key=col.get)} {col[max(col, key=col.get)] / 3600:.2f} h")
    return lines


def main(argv=None, sizes_of=sizes) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configfile", default="config/paper.yaml")
    ap.add_argument("--early-ranked", type=int, default=25, help="ranked steps before the stop (early scenario)")
    ap.add_argument("--early-greedy", type=int, default=10, help="greedy steps before the stop (early scenario)")
    ap.add_argument("--exact-lengths", action="store_true",
                    help="each prompt at its own length (exact-length buckets), not padded to the task's longest")
    ap.add_argument("--loads-json", help="bench/loads.py --json output to use instead of its dry run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    loads = json.loads(Path(args.loads_json).read_text())["models"] if args.loads_json else \
        dry_run_loads(args.configfile)
    padded = not args.exact_lengths
    out = {"bound": estimate(args.configfile, (BOUND, BOUND), loads, sizes_of, padded),
           "early": estimate(args.configfile, (args.early_ranked, args.early_greedy), loads, sizes_of, padded)}
    if args.json:
        print(json.dumps(out))
        return 0
    for name, est in out.items():
        print("\n".join(table(est, name)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
