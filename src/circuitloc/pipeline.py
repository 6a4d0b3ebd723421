"""What each Snakemake job does, as plain functions the thin scripts call."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pandas as pd
import torch

from . import ablation as A
from . import io
from .errors import DatasetError, ModelSourceError
from .tasks import facts as facts_task
from .tasks import induction as ind_task
from .tasks import ioi as ioi_task
from .tasks.common import pad_id
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
def _clean_logits(bridge, df, task, batch_tokens):
    from .models.load import engine_model
    from .scan import Scanner

    p = to_prompts(df, task, pad_id(bridge.tokenizer))
    return Scanner(engine_model(bridge), bridge.cfg.n_heads, bridge.cfg.d_head, batch_tokens).last_logits(p)


def build_dataset(task_name: str, card: dict, cfg: dict, seed: int, out_parquet, out_filter, batch_tokens=4096,
                  device="cpu"):
    from .models.load import load

    bridge, tok = load(card, device)
    bos = card["prepend_bos"]
    if task_name == "ioi":
        src = cfg.get("source", {}) or {}
        raw = ioi_task.read_fahamu(src["path"]) if src.get("kind") == "fahamu" else \
            ioi_task.generate(int(cfg.get("n_generate", 4 * cfg["n"])), seed)
        df, counts = ioi_task.build(raw, tok, bos, int(cfg["n"]), int(cfg["n_score"]), seed)
    elif task_name == "induction":
        cands = ind_task.candidate_tokens(tok)
        df = ind_task.sequences(cands, int(cfg["n"]), cfg["prefix_len"], cfg["suffix_len"], seed,
                                tok.bos_token_id if bos else None)
        df["score"] = df.index < int(cfg["n_score"])
        counts = {"input": len(df), "candidate_tokens": len(cands), "kept": len(df), "requested": int(cfg["n"])}
    elif task_name == "facts":
        form = card.get("facts_form", "natural")
        df, counts = facts_task.build(facts_task.load(cfg.get("path")), tok, bos, form)
        logits = _clean_logits(bridge, df, task_of("facts"), batch_tokens)
        known = facts_task.known(logits, torch.tensor(df["answer_id"].to_numpy()), int(cfg.get("top_k", 3)))
        counts["dropped_not_in_top_k"] = int((~known).sum().item())
        df = df[known.numpy()].reset_index(drop=True)
        df = df.sample(frac=1.0, random_state=seed).reset_index(drop=True)
        counts["kept"] = len(df)
        df["score"] = df.index < int(cfg["n_score"])
    else:
        raise DatasetError(f"unknown task {task_name!r}")
    if len(df) == 0:
        raise DatasetError(f"{task_name}/{card['name']}: no rows survive the filters: {counts}")
    if len(df) < int(cfg.get("n", 0) or 0):
        log.warning("%s/%s: only %d rows after filtering (asked for %s)", task_name, card["name"], len(df), cfg["n"])
    io.write_parquet(df, out_parquet)
    io.write_json({"task": task_name, "model": card["name"], **counts}, out_filter)
    log.info("%s/%s: %s", task_name, card["name"], counts)


def build_shared_facts(model: str, member_paths: dict, n_score: int, seed: int, out_parquet, out_filter):
    """Facts every model of the family knows (matched on domain, subject and relation)."""
    frames = {m: pd.read_parquet(p) for m, p in member_paths.items()}
    key = ["domain", "subject", "relation"]
    shared = None
    for f in frames.values():
        k = set(map(tuple, f[key].to_numpy()))
        shared = k if shared is None else shared & k
    df = frames[model]
    mask = [tuple(r) in shared for r in df[key].to_numpy()]
    out = df[mask].reset_index(drop=True)
    if len(out) == 0:
        raise DatasetError(f"facts_shared/{model}: no fact is known by every model of its family "
                           f"({sorted(frames)})")
    out["score"] = out.index < n_score
    io.write_parquet(out, out_parquet)
    io.write_json({"task": "facts_shared", "model": model, "family_members": sorted(frames),
                   "input": len(df), "dropped_not_shared": len(df) - len(out), "kept": len(out)}, out_filter)


# -- scores and curves -------------------------------------------------------------------
class _Job:
    """What a score or curve job holds: model, task, prompts and the ablation's replacement."""

    def __init__(self, task_name, card, dataset, ablation, batch_tokens, rows: slice | None = None, device="cpu"):
        """Scores use the rows marked for scoring; curves pass `rows` (the first n_curve)."""
        from .models.load import engine_model, load
        from .scan import Scanner

        self.task = task_of(task_name)
        self.card = card
        self.kind, self.unit = A.parse_ablation(ablation)
        self.bridge, self.tok = load(card, device)
        df = pd.read_parquet(dataset)
        self.df = (df[df["score"]] if rows is None else df.iloc[rows]).reset_index(drop=True)
        self.pad = pad_id(self.tok)
        self.prompts = to_prompts(self.df, self.task, self.pad)
        self.scanner = Scanner(engine_model(self.bridge), card["n_heads"], card["d_head"], batch_tokens)
        if self.kind == "mean":
            full = to_prompts(df, self.task, self.pad)
            self.scanner.replacement = A.mean_replacement(self.scanner, full)
        self.units = A.units(card, self.unit)

    def floor(self) -> float:
        """The metric's value when the task is gone: 0 for LD and accuracy; for induction, the
        loss on the matched no-repeat sequences."""
        if self.task.name != "induction":
            return 0.0
        p = to_prompts(self.df, self.task, self.pad, column="norep_ids")
        v = self.scanner.run(p, [{}], {self.task.metric_name: self.task.metric})[self.task.metric_name]
        return float(v.mean())

    def clean(self) -> float:
        return float(self.scanner.run(self.prompts, [{}], {"m": self.task.metric})["m"].mean())


def _progress(total, label):
    done = {"n": 0, "t": time.time(), "last": 0.0}

    def tick(k):
        done["n"] += k
        if time.time() - done["last"] > 10 or done["n"] >= total - 1e-9:
            done["last"] = time.time()
            log.info("%s: %.0f/%d ablation runs (%.0f s)", label, done["n"], total, time.time() - done["t"])
    return tick


def score(task_name, card, dataset, ablation, out_parquet, batch_tokens=4096, device="cpu"):
    job = _Job(task_name, card, dataset, ablation, batch_tokens, device=device)
    floor = job.floor()
    label = f"scores {task_name}/{card['name']}/{ablation}"
    df = A.score_units(job.scanner, job.prompts, job.units, job.task, floor,
                       progress=_progress(len(job.units) + 1, label))
    df["floor"] = floor
    df["n_prompts"] = len(job.df)
    if task_name == "induction":
        df = df.merge(attention_scores(job), on=["layer", "head"], how="left")
    io.write_parquet(df, out_parquet)
    log.info("%s: top unit %s drop %.4f", label, df.loc[df["drop"].idxmax(), "unit"], df["drop"].max())


def attention_scores(job) -> pd.DataFrame:
    """Mean attention from the last position to B's position (the ABA offset), per query head;
    for kv units, the mean over the group's query heads."""
    from .heads import induction_scores

    per_head = induction_scores(job.bridge, job.prompts.input_ids, job.prompts.last_pos,
                                torch.tensor(job.df["b_pos"].to_numpy()), job.card["n_layers"])
    return pd.DataFrame([{"layer": u["layer"], "head": u["head"],
                          "attn_score": float(per_head[u["layer"], u["heads"]].mean())} for u in job.units])


def curve(task_name, card, dataset, scores_path, ablation, cfg, seed, out_curve, out_control, batch_tokens=4096,
          device="cpu"):
    rows = slice(None, int(cfg["n_curve"]) if cfg.get("n_curve") else None)
    job = _Job(task_name, card, dataset, ablation, batch_tokens, rows=rows, device=device)
    floor, clean = job.floor(), job.clean()
    scores = pd.read_parquet(scores_path).sort_values(["drop", "layer", "head"], ascending=[False, True, True])
    by_label = {u["unit"]: u for u in job.units}
    ranked = [by_label[u] for u in scores["unit"]]
    steps = min(int(cfg["max_steps"]), len(ranked))
    rows = A.ranked_curve(job.scanner, job.prompts, ranked, job.task, clean, floor, steps,
                          progress=_progress(steps, f"ranked curve {task_name}/{card['name']}/{ablation}"))
    if "greedy" in cfg.get("methods", ["ranked"]):
        rows += A.greedy_curve(job.scanner, job.prompts, ranked, job.task, clean, floor,
                               int(cfg["greedy_candidates"]), int(cfg["greedy_steps"]), cfg.get("greedy_stop_damage"))
    df = pd.DataFrame(rows)
    df["clean"] = clean
    df["floor"] = floor
    df["n_prompts"] = len(job.df)
    df["n_units"] = len(job.units)
    ctrl = A.random_control(job.scanner, job.prompts, job.units, job.task, clean, card["n_layers"],
                            int(cfg.get("control_draws", 10)), seed, exclude=[ranked[0]["unit"]])
    ctrl["clean"] = clean
    ctrl["floor"] = floor
    io.write_parquet(df, out_curve)
    io.write_parquet(ctrl, out_control)
    log.info("curve %s/%s/%s: clean %.4f, final damage %.3f", task_name, card["name"], ablation, clean,
             df[df.method == "ranked"]["damage"].iloc[-1])


# -- tables and figures ------------------------------------------------------------------
def _read(paths: dict) -> dict:
    return {m: pd.read_parquet(p) for m, p in paths.items()}


def _cards(paths: dict) -> dict:
    return {m: io.read_json(p) for m, p in paths.items()}


def write_table1(task, ablation, cards, scores, curves, threshold, out_csv, out_md):
    from .tables import table1, to_markdown

    df = table1(task, _cards(cards), _read(scores), _read(curves), threshold)
    io.write_csv(df, out_csv)
    io.write_text(to_markdown(df, f"Table 1 — {task}, {ablation} ablation"), out_md)


def write_table2(task, ablation, cards, curves, controls, out_csv, out_md):
    from .tables import table2, to_markdown

    df = table2(task, _cards(cards), _read(curves), _read(controls))
    io.write_csv(df, out_csv)
    io.write_text(to_markdown(df, f"Table 2 — {task}, {ablation} ablation: top head alone, and random mid-layer "
                                  "heads as a control"), out_md)


def _save(fig, png, pdf):
    import matplotlib.pyplot as plt

    io.save_figure(fig, png)
    io.save_figure(fig, pdf)
    plt.close(fig)


def fig_heatmap(task, ablation, scores, png, pdf):
    from . import plots

    rows = [("drop", "single-unit drop")]
    data = _read(scores)
    if task == "induction":
        rows.append(("attn_score", "attention to B (ABA offset)"))
    _save(plots.heatmaps(data, rows=rows, title=f"{task}: single-unit {ablation} ablation"), png, pdf)


def fig_curves(task, ablation, cards, curves, threshold, png, pdf):
    from . import plots

    _save(plots.curves(_read(curves), _cards(cards), "ranked", threshold,
                       title=f"{task}: cumulative {ablation} ablation (ranked)"), png, pdf)


def fig_scale(ablation, tables, png, pdf):
    from . import plots

    _save(plots.scale({t: pd.read_csv(p) for t, p in tables.items()}), png, pdf)


def run(fn, *args):
    """Run a job; a CircuitlocError becomes one clear line and a failed job, not a traceback."""
    import sys

    from .errors import CircuitlocError

    try:
        return fn(*args)
    except CircuitlocError as e:
        log.error("%s", e)
        print(f"circuitloc error: {e}", file=sys.stderr)
        sys.exit(1)
