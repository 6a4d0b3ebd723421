# The cost record: every job that runs a script writes a Snakemake benchmark file
# (results/benchmarks/<rule>/<wildcards>.tsv); this sums them per stage and per model into
# results/tables/cost.csv and cost.md (circuitloc.cost), which the report shows. Its inputs are the
# benchmark files of every job of the run (benchmark_jobs in rules/common.smk), so it reruns after
# any job does. Its own benchmark and the report's run are not in the table.


localrules:
    cost,


rule cost:
    input:
        lambda wc: [f for f, _, _ in benchmark_jobs()],
    output:
        csv=report(
            "results/tables/cost.csv",
            caption="../report/cost.rst",
            category="all tasks",
            subcategory="cost of the run",
            labels={"output": "Cost table", "task": "all", "ablation": "all"},
        ),
        md="results/tables/cost.md",
    params:
        jobs=lambda wc: [[rule, model] for _, rule, model in benchmark_jobs()],
        code=code_version("cost_table.py"),
    log:
        "results/logs/tables/cost.log",
    benchmark:
        "results/benchmarks/cost.tsv",
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/cost_table.py"
