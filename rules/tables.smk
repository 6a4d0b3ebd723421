# One job per task writes Tables 1 and 2 of each of its ablations (a table job is mostly starting
# Python); tasks that share one list of ablations share a rule (plan.targets.task_groups).
for _tasks, _ablations in targets.task_groups(config):

    rule:
        name:
            targets.task_rule(config, "tables", _ablations)
        input:
            unpack(targets.per_ablation_inputs(config, _ablations, {"cards": targets.CARD, "scores": targets.SCORES,
                                                                   "curves": targets.CURVES,
                                                                   "controls": targets.CONTROLS})),
        output:
            table1=[f"results/tables/table1_{{task}}_{a}.csv" for a in _ablations],
            table1_html=[report(f"results/tables/table1_{{task}}_{a}.html", caption="../report/table1.rst", category="{task}",
                           subcategory=f"{a} ablation",
                           labels={"output": "Table 1: localization", "task": "{task}", "ablation": a})
                    for a in _ablations],
            table1_md=[f"results/tables/table1_{{task}}_{a}.md" for a in _ablations],
            table2=[f"results/tables/table2_{{task}}_{a}.csv" for a in _ablations],
            table2_html=[report(f"results/tables/table2_{{task}}_{a}.html", caption="../report/table2.rst", category="{task}",
                           subcategory=f"{a} ablation",
                           labels={"output": "Table 2: necessity check", "task": "{task}", "ablation": a})
                    for a in _ablations],
            table2_md=[f"results/tables/table2_{{task}}_{a}.md" for a in _ablations],
        wildcard_constraints:
            task=views.one_of(_tasks),
        params:
            ablations=_ablations,
            threshold=config["curves"]["threshold"],
            # the conditioning rule: fewer held-out prompts than this carry no damage percentage
            min_heldout=lambda wc: views.min_heldout(config, wc.task),
            models=targets.per_ablation_models(config, _ablations),
            code=code_version("tables.py"),
        log:
            "results/logs/tables/tables_{task}.log",
        benchmark:
            "results/benchmarks/tables/{task}.tsv"
        resources:
            **job_resources("small", per_model=False),
        conda:
            "../envs/report.yaml"
        script:
            "../workflow/scripts/tables.py"


# Each model's unit scores in MIB's node-importance form (circuitloc.report.mib): one folder per
# task and model holding importances.json, as MIB's circuit track reads them.
# One job per task writes every ablation's folder (tasks that share one list of ablations share a rule).
for _tasks, _ablations in targets.task_groups(config):

    rule:
        name:
            targets.task_rule(config, "mib_importances", _ablations)
        input:
            unpack(targets.per_ablation_inputs(config, _ablations, {"cards": targets.CARD, "scores": targets.SCORES})),
        output:
            importances=[directory(f"results/mib/{{task}}/{a}") for a in _ablations],
        wildcard_constraints:
            task=views.one_of(_tasks),
        params:
            ablations=_ablations,
            models=targets.per_ablation_models(config, _ablations),
            code=code_version("mib_importances.py"),
        log:
            "results/logs/tables/mib_{task}.log",
        benchmark:
            "results/benchmarks/mib_importances/{task}.tsv"
        resources:
            **job_resources("small", per_model=False),
        conda:
            "../envs/report.yaml"
        script:
            "../workflow/scripts/mib_importances.py"


rule claims:
    input:
        cards=lambda wc: [views.card(m) for m in views.models(config)],
        tables=lambda wc: list(targets.claim_inputs(config).values()),
    output:
        csv="results/tables/claims.csv",
        html=report(
            "results/tables/claims.html",
            caption="../report/claims.rst",
            category="0. the answer",
            labels={"output": "The paper's claims, checked on this run", "task": "all", "ablation": "zero-query"},
        ),
        md="results/tables/claims.md",
    params:
        models=views.models(config),
        names=list(targets.claim_inputs(config)),
        threshold=config["curves"]["threshold"],
        code=code_version("claims.py"),
    log:
        "results/logs/tables/claims.log",
    benchmark:
        "results/benchmarks/claims.tsv",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/report.yaml"
    script:
        "../workflow/scripts/claims.py"
