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
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/tables.py"
