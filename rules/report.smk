# The HTML report: every table and figure marked with report() in rules/tables.smk and
# rules/figures.smk, with the captions in report/. The default run builds it (rule all asks for
# it) once every table and figure exists, by calling `snakemake --report` (circuitloc.plan.report);
# `snakemake --report results/report.html` by hand does the same after any run.


localrules:
    report,


rule report:
    input:
        targets.report_inputs(config),
    output:
        html="results/report.html",
    log:
        "results/logs/report.log",
    run:
        from circuitloc.plan.report import build_report
        from circuitloc.plan.workflow_config import as_layer

        build_report(as_layer(config, ROOT), workflow.main_snakefile, output.html, log[0])
