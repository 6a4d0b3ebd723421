rule specificity:
    input:
        card="results/models/{model}/card.json",
        data=lambda wc: [f"results/data/{t}/{wc.model}.parquet" for t in views.model_tasks(config, wc.model)],
        scores=lambda wc: [
            f"results/scores/{t}/{wc.model}/{wc.ablation}.parquet" for t in views.model_tasks(config, wc.model)
        ],
        neutral=inputs.neutral_text(config, ROOT),
    output:
        "results/specificity/{model}/{ablation}.parquet",
    params:
        tasks=lambda wc: views.model_tasks(config, wc.model),
        opts=lambda wc: views.ablation_opts(config, wc.model),
        metrics=lambda wc: {t: views.task_metric(config, t) for t in views.model_tasks(config, wc.model)},
        bootstrap=views.bootstrap_opts(config),
        batch_tokens=config["max_batch_tokens"],
        device=config["device"],
        code=code_version("specificity.py"),
    log:
        "results/logs/specificity/{model}/{ablation}.log",
    benchmark:
        "results/benchmarks/specificity/{model}/{ablation}.tsv",
    threads: 1
    priority: job_priority("specificity")
    resources:
        **job_resources("specificity"),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/specificity.py"


rule specificity_table:
    input:
        [f"results/specificity/{m}/{a}.parquet" for m in MODELS for a in views.model_ablations(config, m)],
    output:
        csv=report(
            "results/tables/specificity.csv",
            caption="../report/specificity.rst",
            category="all tasks",
            subcategory="beyond the paper",
            labels={"output": "Specificity table", "task": "all", "ablation": "all"},
        ),
        md="results/tables/specificity.md",
    params:
        code=code_version("specificity_table.py"),
    log:
        "results/logs/tables/specificity.log",
    benchmark:
        "results/benchmarks/specificity_table.tsv",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/report.yaml"
    script:
        "../workflow/scripts/specificity_table.py"


rule stability:
    input:
        cards=lambda wc: [views.card(m) for m in views.models_for(config, wc.task)],
        files=lambda wc: targets.stability_files(config, wc.task),
    output:
        csv=report(
            "results/tables/stability_{task}.csv",
            caption="../report/stability.rst",
            category="{task}",
            subcategory="beyond the paper",
            labels={"output": "Stability table", "task": "{task}", "ablation": "all"},
        ),
        md="results/tables/stability_{task}.md",
        png=report(
            "results/figures/stability_{task}.png",
            caption="../report/stability_figure.rst",
            category="{task}",
            subcategory="beyond the paper",
            labels={"output": "Stability figure", "task": "{task}", "ablation": ABLATIONS[0]},
        ),
        pdf="results/figures/stability_{task}.pdf",
    params:
        entries=lambda wc: targets.stability_entries(config, wc.task),
        primary=ABLATIONS[0],
        code=code_version("stability.py"),
    log:
        "results/logs/tables/stability_{task}.log",
    benchmark:
        "results/benchmarks/stability/{task}.tsv",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/report.yaml"
    script:
        "../workflow/scripts/stability.py"


rule robustness:
    input:
        [f"results/tables/table1_{t}_{a}.csv" for t, a in targets.table_pairs(config)],
    output:
        csv=report(
            "results/tables/robustness.csv",
            caption="../report/robustness.rst",
            category="all tasks",
            subcategory="beyond the paper",
            labels={"output": "Robustness table", "task": "all", "ablation": "all"},
        ),
        md="results/tables/robustness.md",
    params:
        pairs=targets.table_pairs(config),
        code=code_version("robustness.py"),
    log:
        "results/logs/tables/robustness.log",
    benchmark:
        "results/benchmarks/robustness.tsv",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/report.yaml"
    script:
        "../workflow/scripts/robustness.py"
