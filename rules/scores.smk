rule scores:
    input:
        card="results/models/{model}/card.json",
        data="results/data/{task}/{model}.parquet",
    output:
        scores="results/scores/{task}/{model}/{ablation}.parquet",
        prompts="results/scores/{task}/{model}/{ablation}.prompts.parquet",
    params:
        opts=ablation_opts,
        metric=lambda wc: task_metric(wc.task),
        bootstrap=bootstrap_opts(),
        batch_tokens=config["max_batch_tokens"],
        device=config["device"],
        code=code_version("score.py"),
    log:
        "results/logs/scores/{task}/{model}/{ablation}.log",
    benchmark:
        "results/benchmarks/scores/{task}/{model}/{ablation}.tsv",
    threads: 1
    resources:
        **job_resources("scores"),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/score.py"
