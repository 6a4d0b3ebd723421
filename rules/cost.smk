# The cost record: every job that runs a script writes a Snakemake benchmark file
# (results/benchmarks/<rule>/<wildcards>.tsv); this sums those of every job in Snakemake's own DAG
# per stage and per model into results/tables/cost.csv and cost.md (circuitloc.cost), which the
# report shows. It runs in Snakemake's own process (it reads the DAG), after every other target.
# Its own benchmark and the report's run are not in the table.


localrules:
    cost,


rule cost:
    input:
        cost_inputs(),
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
        code=module_version("cost.py"),
    log:
        "results/logs/tables/cost.log",
    run:
        from circuitloc.cost import write_dag_cost

        write_dag_cost(workflow.dag.jobs, output.csv, output.md, log[0], exclude=("cost", "report", "all"))
