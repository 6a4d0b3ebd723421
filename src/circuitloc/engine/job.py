"""The ablation job: a model, a task's prompts and the scan engine with an ablation's replacement,
as score, curve and specificity jobs use it; and the ranking of units those jobs share."""

from __future__ import annotations

import logging
import time

import numpy as np
import polars as pl

from circuitloc import io
from circuitloc.engine import ablation, budget
from circuitloc.engine import replacement
from circuitloc.engine.layout import VERIFIED
from circuitloc.engine.select import scanner_for
from circuitloc.engine.settings import JobSettings
from circuitloc.modelcard import ModelCard
from circuitloc.models.load import bridge_over, load_engine
from circuitloc.tasks import registry
from circuitloc.tasks.common import pad_id
from circuitloc.tasks.common import prompts as to_prompts
from circuitloc.tasks.registry import dataset_columns, task_of

log = logging.getLogger("circuitloc")


def engine_label(card: ModelCard, task: str, ablation_name: str | None = None, engine: str | None = None) -> str:
    """Who an engine error or log line is about: model (architecture, dtype, and the engine that
    ran: scan or bridge, `engine.select.scanner_for`), task and ablation."""
    ran = f", engine {engine}" if engine else ""
    return (f"model {card.name} ({card.architecture}, {card.dtype}{ran}), task {task}"
            + (f", ablation {ablation_name}" if ablation_name else ""))


def read_ranked(scores_path) -> pl.DataFrame:
    """A scores table (parquet), its units in rank order (`ablation.rank`)."""
    return ablation.rank(io.read_parquet(scores_path, ("unit", "drop", "layer", "head"), "scores table"))


class AblationJob:
    """What a score, curve or specificity job holds: one model and task, the prompts it runs, the
    scan engine over them and, for a kind that replaces a unit's output, that replacement.

    `settings`: the job's record (`settings.JobSettings`: task, card, metric, min_group, seed, ...);
    `dataset`: the task's dataset (a parquet path, or the rows); `ablation_name`: kind-unit (zero-query,
    mean-kv, resample-layer, ...). After construction: `df` (the rows run, `rows_in_full` their
    positions in the dataset), `prompts`, `probe` (`ablation.Probe`: scanner, prompts, task),
    `scanner`, `units` (one `units.Unit` per ablation unit), `aligned` (share of prompts whose
    replacement came from aligned prompts; NaN for a kind that builds none), and `floor()`,
    `floor_per_prompt()`, `clean_per_prompt()` for the metric with the task gone and clean, and
    `engine`: which engine scans (scan: the fast exact engine; bridge: TransformerLens' generic
    path), chosen by `engine.select.scanner_for` from the card's architecture (a card's `engine`, when
    set, forces one)."""

    def __init__(self, settings: JobSettings, dataset, ablation_name: str, rows=None, loaded=None,
                 self_check: bool = True):
        """Scores use the rows marked for scoring; curves pass `rows` (a slice or row positions:
        `tasks.common.curve_rows`, held-out rows by default). `loaded`: a (model, tokenizer) to
        reuse. `self_check`: compare the engine with a plain forward of the model first (a few
        prompts)."""

        task_name, card = settings.task, settings.card
        self.settings = settings
        self.task = task_of(task_name, settings.metric)
        self.card, self.device = card, settings.device
        self.kind, self.unit = ablation.parse_ablation(ablation_name)
        self.model, self.tok = loaded or load_engine(card, settings.device)
        full_df = dataset if isinstance(dataset, pl.DataFrame) else \
            io.read_parquet(dataset, dataset_columns(task_name), f"{task_name} dataset")
        everyone = np.arange(len(full_df))
        self.rows_in_full = everyone[full_df["score"].to_numpy()] if rows is None else everyone[rows]
        self.df = full_df[self.rows_in_full]
        self.pad = pad_id(self.tok)
        self.prompts = to_prompts(self.df, self.task, self.pad)
        self.scanner = scanner_for(card, (self.model, self.tok), settings.batch_tokens, settings.device,
                                   card.engine)
        self.probe = ablation.Probe(self.scanner, self.prompts, self.task)
        self.engine = self.scanner.engine
        if self.engine == "bridge":
            self._bridge = self.scanner.bridge
            log.info("%s: architecture %s runs on TransformerLens' bridge engine (exact, generic, slower)",
                     card.name, card.architecture)
        self.scanner.label = engine_label(card, task_name, ablation_name, self.engine)
        if self.engine == "scan" and card.architecture not in VERIFIED:
            log.warning("%s: architecture %s is not among those the scan engine is verified on (%s); "
                        "relying on the engine's self-check", card.name, card.architecture,
                        ", ".join(VERIFIED))
        if self_check and len(self.prompts):
            errors = self.scanner.self_check(self.prompts)
            log.info("engine self-check %s: max |engine - plain forward| %s", self.scanner.label,
                     {k: f"{v:.2g}" for k, v in errors.items()})
        self.aligned = float("nan")
        build = replacement.builder(self.kind)
        if build is not None:
            self.scanner.replacement = self._replacement(build, full_df, ablation_name)
        self._settle_budget()
        self.units = ablation.units(card, self.unit)

    def _settle_budget(self) -> None:
        """`max_batch_tokens: auto` on a GPU sized again now that the job holds its model and
        replacement, less what it keeps beside its passes (engine.budget.settled); a CPU's number stays."""
        repl = sum(t.numel() * t.element_size() for t in self.scanner.replacement.values())
        keeps = budget.reserve(self.card, self.prompts.input_ids.numel(), repl)
        self.scanner.max_batch_tokens = budget.settled(self.scanner.max_batch_tokens, self.settings.batch_tokens,
                                                       self.card, self.device, keeps)

    def _replacement(self, build, full_df, ablation_name) -> dict:
        """The replacement output of the job's kind (its builder, named by the kind's registration),
        and the share of prompts whose replacement came from aligned prompts."""

        if self.settings.min_group is None:
            raise ValueError(f"{ablation_name}: needs min_group (config ablation.min_group)")
        ctx = replacement.ReplacementContext(scanner=self.scanner, prompts=to_prompts(full_df, self.task, self.pad),
                                             rows=full_df, task=self.task, target=self.rows_in_full,
                                             min_group=self.settings.min_group, seed=self.settings.seed)
        replaced, self.aligned = build(ctx)
        return replaced

    @property
    def bridge(self):
        """TransformerLens' view of the same weights, built only when a job needs its hooks."""

        if not hasattr(self, "_bridge"):
            self._bridge = bridge_over(self.card, self.model, self.tok, self.device)
        return self._bridge

    def floor(self) -> float:
        """The metric's value when the task is gone (`tasks.registry.floor_value`): 0 for LD and the
        facts accuracy and margin, -log(vocabulary) for the facts log-probability; for induction,
        the loss on the matched no-repeat sequences."""
        return float(self.floor_per_prompt().mean())

    def floor_per_prompt(self):
        """The floor per prompt (`tasks.registry.floor_per_prompt`; induction: each prompt's own
        no-repeat sequence), so that a bootstrap resamples a ratio's denominator with its numerator."""
        return registry.floor_per_prompt(self.task, self)

    def clean_per_prompt(self):
        """The clean metric per prompt."""
        return self.clean_metrics()[self.task.metric_name]

    def clean_metrics(self) -> dict:
        """The clean metric and the task's extra metrics (facts: the two it is not ranked on), per
        prompt: {name: values}."""
        metrics = {self.task.metric_name: self.task.metric, **self.task.extra}
        return {k: v[0].numpy() for k, v in self.scanner.run(self.prompts, [{}], metrics).items()}


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def progress_line(label: str, done: float, total: int, elapsed: float) -> str:
    """'scores ioi/m/zero-query: 46% (81 of 176 ablation runs), 46 s so far, about 54 s left': the
    time left assumes the rate so far holds (runs of one job cost about the same)."""
    share = min(1.0, done / total) if total else 1.0
    left = elapsed * (1 - share) / share if share > 0 else float("nan")
    eta = "done" if share >= 1 else (f"about {_duration(left)} left" if left == left else "time left unknown")
    return f"{label}: {100 * share:.0f}% ({done:.0f} of {total} ablation runs), {_duration(elapsed)} so far, {eta}"


def progress(total, label):
    """A progress callback for the engine: the job's name, percent done and time left, every 10 s
    and at the end."""
    done = {"n": 0, "t": time.time(), "last": 0.0}

    def tick(k):
        done["n"] += k
        if time.time() - done["last"] > 10 or done["n"] >= total - 1e-9:
            done["last"] = time.time()
            log.info("%s", progress_line(label, done["n"], total, time.time() - done["t"]))
    return tick
