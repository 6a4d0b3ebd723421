"""What each compute job of the workflow does (models, datasets, scores, curves, specificity), as
plain functions the thin scripts in workflow/scripts call with keyword arguments. Tables:
`writers`; figures: `figures`; the ablation job itself: `job.AblationJob`."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import polars as pl
import torch

from . import ablation as A
from . import io
from . import metrics as M
from .errors import ModelSourceError
from .job import AblationJob, engine_label, progress, read_ranked
from .tasks import facts as facts_task
from .tasks.common import pad_id
from .tasks.registry import build_dataset as task_dataset
from .tasks.registry import prompts as to_prompts
from .tasks.registry import task_of

log = logging.getLogger("circuitloc")


def setup(log_path=None, threads: int = 1, seed: int = 0) -> None:
    """One torch thread per job by default: several jobs beat several threads on a small machine."""
    handlers = [logging.StreamHandler()]
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w"))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", handlers=handlers,
                        force=True)
    torch.set_num_threads(max(1, int(threads)))
    torch.manual_seed(seed)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# -- models ------------------------------------------------------------------------------
def build_model(name: str, spec: dict, card_path, weights_dir) -> dict:
    from .models.card import make_card
    from .models.load import load_tokenizer, resolve_hf

    source = spec.get("source")
    t0 = time.time()
    extra = {}
    if source == "toy":
        from .models.toy import train_toy

        spec = {"prepend_bos": True, **spec}  # toys are trained on rows that start with <bos>
        result = train_toy(dict(spec.get("toy", {})), weights_dir, log=log.info)
        path, extra = str(weights_dir), {"checks": result["checks"], "train_seconds": result["train_seconds"],
                                          "steps": result["steps"], "recipe": result.get("recipe")}
        if result.get("checkpoint"):
            extra["checkpoint"] = result["checkpoint"]
    elif source == "gguf":
        from .models.gguf import convert_gguf, fetch_gguf

        gguf = fetch_gguf(spec["gguf"], Path(weights_dir).parent / "download")
        convert_gguf(gguf, weights_dir)
        path, extra = str(weights_dir), {"gguf": str(gguf), "sha256": spec["gguf"].get("sha256")}
    elif source == "hf":
        path = resolve_hf(name, spec["hf"])
        extra = {"hf": spec["hf"]}
    else:
        raise ModelSourceError(f"model {name!r}: unknown source {source!r} (expected toy, gguf or hf)")
    card = make_card(name, spec, path, load_tokenizer(path), extra)
    card["build_seconds"] = round(time.time() - t0, 1)
    io.write_json(card, card_path)
    log.info("model %s: %s", name, {k: card[k] for k in ("attention", "n_layers", "n_heads", "n_kv_heads")})
    return card


# -- datasets ----------------------------------------------------------------------------
def build_dataset(task_name: str, card: dict, cfg: dict, seed: int, out_parquet, out_filter, batch_tokens=4096,
                  device="cpu", inputs: dict | None = None):
    """A task's dataset for one model (`tasks.registry.build_dataset`) and the row counts each filter
    removed. `inputs`: the resource files the rule declares (ioi_templates, ioi_names, ..., or
    ioi_fahamu_templates and fahamu, facts); the job reads exactly those (default: the shipped
    resources and the configured paths)."""
    from .errors import DatasetError
    from .models.load import load_engine
    from .scan import Scanner

    model, tok = load_engine(card, device)

    def last_logits(rows):  # facts: the model's clean logits, for its knowledge filter
        scanner = Scanner(model, card["n_heads"], card["d_head"], batch_tokens)
        scanner.label = engine_label(card, task_name)
        return scanner.last_logits(to_prompts(rows, task_of(task_name), pad_id(tok)))

    df, counts = task_dataset(task_name, tok, card["prepend_bos"], cfg, seed, inputs=inputs,
                              form=card.get("facts_form", "natural"), last_logits=last_logits)
    if len(df) == 0:
        raise DatasetError(f"{task_name}/{card['name']}: no rows survive the filters: {counts}")
    if len(df) < int(cfg.get("n", 0) or 0):
        log.warning("%s/%s: only %d rows after filtering (asked for %s)", task_name, card["name"], len(df), cfg["n"])
    io.write_parquet(df, out_parquet)
    io.write_json({"task": task_name, "model": card["name"], **counts}, out_filter)
    log.info("%s/%s: %s", task_name, card["name"], counts)


def build_shared_facts(model: str, member_paths: dict, n_score: int, out_parquet, out_filter):
    """Facts every model of the family knows (`tasks.facts.shared_dataset`)."""
    frames = {m: io.read_parquet(p, facts_task.KEY, "facts dataset") for m, p in member_paths.items()}
    df, counts = facts_task.shared_dataset(model, frames, n_score)
    io.write_parquet(df, out_parquet)
    io.write_json({"task": "facts_shared", "model": model, **counts}, out_filter)


# -- scores and curves -------------------------------------------------------------------
def score(task_name, card, dataset, ablation, out_parquet, out_prompts, batch_tokens=4096, device="cpu",
          opts: dict | None = None, bootstrap: dict | None = None):
    """One row per unit (drop, damage, bootstrap intervals, top_freq) and, beside it, the per-prompt
    metric under every single-unit ablation, which the stability analysis splits by condition."""
    job = AblationJob(task_name, card, dataset, ablation, batch_tokens, device=device, opts=opts)
    floor_pp = job.floor_per_prompt()
    floor = float(floor_pp.mean())
    label = f"scores {task_name}/{card['name']}/{ablation}"
    df, per_prompt = A.score_units(job.scanner, job.prompts, job.units, job.task, floor_pp,
                                   progress=progress(len(job.units) + 1, label), bootstrap=bootstrap)
    # aligned: share of prompts whose replacement came from aligned prompts (mean/resample)
    df = df.with_columns(floor=pl.lit(floor, pl.Float64), n_prompts=pl.lit(len(job.df), pl.Int64),
                         aligned=pl.lit(job.aligned, pl.Float64))
    if task_name == "induction":
        df = df.join(attention_scores(job), on=["layer", "head"], how="left", maintain_order="left")
    per_prompt = per_prompt.insert_column(0, pl.Series("row", job.rows_in_full, dtype=pl.Int64))
    io.write_parquet(per_prompt, out_prompts)
    io.write_parquet(df, out_parquet)
    top = A.top(df)
    log.info("%s: top unit %s drop %.4f%s", label, top["unit"], top["drop"],
             f" [{top['drop_lo']:.4f}, {top['drop_hi']:.4f}], top in {100 * top['top_freq']:.0f}% of resamples"
             if "top_freq" in df.columns else "")


def attention_scores(job) -> pl.DataFrame:
    """Mean attention from the last position to B's position (the ABA offset), per query head;
    for kv and layer units, the mean over the unit's query heads."""
    from .heads import induction_scores

    per_head = induction_scores(job.bridge, job.prompts.input_ids, job.prompts.last_pos,
                                torch.tensor(job.df["b_pos"].to_numpy()), job.card["n_layers"])
    return pl.DataFrame([{"layer": u["layer"], "head": u["head"],
                          "attn_score": float(per_head[u["layer"], u["heads"]].mean())} for u in job.units],
                        schema={"layer": pl.Int64, "head": pl.Int64, "attn_score": pl.Float64})


def curve(task_name, card, dataset, scores_path, ablation, cfg, seed, out_curve, out_control, batch_tokens=4096,
          device="cpu", opts: dict | None = None, bootstrap: dict | None = None):
    """The cumulative ablation curve in rank order (and greedy, when configured) over the first
    n_curve prompts, and a negative control of random mid-layer units."""
    rows = slice(None, int(cfg["n_curve"]) if cfg.get("n_curve") else None)
    job = AblationJob(task_name, card, dataset, ablation, batch_tokens, rows=rows, device=device, opts=opts)
    floor_pp, clean_pp = job.floor_per_prompt(), job.clean_per_prompt()
    floor, clean = float(floor_pp.mean()), float(clean_pp.mean())
    scores = read_ranked(scores_path)
    by_label = {u["unit"]: u for u in job.units}
    ranked = [by_label[u] for u in scores["unit"]]
    steps = min(int(cfg["max_steps"]), len(ranked))
    rows = A.ranked_curve(job.scanner, job.prompts, ranked, job.task, clean, floor_pp, steps,
                          progress=progress(steps, f"ranked curve {task_name}/{card['name']}/{ablation}"),
                          clean_pp=clean_pp, bootstrap=bootstrap)
    if "greedy" in cfg["methods"]:
        rows += A.greedy_curve(job.scanner, job.prompts, ranked, job.task, clean, floor,
                               int(cfg["greedy_candidates"]), int(cfg["greedy_steps"]), cfg.get("greedy_stop_damage"))
    df = io.frame(rows).with_columns(clean=pl.lit(clean, pl.Float64), floor=pl.lit(floor, pl.Float64),
                                     n_prompts=pl.lit(len(job.df), pl.Int64),
                                     n_units=pl.lit(len(job.units), pl.Int64))
    ctrl = A.random_control(job.scanner, job.prompts, job.units, job.task, clean, card["n_layers"],
                            int(cfg["control_draws"]), seed, exclude=[ranked[0]["unit"]])
    ctrl = ctrl.with_columns(clean=pl.lit(clean, pl.Float64), floor=pl.lit(floor, pl.Float64))
    io.write_parquet(df, out_curve)
    io.write_parquet(ctrl, out_control)
    log.info("curve %s/%s/%s: clean %.4f, final damage %.3f", task_name, card["name"], ablation, clean,
             df.filter(pl.col("method") == "ranked")["damage"][-1])


# -- beyond the paper: specificity ---------------------------------------------------------
def specificity(card, ablation, datasets: dict, scores: dict, neutral_path, out_parquet, batch_tokens=4096,
                device="cpu", opts: dict | None = None, min_coverage: float = 0.9):
    """Each task's top unit ablated on every task's scoring prompts and on neutral text: a unit that
    breaks everything is not a task circuit."""
    from .models.load import load_engine
    from .tasks.neutral import windows

    loaded = load_engine(card, device)
    tops = {t: read_ranked(p)["unit"][0] for t, p in scores.items()}
    targets = dict(datasets)
    neutral, coverage = windows(neutral_path, loaded[1], card["prepend_bos"], seed=int((opts or {}).get("seed", 0)))
    targets["neutral"] = neutral
    damage: dict = {}
    for target, data in targets.items():
        job = AblationJob(target, card, data, ablation, batch_tokens, device=device, opts=opts, loaded=loaded)
        by_label = {u["unit"]: u for u in job.units}
        name = job.task.metric_name
        v = job.scanner.run(job.prompts, [{}] + [A.as_sets([by_label[u]]) for u in tops.values()],
                            {name: job.task.metric})[name].mean(dim=1).numpy()
        floor = job.floor() if target != "neutral" else 0.0
        for src, val in zip(tops, v[1:]):
            if target == "neutral":  # rise of the next-token loss, relative to the clean loss
                damage[(src, target)] = (float(v[0]), float(val), float((val - v[0]) / v[0]))
            else:
                damage[(src, target)] = (float(v[0]), float(val),
                                         float(M.damage(v[0], val, floor, job.task.higher_is_better)))
    from .analysis import specificity_verdict

    rows = []
    for src, unit in tops.items():
        row = {"model": card["name"], "attention": card["attention"], "ablation": ablation, "task": src,
               "top_unit": unit}
        for target in datasets:
            row[f"damage_{target}"] = damage[(src, target)][2]
        ok = coverage >= min_coverage
        clean, ablated, rise = damage[(src, "neutral")]
        row.update({"neutral_coverage": coverage, "neutral_loss_clean": clean if ok else float("nan"),
                    "neutral_loss_ablated": ablated if ok else float("nan"),
                    "neutral_rise_pct": 100 * rise if ok else float("nan")})
        off = [row[f"damage_{t}"] for t in datasets if t != src]
        row["verdict"] = specificity_verdict(off, rise if ok else float("nan"))
        rows.append(row)
    io.write_parquet(io.frame(rows), out_parquet)
    log.info("specificity %s/%s: %s", card["name"], ablation, [(r["task"], r["top_unit"], r["verdict"]) for r in rows])


def run(fn, *args, **kwargs):
    """Run a job; a CircuitlocError becomes one clear line and a failed job, not a traceback."""
    import sys

    from .errors import CircuitlocError

    try:
        return fn(*args, **kwargs)
    except CircuitlocError as e:
        log.error("%s", e)
        print(f"circuitloc error: {e}", file=sys.stderr)
        sys.exit(1)
    except Exception as e:  # an unexpected failure: its traceback goes to the job's log too
        log.exception("%s: %s", type(e).__name__, e)
        sys.exit(1)
