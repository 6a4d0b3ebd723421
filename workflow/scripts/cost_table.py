import _src_path  # noqa: F401  (this checkout's src/ first on sys.path, with or without --use-conda)

from circuitloc.report.tables.cost import write_dag_cost
from circuitloc.runner import run, setup

setup(log_path=snakemake.log[0])
# the run's DAG as Snakemake built it (recorded by the Snakefile's onstart, circuitloc.plan.hooks.dag.record_dag)
run(write_dag_cost, snakemake.params.dag, snakemake.output.csv, snakemake.output.md)
