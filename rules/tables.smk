rule table1:
    input:
        cards=lambda wc: [card(m) for m in models_for(wc.task)],
        scores=per_model("results/scores/{task}/{model}/{ablation}.parquet"),
        curves=per_model("results/curves/{task}/{model}/{ablation}.parquet"),
    output:
        csv=report(
            "results/tables/table1_{task}_{ablation}.csv",
            caption="../report/table1.rst",
            category="{task}",
            subcategory="{ablation} ablation",
            labels={"output": "Table 1: localization", "task": "{task}", "ablation": "{ablation}"},
        ),
        md="results/tables/table1_{task}_{ablation}.md",
    params:
        threshold=config["curves"]["threshold"],
        models=lambda wc: models_for(wc.task),
    log:
        "results/logs/tables/table1_{task}_{ablation}.log",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/table1.py"


rule table2:
    input:
        cards=lambda wc: [card(m) for m in models_for(wc.task)],
        curves=per_model("results/curves/{task}/{model}/{ablation}.parquet"),
        controls=per_model("results/curves/{task}/{model}/{ablation}.control.parquet"),
    output:
        csv=report(
            "results/tables/table2_{task}_{ablation}.csv",
            caption="../report/table2.rst",
            category="{task}",
            subcategory="{ablation} ablation",
            labels={"output": "Table 2: necessity check", "task": "{task}", "ablation": "{ablation}"},
        ),
        md="results/tables/table2_{task}_{ablation}.md",
    params:
        models=lambda wc: models_for(wc.task),
    log:
        "results/logs/tables/table2_{task}_{ablation}.log",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/table2.py"
