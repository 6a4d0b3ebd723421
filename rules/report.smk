# The HTML report: every table and figure marked with report() in rules/tables.smk and
# rules/figures.smk, with the captions in report/. The default run builds it (rule all asks for
# it) once every table and figure exists, by calling `snakemake --report` (build_report in
# rules/common.smk); `snakemake --report results/report.html` by hand does the same after any run.


localrules:
    report,


rule report:
    input:
        report_inputs(),
    output:
        html="results/report.html",
    log:
        "results/logs/report.log",
    run:
        build_report(output.html, log[0])
