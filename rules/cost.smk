# The cost record: every job that runs a script writes a Snakemake benchmark file
# (results/benchmarks/<rule>/<wildcards>.tsv); this sums those of every job of Snakemake's own DAG
# (recorded when the run starts: onstart in the Snakefile, circuitloc.plan.hooks.dag.record_dag) per stage and
# per model into results/tables/cost.csv and cost.md, which the report shows. It runs after every
# other target of the run. Its own benchmark and the report's run are not in the table.


rule cost:
    input:
        kept(targets.cost_inputs(config)),
    output:
        csv=paths.file(paths.COST_TABLE, "csv"),
        html=report(
            paths.file(paths.COST_TABLE, "html"),
            caption="../report/cost.rst",
            category="all tasks",
            subcategory="cost of the run",
            labels={"output": "Cost table", "task": "all", "ablation": "all"},
        ),
        md=paths.file(paths.COST_TABLE, "md"),
    log:
        paths.log("tables/cost"),
    benchmark:
        paths.benchmark("cost")
    # not `localrules:`: a caller's `use rule * ... as x_*` renames the rule
    localrule: True
    conda:
        "../envs/report.yaml"
    params:
        dag=DAG_RECORD,
        code=code_version("cost_table.py"),
    script:
        "../workflow/scripts/cost_table.py"
