rule curves:
    input:
        card="results/models/{model}/card.json",
        data="results/data/{task}/{model}.parquet",
        scores="results/scores/{task}/{model}/{ablation}.parquet",
    output:
        curve="results/curves/{task}/{model}/{ablation}.parquet",
        control="results/curves/{task}/{model}/{ablation}.control.parquet",
    params:
        cfg=lambda wc: curve_config(wc.task, wc.model),
        seed=config["seed"],
        opts=ablation_opts,
        metric=lambda wc: task_metric(wc.task),
        bootstrap=bootstrap_opts(),
        batch_tokens=config["max_batch_tokens"],
        device=config["device"],
        code=code_version("curve.py"),
    log:
        "results/logs/curves/{task}/{model}/{ablation}.log",
    benchmark:
        "results/benchmarks/curves/{task}/{model}/{ablation}.tsv",
    threads: 1
    resources:
        **job_resources("curves"),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/curve.py"
