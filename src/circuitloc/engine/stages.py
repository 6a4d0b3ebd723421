"""A model's datasets, scores and curves of every task in one job (config `group_stages`).

A toy's dataset, score and curve jobs spend most of their time starting (imports, loading the
model: about 5 s each, against a few seconds of work), so a sweep of sixty toys pays nine start-ups
per toy for about one start-up's worth of work. This runs the same three stage functions in one
process, in the order their jobs would run, with the seed each job would have set, and writes the
same files: no number depends on how the stages are cut into jobs (tests/workflow/test_workflow.py compares a
grouped run with the stored expected tables). Each finished dataset and ablation is kept in the
job's stash, so a killed job loses none of them."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from circuitloc.engine.datasets import build_dataset
from circuitloc.engine.pipeline import curve, for_each_ablation, score
from circuitloc.engine.settings import CurveFiles, JobSettings, ScoreFiles
from circuitloc.modelcard import ModelCard
from circuitloc.models.load import load_engine
from circuitloc.runner import log


@dataclass(frozen=True)
class TaskStages:
    """One task's files in a staged job: its dataset inputs and outputs, and per ablation its score
    and curve files."""

    task: str
    inputs: dict
    data: str
    filter: str
    scores: list[ScoreFiles]
    curves: list[CurveFiles]


def task_files(tasks: list, ablations: list, inputs: dict, output) -> list[TaskStages]:
    """Each task's files from a staged rule's named inputs (`<task>__<name>`, plan.jobs.inputs.stage_inputs)
    and its output lists (data and filter per task; scores, prompts, curve and control per task and
    ablation, tasks outer: the rule's order)."""
    n = len(ablations)
    out = []
    for i, t in enumerate(tasks):
        own = {**{k.split("__", 1)[1]: v for k, v in inputs.items() if k.startswith(f"{t}__")}, "card": inputs["card"]}
        sl = slice(i * n, (i + 1) * n)
        scores = [ScoreFiles(s, p) for s, p in zip(output.scores[sl], output.prompts[sl], strict=True)]
        curves = [CurveFiles(s.scores, c, k) for s, c, k in zip(scores, output.curve[sl], output.control[sl], strict=True)]
        out.append(TaskStages(t, own, output.data[i], output.filter[i], scores, curves))
    return out


def run_stages(params: dict, card: ModelCard, stages: list[TaskStages], ablations: list, stash) -> None:
    """Per task: its dataset, then every ablation's scores, then every ablation's curves, as the
    dataset, score and curve jobs would (`params`: the staged rule's; `params["settings"][task]`
    holds each task's dataset config, metric and curve config). The model is loaded once."""
    loaded = load_engine(card, str(params.get("device") or "cpu"))
    for st in stages:
        own = params["settings"][st.task]
        job = JobSettings.from_params({**params, "metric": own["metric"]}, card, task=st.task, curves=own["curves"])
        part = stash.part(f"data/{st.task}")
        if part.restore("dataset", [st.data, st.filter]):
            log.info("dataset %s/%s: finished by an earlier, interrupted run of this job; kept", st.task, card.name)
        else:
            torch.manual_seed(job.seed)  # as the dataset job's start (runner.setup)
            build_dataset(job, own["dataset"], st.inputs, st.data, st.filter, loaded=loaded)
            part.keep("dataset", [st.data, st.filter])
        for_each_ablation(score, job, st.data, dict(zip(ablations, st.scores, strict=True)),
                          stash=stash.part(f"scores/{st.task}"), loaded=loaded)
        for_each_ablation(curve, job, st.data, dict(zip(ablations, st.curves, strict=True)),
                          stash=stash.part(f"curves/{st.task}"), loaded=loaded)
    stash.clear()
