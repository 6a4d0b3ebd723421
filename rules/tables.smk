# One job per task writes Tables 1 and 2 of each of its ablations (a table job is mostly starting
# Python); another writes each model's unit scores in MIB's node-importance form
# (circuitloc.report.tables.mib: one folder per task, ablation and model holding importances.json, as MIB's
# circuit track reads them). Tasks that share one list of ablations share a rule
# (plan.jobs.targets.task_groups).
for _tasks, _ablations in targets.task_groups(config):

    rule:
        name:
            targets.task_rule(config, "tables", _ablations)
        input:
            unpack(
                kept(
                    targets.per_ablation_inputs(
                        config,
                        _ablations,
                        {
                            "cards": paths.CARD,
                            "scores": paths.SCORES,
                            "curves": paths.CURVES,
                            "controls": paths.CONTROLS,
                        },
                    )
                )
            ),
        output:
            **table_outputs("table1", _ablations, "Table 1: localization"),
            **table_outputs("table2", _ablations, "Table 2: necessity check"),
        log:
            paths.log("tables/tables_{task}"),
        benchmark:
            paths.benchmark("tables/{task}")
        wildcard_constraints:
            task=views.one_of(_tasks),
        conda:
            "../envs/report.yaml"
        resources:
            **job_resources("small", per_model=False),
        params:
            ablations=_ablations,
            threshold=config["curves"]["threshold"],
            # the conditioning rule: fewer held-out prompts than this carry no damage percentage
            min_heldout=lambda wc: views.min_heldout(config, wc.task),
            # the level of the bootstrap intervals (Table 2 widens the control draws' to a Bonferroni level)
            ci=config["bootstrap"]["ci"],
            models=targets.per_ablation_models(config, _ablations),
            code=code_version("tables.py"),
        script:
            "../workflow/scripts/tables.py"

    rule:
        name:
            targets.task_rule(config, "mib_importances", _ablations)
        input:
            unpack(kept(targets.per_ablation_inputs(config, _ablations, {"cards": paths.CARD, "scores": paths.SCORES}))),
        output:
            importances=[directory(paths.fill(paths.MIB, ablation=a)) for a in _ablations],
        log:
            paths.log("tables/mib_{task}"),
        benchmark:
            paths.benchmark("mib_importances/{task}")
        wildcard_constraints:
            task=views.one_of(_tasks),
        conda:
            "../envs/report.yaml"
        resources:
            **job_resources("small", per_model=False),
        params:
            ablations=_ablations,
            models=targets.per_ablation_models(config, _ablations),
            code=code_version("mib_importances.py"),
        script:
            "../workflow/scripts/mib_importances.py"


rule claims:
    input:
        cards=kept(lambda wc: [views.card(m) for m in views.models(config)]),
        tables=lambda wc: list(targets.claim_inputs(config).values()),
    output:
        csv=paths.file(paths.CLAIMS_TABLE, "csv"),
        html=report(
            paths.file(paths.CLAIMS_TABLE, "html"),
            caption="../report/claims.rst",
            category="0. the answer",
            labels={"output": "The paper's claims, checked on this run", "task": "all", "ablation": "zero-query"},
        ),
        md=paths.file(paths.CLAIMS_TABLE, "md"),
    log:
        paths.log("tables/claims"),
    benchmark:
        paths.benchmark("claims")
    conda:
        "../envs/report.yaml"
    resources:
        **job_resources("small", per_model=False),
    params:
        models=views.models(config),
        names=list(targets.claim_inputs(config)),
        threshold=config["curves"]["threshold"],
        code=code_version("claims.py"),
    script:
        "../workflow/scripts/claims.py"
