rule tables:
    input:
        cards=lambda wc: [views.card(m) for m in views.models_for(config, wc.task, wc.ablation)],
        scores=lambda wc: targets.per_model(config, "results/scores/{task}/{model}/{ablation}.parquet", wc),
        curves=lambda wc: targets.per_model(config, "results/curves/{task}/{model}/{ablation}.parquet", wc),
        controls=lambda wc: targets.per_model(config, "results/curves/{task}/{model}/{ablation}.control.parquet", wc),
    output:
        table1=report(
            "results/tables/table1_{task}_{ablation}.csv",
            caption="../report/table1.rst",
            category="{task}",
            subcategory="{ablation} ablation",
            labels={"output": "Table 1: localization", "task": "{task}", "ablation": "{ablation}"},
        ),
        table1_md="results/tables/table1_{task}_{ablation}.md",
        table2=report(
            "results/tables/table2_{task}_{ablation}.csv",
            caption="../report/table2.rst",
            category="{task}",
            subcategory="{ablation} ablation",
            labels={"output": "Table 2: necessity check", "task": "{task}", "ablation": "{ablation}"},
        ),
        table2_md="results/tables/table2_{task}_{ablation}.md",
    params:
        threshold=config["curves"]["threshold"],
        # the conditioning rule: fewer held-out prompts than this carry no damage percentage
        min_heldout=lambda wc: views.min_heldout(config, wc.task),
        models=lambda wc: views.models_for(config, wc.task, wc.ablation),
        code=code_version("tables.py"),
    log:
        "results/logs/tables/tables_{task}_{ablation}.log",
    benchmark:
        "results/benchmarks/tables/{task}/{ablation}.tsv",
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
            unpack(targets.mib_inputs(config, _ablations)),
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
        csv=report(
            "results/tables/claims.csv",
            caption="../report/claims.rst",
            category="0. the answer",
            labels={"output": "The paper's claims, checked on this run", "task": "all", "ablation": "zero-query"},
        ),
        md="results/tables/claims.md",
    params:
        models=views.models(config),
        names=list(targets.claim_inputs(config)),
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
