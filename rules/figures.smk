rule figures:
    input:
        # a sweep's figures show a sample of its models (figures.max_models; plan.targets.figure_models)
        cards=lambda wc: [views.card(m) for m in targets.figure_models(config, wc.task, wc.ablation)],
        scores=lambda wc: [f"results/scores/{wc.task}/{m}/{wc.ablation}.parquet"
                           for m in targets.figure_models(config, wc.task, wc.ablation)],
        curves=lambda wc: [f"results/curves/{wc.task}/{m}/{wc.ablation}.parquet"
                           for m in targets.figure_models(config, wc.task, wc.ablation)],
    output:
        fig1=report(
            "results/figures/fig1_heatmap_{task}_{ablation}.png",
            caption="../report/fig1_heatmap.rst",
            category="{task}",
            subcategory="{ablation} ablation",
            labels={"output": "Figure 1: head heatmap", "task": "{task}", "ablation": "{ablation}"},
        ),
        fig1_pdf="results/figures/fig1_heatmap_{task}_{ablation}.pdf",
        fig2=report(
            "results/figures/fig2_curves_{task}_{ablation}.png",
            caption="../report/fig2_curves.rst",
            category="{task}",
            subcategory="{ablation} ablation",
            labels={"output": "Figure 2: ablation curves", "task": "{task}", "ablation": "{ablation}"},
        ),
        fig2_pdf="results/figures/fig2_curves_{task}_{ablation}.pdf",
    params:
        threshold=config["curves"]["threshold"],
        models=lambda wc: targets.figure_models(config, wc.task, wc.ablation),
        n_models=lambda wc: len(views.models_for(config, wc.task, wc.ablation)),
        code=code_version("figures.py"),
    log:
        "results/logs/figures/figures_{task}_{ablation}.log",
    benchmark:
        "results/benchmarks/figures/{task}/{ablation}.tsv",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/figures.py"


rule figure_scale:
    input:
        tables=lambda wc: [f"results/tables/table1_{t}_{a}.csv" for t, a in targets.table_pairs(config) if a == wc.ablation],
    output:
        png=report(
            "results/figures/scale_{ablation}.png",
            caption="../report/scale.rst",
            category="all tasks",
            subcategory="{ablation} ablation",
            labels={"output": "Scale figure", "task": "all", "ablation": "{ablation}"},
        ),
        pdf="results/figures/scale_{ablation}.pdf",
    params:
        tasks=lambda wc: [t for t, a in targets.table_pairs(config) if a == wc.ablation],
        threshold=config["curves"]["threshold"],
        code=code_version("fig_scale.py"),
    log:
        "results/logs/figures/scale_{ablation}.log",
    benchmark:
        "results/benchmarks/figure_scale/{ablation}.tsv",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/fig_scale.py"
