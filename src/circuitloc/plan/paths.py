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
# Each table and figure as its path less the suffix: a table job writes <stem>.csv, <stem>.md and the
# HTML page the report shows, <stem>.html; a figure job <stem>.png and <stem>.pdf (`file` adds one)
TABLES = f"{RESULTS}/tables"
FIGURES = f"{RESULTS}/figures"
TABLE_1 = f"{TABLES}/table1_{{task}}_{{ablation}}"
TABLE_2 = f"{TABLES}/table2_{{task}}_{{ablation}}"
PER_TASK_TABLES = {"table1": TABLE_1, "table2": TABLE_2}  # by the name the rules give each
SPECIFICITY_TABLE = f"{TABLES}/specificity"
STABILITY_TABLE = f"{TABLES}/stability_{{task}}"
ROBUSTNESS_TABLE = f"{TABLES}/robustness"
CLAIMS_TABLE = f"{TABLES}/claims"
COST_TABLE = f"{TABLES}/cost"
SWEEP_TABLE = f"{TABLES}/sweep_{{task}}_{{ablation}}"
SWEEP_PAIRED_TABLE = f"{TABLES}/sweep_paired_{{task}}_{{ablation}}"
SWEEP_OVERVIEW_TABLE = f"{TABLES}/sweep_overview"
SWEEP_MODELS = f"{TABLES}/sweep_models_{{task}}_{{ablation}}.parquet"  # the toys a sweep table read
FIG1 = f"{FIGURES}/fig1_heatmap_{{task}}_{{ablation}}"
FIG2 = f"{FIGURES}/fig2_curves_{{task}}_{{ablation}}"
SCALE_FIGURE = f"{FIGURES}/scale_{{ablation}}"
STABILITY_FIGURE = f"{FIGURES}/stability_{{task}}"
SWEEP_FIGURE = f"{FIGURES}/sweep_{{task}}_{{ablation}}"
TABLE1 = f"{TABLE_1}.csv"
# the report's first page (rule landing) and the HTML report
LANDING = f"{RESULTS}/report/landing.rst"
REPORT = f"{RESULTS}/report.html"
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


def file(stem: str, suffix: str, **values: str) -> str:
    """The file of a table or figure `stem` with `suffix` (csv, md, html; png, pdf), the wildcards
    named in `values` filled in (`fill`) and the others kept."""
    return f"{fill(stem, **values)}.{suffix}"


def fill(pattern: str, **values: str) -> str:
    """`pattern` with the wildcards named in `values` filled in and the others kept: a rule's output
    for one ablation or task, its other wildcards left to Snakemake."""
    for name, value in values.items():
        pattern = pattern.replace("{" + name + "}", value)
    return pattern
