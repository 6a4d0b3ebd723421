rule table1:
    input:
        cards=[card(m) for m in MODELS],
        scores=per_model("results/scores/{task}/{model}/{ablation}.parquet"),
        curves=per_model("results/curves/{task}/{model}/{ablation}.parquet"),
    output:
        csv="results/tables/table1_{task}_{ablation}.csv",
        md="results/tables/table1_{task}_{ablation}.md",
    params:
        threshold=config["curves"]["threshold"],
        models=MODELS,
    log:
        "results/logs/tables/table1_{task}_{ablation}.log",
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/table1.py"


rule table2:
    input:
        cards=[card(m) for m in MODELS],
        curves=per_model("results/curves/{task}/{model}/{ablation}.parquet"),
        controls=per_model("results/curves/{task}/{model}/{ablation}.control.parquet"),
    output:
        csv="results/tables/table2_{task}_{ablation}.csv",
        md="results/tables/table2_{task}_{ablation}.md",
    params:
        models=MODELS,
    log:
        "results/logs/tables/table2_{task}_{ablation}.log",
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/table2.py"
