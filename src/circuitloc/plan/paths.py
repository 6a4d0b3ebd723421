"""Where a run writes each file: one pattern per kind of file, with Snakemake's wildcards
(`{model}`, `{task}`, `{ablation}`), read by the rules (rules/*.smk), by the plan's targets and by
the jobs' recovery hints, so that a path is written once."""

from __future__ import annotations

RESULTS = "results"
WEIGHTS = f"{RESULTS}/models/{{model}}/weights"
CARD = f"{RESULTS}/models/{{model}}/card.json"
DATA = f"{RESULTS}/data/{{task}}/{{model}}.parquet"
FILTER = f"{RESULTS}/data/{{task}}/{{model}}.filter.json"
SCORES = f"{RESULTS}/scores/{{task}}/{{model}}/{{ablation}}.parquet"
PROMPTS = f"{RESULTS}/scores/{{task}}/{{model}}/{{ablation}}.prompts.parquet"
CURVES = f"{RESULTS}/curves/{{task}}/{{model}}/{{ablation}}.parquet"
CONTROLS = f"{RESULTS}/curves/{{task}}/{{model}}/{{ablation}}.control.parquet"
SPECIFICITY = f"{RESULTS}/specificity/{{model}}/{{ablation}}.parquet"
TABLE1 = f"{RESULTS}/tables/table1_{{task}}_{{ablation}}.csv"
# a task's and ablation's unit scores in MIB's node-importance form (a folder; rule mib_importances)
MIB = f"{RESULTS}/mib/{{task}}/{{ablation}}"
# a job's log and Snakemake benchmark (the cost table sums the benchmarks), and the finished parts
# of a failed or killed job (circuitloc.resume)
LOGS = f"{RESULTS}/logs"
BENCHMARKS = f"{RESULTS}/benchmarks"
RESUME = f"{RESULTS}/.resume"


def log(name: str) -> str:
    """The log file of a job named `name` (a path below the logs folder, wildcards allowed)."""
    return f"{LOGS}/{name}.log"


def benchmark(name: str) -> str:
    """The Snakemake benchmark file of a job named `name` (below the benchmarks folder)."""
    return f"{BENCHMARKS}/{name}.tsv"


def fill(pattern: str, **values: str) -> str:
    """`pattern` with the wildcards named in `values` filled in and the others kept: a rule's output
    for one ablation or task, its other wildcards left to Snakemake."""
    for name, value in values.items():
        pattern = pattern.replace("{" + name + "}", value)
    return pattern
