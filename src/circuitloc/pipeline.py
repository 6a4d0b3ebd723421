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
from . import metrics as M
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
def _clean_logits(model, tok, card, df, task, batch_tokens):
    from .scan import Scanner

    p = to_prompts(df, task, pad_id(tok))
    scanner = Scanner(model, card["n_heads"], card["d_head"], batch_tokens)
    scanner.label = _label(card, task.name)
    return scanner.last_logits(p)


def _label(card: dict, task: str, ablation: str | None = None) -> str:
    """Who an engine error is about: model (architecture, dtype), task and ablation."""
    return (f"model {card['name']} ({card.get('architecture', '?')}, {card.get('dtype', 'float32')}), task {task}"
            + (f", ablation {ablation}" if ablation else ""))


def dataset_columns(task_name: str) -> tuple:
    """The columns a score or curve job reads from a task's dataset."""
    task = task_of(task_name)
    extra = ("norep_ids", "b_pos") if task.name == "induction" else ()
    return ("input_ids", "score", *task.fields, *extra)


def build_dataset(task_name: str, card: dict, cfg: dict, seed: int, out_parquet, out_filter, batch_tokens=4096,
                  device="cpu", inputs: dict | None = None):
    """`inputs`: the resource files the rule declares (ioi_templates, ioi_names, ..., or
    ioi_templates and fahamu, facts);
    the job reads exactly those (default: the shipped resources and the configured paths)."""
    from .models.load import load_engine

    inputs = inputs or {}

    model, tok = load_engine(card, device)
    bos = card["prepend_bos"]
    if task_name == "ioi":
        src = cfg.get("source", {}) or {}
        declared = inputs.get("ioi_templates")
        res_dir = os.path.dirname(declared) if declared else None
        pool = int(cfg.get("n_generate", 4 * cfg["n"]))  # candidates drawn before the token filter
        if src.get("kind") == "fahamu":
            path = ioi_task.fahamu_path({**src, "path": inputs.get("fahamu") or src.get("path")})
            raw, read_counts = ioi_task.read_fahamu(path, pool, seed, ioi_task.load_templates(res_dir))
            read_counts = {"source": str(path), **read_counts}
        else:
            raw, read_counts = ioi_task.generate(pool, seed, ioi_task.load_resources(res_dir)), {"source": "generate"}
        df, counts = ioi_task.build(raw, tok, bos, int(cfg["n"]), int(cfg["n_score"]), seed)
        counts = {**read_counts, **counts}
    elif task_name == "induction":
        cands = ind_task.candidate_tokens(tok)
        df = ind_task.sequences(cands, int(cfg["n"]), cfg["prefix_len"], cfg["suffix_len"], seed,
                                tok.bos_token_id if bos else None)
        df["score"] = df.index < int(cfg["n_score"])
        counts = {"input": len(df), "candidate_tokens": len(cands), "kept": len(df), "requested": int(cfg["n"])}
    elif task_name == "facts":
        form = card.get("facts_form", "natural")
        df, counts = facts_task.build(facts_task.load(inputs.get("facts") or cfg.get("path")), tok, bos, form)
        logits = _clean_logits(model, tok, card, df, task_of("facts"), batch_tokens)
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
    key = ["domain", "subject", "relation"]
    frames = {m: io.read_parquet(p, key, "facts dataset") for m, p in member_paths.items()}
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

    def __init__(self, task_name, card, dataset, ablation, batch_tokens, rows: slice | None = None, device="cpu",
                 opts: dict | None = None, loaded=None, self_check: bool = True):
        """Scores use the rows marked for scoring; curves pass `rows` (the first n_curve). `opts`: the
        config's `ablation` block (min_group) and seed; `loaded`: a (model, tokenizer) to reuse.
        `self_check`: compare the engine with a plain forward of the model first (a few prompts)."""
        from .models.load import load_engine
        from .scan import VERIFIED, Scanner

        opts = opts or {}
        self.task = task_of(task_name)
        self.card, self.device = card, device
        self.kind, self.unit = A.parse_ablation(ablation)
        self.model, self.tok = loaded or load_engine(card, device)
        full_df = dataset if isinstance(dataset, pd.DataFrame) else \
            io.read_parquet(dataset, dataset_columns(task_name), f"{task_name} dataset")
        picked = full_df[full_df["score"]] if rows is None else full_df.iloc[rows]
        self.rows_in_full = picked.index.to_numpy()
        self.df = picked.reset_index(drop=True)
        self.pad = pad_id(self.tok)
        self.prompts = to_prompts(self.df, self.task, self.pad)
        self.scanner = Scanner(self.model, card["n_heads"], card["d_head"], batch_tokens)
        self.scanner.label = _label(card, task_name, ablation)
        if card.get("architecture") not in VERIFIED:
            log.warning("%s: architecture %s is not among those verified against TransformerLens (%s); "
                        "relying on the engine's self-check", card["name"], card.get("architecture"),
                        ", ".join(VERIFIED))
        if self_check and len(self.prompts):
            errors = self.scanner.self_check(self.prompts)
            log.info("engine self-check %s: max |engine - plain forward| %s", self.scanner.label,
                     {k: f"{v:.2g}" for k, v in errors.items()})
        self.aligned = float("nan")
        if self.kind != "zero":
            self.scanner.replacement = self._replacement(full_df, int(opts.get("min_group", 8)),
                                                         int(opts.get("seed", 0)))
        self.units = A.units(card, self.unit)

    def _replacement(self, full_df, min_group, seed) -> dict:
        """Mean: per-position means within aligned groups of >= min_group prompts of the whole task set,
        else the mean over positions. Resample: another prompt of the set, aligned where possible."""
        from . import replacement as R

        full = to_prompts(full_df, self.task, self.pad)
        lengths = (full.last_pos + 1).numpy()
        if self.kind == "mean":
            groups = R.aligned_groups(full_df, self.task.align, lengths, min_group)
            self.aligned = float((groups[self.rows_in_full] >= 0).mean())
            return R.mean_replacement(self.scanner, full, self.rows_in_full, groups)
        groups = R.aligned_groups(full_df, self.task.align, lengths, 2)
        src = R.resample_sources(groups, lengths, self.rows_in_full, seed)
        self.aligned = float(((groups[src] == groups[self.rows_in_full]) & (groups[src] >= 0)).mean())
        return R.resample_replacement(self.scanner, full, self.rows_in_full, src)

    @property
    def bridge(self):
        """TransformerLens' view of the same weights, built only when a job needs its hooks."""
        from .models.load import bridge_over

        if not hasattr(self, "_bridge"):
            self._bridge = bridge_over(self.card, self.model, self.tok, self.device)
        return self._bridge

    def floor(self) -> float:
        """The metric's value when the task is gone: 0 for LD and accuracy; for induction, the
        loss on the matched no-repeat sequences."""
        return float(self.floor_per_prompt().mean())

    def floor_per_prompt(self):
        """The floor per prompt (induction: each prompt's own no-repeat sequence), so that a
        bootstrap resamples a ratio's denominator with its numerator."""
        import numpy as np

        if self.task.name != "induction":
            return np.zeros(len(self.df))
        p = to_prompts(self.df, self.task, self.pad, column="norep_ids")
        v = self.scanner.run(p, [{}], {self.task.metric_name: self.task.metric})[self.task.metric_name]
        return v[0].numpy().astype(float)

    def clean_per_prompt(self):
        return self.scanner.run(self.prompts, [{}], {"m": self.task.metric})["m"][0].numpy()


def _progress(total, label):
    done = {"n": 0, "t": time.time(), "last": 0.0}

    def tick(k):
        done["n"] += k
        if time.time() - done["last"] > 10 or done["n"] >= total - 1e-9:
            done["last"] = time.time()
            log.info("%s: %.0f/%d ablation runs (%.0f s)", label, done["n"], total, time.time() - done["t"])
    return tick


def score(task_name, card, dataset, ablation, out_parquet, out_prompts, batch_tokens=4096, device="cpu",
          opts: dict | None = None, bootstrap: dict | None = None):
    """One row per unit (drop, damage, bootstrap intervals, top_freq) and, beside it, the per-prompt
    metric under every single-unit ablation, which the stability analysis splits by condition."""
    job = _Job(task_name, card, dataset, ablation, batch_tokens, device=device, opts=opts)
    floor_pp = job.floor_per_prompt()
    floor = float(floor_pp.mean())
    label = f"scores {task_name}/{card['name']}/{ablation}"
    df, per_prompt = A.score_units(job.scanner, job.prompts, job.units, job.task, floor_pp,
                                   progress=_progress(len(job.units) + 1, label), bootstrap=bootstrap)
    df["floor"] = floor
    df["n_prompts"] = len(job.df)
    df["aligned"] = job.aligned  # share of prompts whose replacement came from aligned prompts (mean/resample)
    if task_name == "induction":
        df = df.merge(attention_scores(job), on=["layer", "head"], how="left")
    per_prompt.insert(0, "row", job.rows_in_full)
    io.write_parquet(per_prompt, out_prompts)
    io.write_parquet(df, out_parquet)
    top = df.loc[df["drop"].idxmax()]
    log.info("%s: top unit %s drop %.4f%s", label, top["unit"], top["drop"],
             f" [{top['drop_lo']:.4f}, {top['drop_hi']:.4f}], top in {100 * top['top_freq']:.0f}% of resamples"
             if "top_freq" in df else "")


def attention_scores(job) -> pd.DataFrame:
    """Mean attention from the last position to B's position (the ABA offset), per query head;
    for kv and layer units, the mean over the unit's query heads."""
    from .heads import induction_scores

    per_head = induction_scores(job.bridge, job.prompts.input_ids, job.prompts.last_pos,
                                torch.tensor(job.df["b_pos"].to_numpy()), job.card["n_layers"])
    return pd.DataFrame([{"layer": u["layer"], "head": u["head"],
                          "attn_score": float(per_head[u["layer"], u["heads"]].mean())} for u in job.units])


def curve(task_name, card, dataset, scores_path, ablation, cfg, seed, out_curve, out_control, batch_tokens=4096,
          device="cpu", opts: dict | None = None, bootstrap: dict | None = None):
    rows = slice(None, int(cfg["n_curve"]) if cfg.get("n_curve") else None)
    job = _Job(task_name, card, dataset, ablation, batch_tokens, rows=rows, device=device, opts=opts)
    floor_pp, clean_pp = job.floor_per_prompt(), job.clean_per_prompt()
    floor, clean = float(floor_pp.mean()), float(clean_pp.mean())
    scores = _ranked(scores_path)
    by_label = {u["unit"]: u for u in job.units}
    ranked = [by_label[u] for u in scores["unit"]]
    steps = min(int(cfg["max_steps"]), len(ranked))
    rows = A.ranked_curve(job.scanner, job.prompts, ranked, job.task, clean, floor_pp, steps,
                          progress=_progress(steps, f"ranked curve {task_name}/{card['name']}/{ablation}"),
                          clean_pp=clean_pp, bootstrap=bootstrap)
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


# -- beyond the paper: specificity, stability, robustness ---------------------------------
def neutral_windows(text_path, tok, prepend_bos: bool, n: int = 48, length: int = 24, seed: int = 0):
    """Windows of `length` tokens from a neutral text; each is scored on predicting the next token.
    Returns (DataFrame, coverage): coverage is the share of the text's tokens that are not unknown
    (a closed toy vocabulary covers little of ordinary prose, and its loss there means nothing)."""
    import numpy as np

    ids = tok(Path(text_path).read_text(), add_special_tokens=False)["input_ids"]
    unk = tok.unk_token_id
    coverage = 1.0 if unk is None else float(np.mean([i != unk for i in ids]))
    if len(ids) < length + 2:
        raise DatasetError(f"{text_path}: too short for windows of {length} tokens")
    starts = np.random.default_rng(seed).choice(len(ids) - length - 1, size=min(n, len(ids) - length - 1),
                                                replace=False)
    bos = [tok.bos_token_id] if prepend_bos and tok.bos_token_id is not None else []
    df = pd.DataFrame({"input_ids": [bos + ids[s : s + length] for s in starts],
                       "b_id": [ids[s + length] for s in starts], "length": length, "score": True})
    return df, coverage


def _ranked(scores_path) -> pd.DataFrame:
    """Units by descending single-unit drop, ties by position: the order of curves and of 'top unit'."""
    df = io.read_parquet(scores_path, ("unit", "drop", "layer", "head"), "scores table")
    return df.sort_values(["drop", "layer", "head"], ascending=[False, True, True])


def _top_unit(scores_path) -> str:
    return _ranked(scores_path)["unit"].iloc[0]


def specificity(card, ablation, datasets: dict, scores: dict, neutral_path, out_parquet, batch_tokens=4096,
                device="cpu", opts: dict | None = None, min_coverage: float = 0.9):
    """Each task's top unit ablated on every task's scoring prompts and on neutral text: a unit that
    breaks everything is not a task circuit."""
    from .models.load import load_engine

    loaded = load_engine(card, device)
    tops = {t: _top_unit(p) for t, p in scores.items()}
    targets = dict(datasets)
    neutral, coverage = neutral_windows(neutral_path, loaded[1], card["prepend_bos"], seed=int((opts or {}).get("seed", 0)))
    targets["neutral"] = neutral
    damage: dict = {}
    for target, data in targets.items():
        job = _Job(target, card, data, ablation, batch_tokens, device=device, opts=opts, loaded=loaded)
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
    io.write_parquet(pd.DataFrame(rows), out_parquet)
    log.info("specificity %s/%s: %s", card["name"], ablation, [(r["task"], r["top_unit"], r["verdict"]) for r in rows])


def write_specificity_table(parts: list, out_csv, out_md):
    from .tables import to_markdown

    df = pd.concat([io.read_parquet(p) for p in parts], ignore_index=True)
    io.write_csv(df, out_csv)
    io.write_text(to_markdown(df, "Specificity — each task's top unit ablated on every task (damage, 1 = task "
                                  "gone) and on neutral text (% rise of next-token loss)"), out_md)


def write_stability(task, entries: list, primary: str, out_csv, out_md, png, pdf):
    """entries: dicts with model, card, ablation, prompts (per-prompt scores), dataset, and for
    facts the per-model and shared unit scores. The figure shows the primary ablation."""
    from . import analysis as AN
    from . import plots
    from .tables import to_markdown

    rows, maps = [], []
    for e in entries:
        e = {**e, "attention": io.read_json(e["card"])["attention"]}
        if task == "facts":
            if e.get("shared") is None:
                rows.append({"task": task, "model": e["model"], "attention": e["attention"], "ablation": e["ablation"],
                             "split": "fact set", "note": "no shared set (a family of one, or tasks.facts.shared: false)"})
                continue
            row, m = AN.shared_stability_row(e["model"], e["attention"], e["ablation"],
                                             io.read_parquet(e["scores"]), io.read_parquet(e["shared"]))
            r, mm = [row], [m]
        else:
            r, mm = AN.stability_rows(task, e["model"], e["attention"], e["ablation"],
                                      io.read_parquet(e["prompts"]), io.read_parquet(e["dataset"]))
        rows += r
        if e["ablation"] == primary:
            units = io.read_parquet(e["scores"])[["unit", "layer", "head"]]
            maps += [(title, {c: units.assign(drop=units["unit"].map(d)) for c, d in conds.items()})
                     for title, conds in mm]
    df = pd.DataFrame(rows)
    io.write_csv(df, out_csv)
    io.write_text(to_markdown(df, f"Stability — {task}: the same unit scores on two input conditions"), out_md)
    _save(plots.stability(maps, title=f"{task}: single-unit drops under two input conditions ({primary} ablation)"),
          png, pdf)


def write_robustness(table1s: dict, out_csv, out_md):
    from .analysis import robustness
    from .tables import to_markdown

    df = robustness({k: pd.read_csv(p) for k, p in table1s.items()})
    io.write_csv(df, out_csv)
    io.write_text(to_markdown(df, "Robustness — MHA vs GQA (top head score, heads-to-80%) under every ablation "
                                  "kind and unit"), out_md)


def write_sweep(task, ablation, table1_csv, cards: dict, meta: dict, ci, out_csv, out_md, out_paired_csv,
                out_paired_md, png, pdf, opts: dict | None = None):
    """The sweep's table, paired tests and figure for one task and ablation. A toy that failed its
    held-out checks (`acceptance.enforce: false` in a sweep) or shows no task behaviour is counted,
    never used. opts: alpha and p_adjust (holm or bh) of the paired table."""
    from . import plots
    from . import sweep as SW
    from .tables import to_markdown

    opts = {"alpha": 0.05, "p_adjust": "holm", **(opts or {})}
    passed = {m: bool(io.read_json(p).get("checks", {}).get("passed", True)) for m, p in cards.items()}
    pm = SW.per_model(pd.read_csv(table1_csv, dtype={"top_head": str}), meta, passed, task)
    summary = SW.summarize(pm, ci)
    pairs = SW.paired(pm, ci, float(opts["alpha"]), str(opts["p_adjust"]))
    io.write_csv(summary, out_csv)
    io.write_text(to_markdown(summary, f"Sweep — {task}, {ablation} ablation: mean and {int(ci * 100)}% t-interval "
                                       "across seeds per size and KV-head count (heads-to-80%: median, censored "
                                       "count), over the seeds of each row's paired comparison with MHA"), out_md)
    io.write_csv(pairs, out_paired_csv)
    n_tests = int(pairs["n_tests"].iloc[0]) if len(pairs) else 0
    io.write_text(to_markdown(pairs, f"Sweep — {task}, {ablation} ablation: each KV-head count against the MHA "
                                     "model of the same seed and size (top head: paired t-test; heads-to-80%: "
                                     "exact sign-flip test on censoring-aware ranks; p adjusted by "
                                     f"{opts['p_adjust']} over the {n_tests} tests of this table)"), out_paired_md)
    _save(plots.sweep(summary, pm, title=f"{task}: {ablation} ablation across seeds (top head: mean and "
                                         f"{int(ci * 100)}% interval; heads-to-80%: median)"), png, pdf)


# -- tables and figures ------------------------------------------------------------------
def _read(paths: dict) -> dict:
    return {m: io.read_parquet(p) for m, p in paths.items()}


def _cards(paths: dict) -> dict:
    return {m: io.read_json(p) for m, p in paths.items()}


def write_table1(task, ablation, cards, scores, curves, threshold, out_csv, out_md):
    from .tables import table1, to_markdown

    df = table1(task, _cards(cards), _read(scores), _read(curves), threshold)
    io.write_csv(df, out_csv)
    io.write_text(to_markdown(df, f"Table 1 — {task}, {ablation} ablation"), out_md)


def write_table2(task, ablation, cards, curves, controls, out_csv, out_md, scores=None):
    from .tables import table2, to_markdown

    df = table2(task, _cards(cards), _read(curves), _read(controls), _read(scores) if scores else None)
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
    except Exception as e:  # an unexpected failure: its traceback goes to the job's log too
        log.exception("%s: %s", type(e).__name__, e)
        sys.exit(1)
