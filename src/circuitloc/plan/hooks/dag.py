"""The run's job list for the cost table: Snakemake's own DAG, recorded when the run starts (the
Snakefile's onstart), read by the cost job. Standard library only: it runs while Snakemake plans."""

from __future__ import annotations

from pathlib import Path

from circuitloc.atomic import read_json, write_json

# pipeline order of the stages in the table (a stage not listed comes after these)
STAGES = ("model", "dataset", "dataset_shared", "model_stages", "scores", "curves", "tables", "mib_importances", "figures",
          "figure_scale", "specificity", "specificity_table", "stability", "robustness", "sweep_tables", "sweep_overview",
          "claims", "landing")
STAGE_ALIASES = {"model_hf": "model", "model_rebuilt": "model"}  # a rule that counts under another stage


def stage_of(rule: str) -> str:
    """The stage a rule belongs to: a rule made per group of ablations (`scores__zero_mean__query`)
    counts under its stage (`scores`), `model_hf` under `model`."""
    stage = rule.split("__", 1)[0]
    return STAGE_ALIASES.get(stage, stage)


def own_rule_name(name: str, renamed: str = "\0") -> str:
    """A rule's name in this workflow, from its name in the run: `renamed` is what the run calls a
    rule named NUL (`use rule * from circuitloc as circuitloc_*` makes it 'circuitloc_\\0')."""
    pre, _, post = renamed.partition("\0")
    if name.startswith(pre) and name.endswith(post) and len(name) > len(pre) + len(post):
        return name[len(pre):len(name) - len(post)]
    return name


def chain_handlers(workflow, **handlers) -> None:
    """Run a module's onstart/onsuccess/onerror handlers (start=, success=, error=: functions of the
    log file) before those of the workflow that uses it: Snakemake runs the main Snakefile's only."""
    for kind, fn in handlers.items():
        attr = f"_on{kind}"
        caller = getattr(workflow, attr)

        def both(log, fn=fn, caller=caller):
            fn(log)
            caller(log)

        setattr(workflow, attr, both)


def record_dag(jobs, path, exclude=(), rule_name=str) -> list:
    """[stage, model or None, benchmark file] of every job of a Snakemake DAG that has a benchmark
    file (`jobs`: Snakemake's Job objects: rule.name, wildcards_dict, benchmark), in pipeline order,
    written to `path` as JSON for the cost job; `rule_name` maps the run's rule names to this
    workflow's (`own_rule_name`)."""
    out = [[stage_of(rule_name(j.rule.name)), j.wildcards_dict.get("model"), str(j.benchmark)]
           for j in jobs if rule_name(j.rule.name) not in exclude and j.benchmark]
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


def _measured_seconds(bench) -> float | None:
    """Wall seconds an earlier run's benchmark file recorded for a job (mean over repeats), if any."""
    try:
        with open(bench) as f:
            rows = [line.split("\t")[0] for line in f.read().splitlines()[1:] if line.strip()]
        return sum(map(float, rows)) / len(rows) if rows else None
    except (OSError, ValueError):
        return None


def plan_summary(config: dict, jobs) -> str:
    """The block a run prints when it starts: what it runs (models x tasks x ablations), how many
    jobs, and the job time an earlier run measured for the jobs it reruns (their benchmark files),
    where there is one: an estimate for this machine, never a prediction for jobs never run here."""
    models = list(config.get("models") or {})
    tasks = list(config.get("tasks") or {})
    ablations = sorted({f"{k}-{u}" for block in [config.get("ablation") or {}]
                        + [(m or {}).get("ablation") or {} for m in (config.get("models") or {}).values()]
                        for k in block.get("kinds") or () for u in block.get("units") or ()})
    jobs = list(jobs)
    seen = [s for s in (_measured_seconds(j.benchmark) for j in jobs if j.benchmark) if s is not None]
    lines = [f"circuitloc: {len(models)} models x {len(tasks)} tasks ({', '.join(tasks)}) x up to "
             f"{len(ablations)} ablations ({', '.join(ablations)}): {len(jobs)} jobs to run"]
    if seen:
        lines.append(f"circuitloc: {len(seen)} of these jobs ran here before, for {sum(seen) / 60:.1f} min of "
                     f"job time (their benchmark files); the rest are not timed yet")
    return "\n".join(lines)
