# The HTML report: every table and figure marked with report() in rules/tables.smk and
# rules/figures.smk, with the captions in report/. It opens on the run's answer (rule landing: the
# claims table, the headline Table 1 and figures, then report/workflow.rst). The default run builds it (rule all asks for
# it) once every table and figure exists, by calling `snakemake --report` (circuitloc.plan.hooks.html_report);
# `snakemake --report results/report.html` by hand does the same after any run.


rule landing:
    input:
        unpack(lambda wc: targets.landing_inputs(config)),
        workflow=os.path.relpath(os.path.join(ROOT, "report", "workflow.rst")),  # relative: a moved run stays done
    output:
        rst=targets.LANDING,
    log:
        paths.log("report/landing"),
    benchmark:
        paths.benchmark("landing")
    conda:
        "../envs/report.yaml"
    resources:
        **job_resources("small", per_model=False),
    params:
        headline=targets.headline(config),
        code=code_version("landing.py"),
    script:
        "../workflow/scripts/landing.py"


rule report:
    input:
        targets.report_inputs(config),
        targets.LANDING,
    output:
        html=targets.REPORT,
    log:
        paths.log("report"),
    # not `localrules:`: a caller's `use rule * ... as x_*` renames the rule
    localrule: True
    run:
        from circuitloc.plan.hooks.html_report import build_report

        build_report(config, ROOT, workflow.main_snakefile, output.html, log[0])
