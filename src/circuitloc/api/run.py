"""The workflow's stages from Python: a run config's settings (`Run`), and with them a task's
prompts, per-unit scores, ranked and greedy curves and Table 1's row for a model, as polars frames.

Every number comes from the function the workflow's job calls (`engine.datasets.build_dataset`,
`engine.pipeline.score` and `curve` through `for_each_ablation`, `report.tables.localization.table1`), with the
settings the plan gives that job (`plan.config.views`), so a frame here equals the file a run writes for
the same model, prompts and config. The jobs write files; here they write to a temporary folder
that is read back and removed."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import torch

from circuitloc import io, metrics, shipped
from circuitloc.api.ablate import attention as head_pattern
from circuitloc.api.ablate import few_prompts, measure, metric_of, rows_of, unit_sets
from circuitloc.api.model import Model, build, load_model
from circuitloc.engine.datasets import build_dataset
from circuitloc.engine.job import AblationJob
from circuitloc.engine.pipeline import curve, for_each_ablation, score
from circuitloc.engine.settings import CurveFiles, JobSettings, ScoreFiles
from circuitloc.errors import ConfigError
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.config import views
from circuitloc.plan.config.configload import check_unknown_keys, load_schema, validate
from circuitloc.plan.config.workflow_config import SCHEMA, layered, provenance, resolve
from circuitloc.report.tables.localization import table1

# the API's own prompt choice (scoring, heldout or all rows; not the config's curves.prompts): by
# default the scores table's rows
SCORING = "scoring"
# the embedded default config, the schema and the resources: the checkout's, or an installed package's copy
ROOT = shipped.root()


@dataclass(frozen=True)
class TaskData:
    """A task's prompts for one model: `task` (ioi, induction, facts or a task of your own), `rows`
    (the dataset: `input_ids`, `score` (true: a scoring prompt, which ranks the units; the others are
    held out for the curves) and the fields the task's metric reads), `model` (the model's name)."""

    task: str
    rows: pl.DataFrame
    model: str


def check_settings(task: str, settings: dict) -> None:
    """`Run.prompts`' settings checked as a config's `tasks.<task>` block is (unknown keys, the
    schema's types and bounds; a task of your own: its module's keys, unchecked here as in a config),
    each problem one line of a ConfigError naming the key (`Run.prompts: tasks.ioi: unknown key
    'n_scroe' (did you mean 'n_score'?)`), so that a misspelt setting is not the config's value."""
    base = registry.base_task(task).name
    schema = load_schema(ROOT / SCHEMA)
    tasks = schema["properties"]["tasks"]
    own = tasks["properties"].get(base) or tasks["additionalProperties"]
    block = {k: v for k, v in own.items() if k != "required"}  # on top of the config's: none is required
    sub = {"$defs": schema.get("$defs", {}), "type": "object",
           "properties": {"tasks": {"type": "object", "properties": {base: block}}}}
    given = {"tasks": {base: dict(settings)}}
    try:
        check_unknown_keys(given, sub)
        validate(given, sub)
        if "metric" in settings:
            raise ConfigError(f"config: tasks.{base}.metric: not a setting of the prompts (the dataset does not "
                              f"depend on it): set it on the Run, Run(tasks={{{base!r}: {{'metric': ...}}}})")
    except ConfigError as e:
        raise ConfigError("\n".join(ln.replace("config: ", "Run.prompts: ", 1) for ln in str(e).splitlines())) \
            from None


class Run:
    """A run config's settings, resolved as a run resolves them (the embedded default, then each
    config file, then `overrides` as `--config` would give them): seeds, bootstrap, ablation
    `min_group`, curve settings, each task's dataset settings and metric. A model the config does
    not name gets the run-wide settings. `workdir`: where built models go."""

    def __init__(self, *configfiles, workdir=".circuitloc", **overrides):
        layers = (ROOT, {}, [str(f) for f in configfiles], overrides or None)
        self.config = resolve(layered(*layers), ROOT, provenance(*layers))
        self.workdir = Path(workdir)

    # ---- models ----------------------------------------------------------------------------------
    def model(self, source, name: str | None = None) -> Model:
        """A model of the config by its name (built as the run builds it), or any source
        `load_model` takes (a hub id, a directory, a .gguf, a config block, a card)."""
        device = self.config["device"]
        if isinstance(source, str) and source in self.config["models"]:
            return Model(build(source, views.model_build_spec(self.config, source), self.workdir), device)
        return load_model(source, name, device, self.workdir)

    def _view(self, model: Model) -> dict:
        """The config with the model among its models (the run-wide settings for one it does not name)."""
        if model.name in self.config["models"]:
            return self.config
        return {**self.config, "models": {**self.config["models"], model.name: {"source": model.card.source}}}

    def settings(self, model: Model, task: str, curves: bool = False):
        """The job record (`engine.settings.JobSettings`) a score (or, `curves`, curve) job of this
        model and task gets from its rule."""
        cfg = self._view(model)
        params = {"opts": views.ablation_opts(cfg, model.name), "bootstrap": views.bootstrap_opts(cfg),
                  "batch_tokens": cfg["max_batch_tokens"], "device": model.device, "seed": cfg["seed"],
                  "metric": views.task_metric(cfg, task)}
        return JobSettings.from_params(params, model.card, task=task,
                                       curves=views.curve_config(cfg, task, model.name) if curves else None)

    # ---- stages ----------------------------------------------------------------------------------
    def prompts(self, model: Model, task: str, **settings) -> TaskData:
        """The task's prompts for the model, built by the task's dataset builder with the config's
        settings for it (`settings` on top: `n=40`, `n_score=10`, `source={"kind": "fahamu", "path":
        ...}` for IOI from a fahamu parquet, ...)."""
        check_settings(task, settings)
        cfg = {**views.dataset_config(self._view(model), task, model.name), **settings}
        with tempfile.TemporaryDirectory() as d:
            build_dataset(self.settings(model, task), cfg, None, f"{d}/data.parquet", f"{d}/filter.json",
                          loaded=model._loaded)
            return TaskData(task, io.read_parquet(f"{d}/data.parquet"), model.name)

    def scores(self, model: Model, data: TaskData, ablation: str = "zero-query") -> pl.DataFrame:
        """One row per unit (`drop`: the metric's fall when the unit alone is ablated; `damage`: that
        fall as a share of clean - floor; intervals with a bootstrap), best first. `ablation`:
        kind-unit, kind zero, mean or resample, unit query, kv or layer. The engine's self-check
        (engine against a plain forward of the model) runs first and raises on a mismatch."""
        with tempfile.TemporaryDirectory() as d:
            out = ScoreFiles(f"{d}/scores.parquet", f"{d}/prompts.parquet")
            for_each_ablation(score, self.settings(model, data.task), data.rows, {ablation: out},
                              loaded=model.loaded())
            frame = metrics.rank(io.read_parquet(out.scores))
            return few_prompts(frame, int(frame["n_prompts"][0]))

    def curves(self, model: Model, data: TaskData, ablation: str, scores: pl.DataFrame,
               with_control: bool = False):
        """The curves on the held-out prompts: `method` ranked (units ablated cumulatively in the
        order of `scores`), greedy (the most damaging next unit, chosen on the scoring prompts) and
        sufficiency; `damage` per `step`. `with_control`: (curves, the random-unit control's frame)."""
        with tempfile.TemporaryDirectory() as d:
            io.write_parquet(scores, f"{d}/scores.parquet")
            out = CurveFiles(f"{d}/scores.parquet", f"{d}/curve.parquet", f"{d}/control.parquet")
            for_each_ablation(curve, self.settings(model, data.task, curves=True), data.rows, {ablation: out},
                              loaded=model.loaded())
            frame = io.read_parquet(out.curve)
            frame = few_prompts(frame, int(frame["n_prompts"][0]))
            return (frame, io.read_parquet(out.control)) if with_control else frame

    def table1(self, model: Model, data: TaskData, scores: pl.DataFrame, curves: pl.DataFrame) -> pl.DataFrame:
        """Table 1's row of the model (`report.tables.table1`): top unit (`top_head`, `top_kv_group` or
        `top_layer`), its raw drop `top_head_drop` (in the metric's units; Table 1's CSV calls it
        `top_head_score`) and that drop as a percentage of clean - floor, `top_head_pct` (scoring
        prompts) and `top_head_pct_heldout` (held out), `heads_to_80` (ranked) and
        `heads_to_80_greedy` at the config's threshold, curve area, CPR and CMD, ..."""
        threshold = float(self.config["curves"]["threshold"])
        row = table1(data.task, {model.name: model.card}, {model.name: scores}, {model.name: curves}, threshold,
                     views.min_heldout(self.config, data.task))
        return row.rename({c: c.replace("top_head_score", "top_head_drop", 1) for c in row.columns
                           if c.startswith("top_head_score")})

    def self_check(self, model: Model, data: TaskData, ablation: str = "zero-query") -> dict:
        """The engine's self-check on a few of the prompts: {what: max |engine - plain forward|};
        raises `errors.EngineMismatchError` past the dtype's tolerance."""
        aj = AblationJob(self.settings(model, data.task), data.rows, ablation, loaded=model.loaded(),
                         self_check=False)
        return aj.scanner.self_check(aj.prompts)

    # ---- your own choices -------------------------------------------------------------------------
    def _job(self, model: Model, data: TaskData, ablation: str, prompts: str) -> AblationJob:
        """The ablation job on the prompts `prompts` names (scoring, heldout, all), seeded as a job is."""
        rows = rows_of(data.rows["score"], prompts)
        job = self.settings(model, data.task)
        torch.manual_seed(job.seed)
        return AblationJob(job, data.rows, ablation, rows=rows, loaded=model.loaded())

    def ablate(self, model: Model, data: TaskData, units, ablation: str = "zero-query", metric=None,
               prompts: str = SCORING) -> pl.DataFrame:
        """The units you choose ablated together: `units` one label (`"L0H5"`), a set (`["L0H5",
        "L1H2"]`) or a list of sets (one row each). Each row: `clean`, `ablated`, `floor`, `drop`,
        `damage` and their bootstrap intervals over the prompts (`drop_lo`, ..., `damage_hi`; NaN
        with one prompt, `interval_note` says why). `metric`: your own (`Metric`, or a function of
        (logits, fields)); `prompts`: scoring (as the scores table), heldout (as the curves) or all."""
        job = self._job(model, data, ablation, prompts)
        sets = unit_sets(units, {u.label: u for u in job.units})
        summary, _ = measure(job, sets, metric_of(metric), job.settings.bootstrap)
        return summary.with_columns(ablation=pl.lit(ablation), prompts=pl.lit(prompts))

    def per_prompt(self, model: Model, data: TaskData, units, ablation: str = "zero-query", metric=None,
                   prompts: str = SCORING) -> pl.DataFrame:
        """As `ablate`, one row per set and prompt: `row` (its position in `data.rows`), `clean`,
        `ablated`, `floor` and `drop`; a set's drops average to its `ablate` drop."""
        job = self._job(model, data, ablation, prompts)
        sets = unit_sets(units, {u.label: u for u in job.units})
        return measure(job, sets, metric_of(metric), None)[1]

    def attention(self, model: Model, data: TaskData, head: str, prompts: str = SCORING) -> pl.DataFrame:
        """The attention pattern of query head `head` (`"L1H2"`), as TransformerLens' hook
        `blocks.{layer}.attn.hook_pattern` gives it: one row per prompt (`row`), query position and
        key position (causal: key <= query), `weight`, and the tokens at both positions."""
        job = self._job(model, data, "zero-query", prompts)
        unit = unit_sets(head, {u.label: u for u in job.units})[0][0]
        tok = model.loaded()[1]
        return head_pattern(job, unit.layer, unit.head, tok.convert_ids_to_tokens)
