"""The run's job list for the cost table: Snakemake's own DAG, recorded when the run starts (the
Snakefile's onstart), read by the cost job. Standard library only: it runs while Snakemake plans."""

from __future__ import annotations

from pathlib import Path

from circuitloc.atomic import read_json, write_json

# pipeline order of the stages in the table (a stage not listed comes after these)
STAGES = ("model", "dataset", "dataset_shared", "model_stages", "scores", "curves", "tables", "mib_importances", "figures",
          "figure_scale", "specificity", "specificity_table", "stability", "robustness", "sweep_tables", "sweep_overview",
          "claims", "landing")
STAGE_ALIASES = {"model_hf": "model"}  # a rule that counts under another stage


def stage_of(rule: str) -> str:
    """The stage a rule belongs to: a rule made per group of ablations (`scores__zero_mean__query`)
    counts under its stage (`scores`), `model_hf` under `model`."""
    stage = rule.split("__", 1)[0]
    return STAGE_ALIASES.get(stage, stage)


def record_dag(jobs, path, exclude=()) -> list:
    """[stage, model or None, benchmark file] of every job of a Snakemake DAG that has a benchmark
    file (`jobs`: Snakemake's Job objects: rule.name, wildcards_dict, benchmark), in pipeline order,
    written to `path` as JSON for the cost job."""
    out = [[stage_of(j.rule.name), j.wildcards_dict.get("model"), str(j.benchmark)]
           for j in jobs if j.rule.name not in exclude and j.benchmark]
    order = {s: i for i, s in enumerate(STAGES)}
    out.sort(key=lambda j: (order.get(j[0], len(order)), j[2]))
    write_json(out, path)
    return out


def dag_jobs(path) -> tuple[list, list]:
    """The recorded DAG's jobs whose benchmark file exists, as (stage, model, file), and the files
    that are missing (a job run before it was written, or one removed since)."""

    found, missing = [], []
    for stage, model, bench in read_json(path):
        (found if Path(bench).is_file() else missing).append((stage, model, bench))
    return found, [b for _, _, b in missing]
