rule figure_heatmap:
    input:
        scores=per_model("results/scores/{task}/{model}/{ablation}.parquet"),
    output:
        png=report(
            "results/figures/fig1_heatmap_{task}_{ablation}.png",
            caption="../report/fig1_heatmap.rst",
            category="{task}",
            subcategory="{ablation} ablation",
            labels={"output": "Figure 1: head heatmap", "task": "{task}", "ablation": "{ablation}"},
        ),
        pdf="results/figures/fig1_heatmap_{task}_{ablation}.pdf",
    params:
        models=lambda wc: models_for(wc.task),
    log:
        "results/logs/figures/fig1_{task}_{ablation}.log",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/fig_heatmap.py"


rule figure_curves:
    input:
        cards=lambda wc: [card(m) for m in models_for(wc.task)],
        curves=per_model("results/curves/{task}/{model}/{ablation}.parquet"),
    output:
        png=report(
            "results/figures/fig2_curves_{task}_{ablation}.png",
            caption="../report/fig2_curves.rst",
            category="{task}",
            subcategory="{ablation} ablation",
            labels={"output": "Figure 2: ablation curves", "task": "{task}", "ablation": "{ablation}"},
        ),
        pdf="results/figures/fig2_curves_{task}_{ablation}.pdf",
    params:
        threshold=config["curves"]["threshold"],
        models=lambda wc: models_for(wc.task),
    log:
        "results/logs/figures/fig2_{task}_{ablation}.log",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/fig_curves.py"


rule figure_scale:
    input:
        tables=lambda wc: [f"results/tables/table1_{t}_{wc.ablation}.csv" for t in dataset_tasks()],
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
        tasks=dataset_tasks(),
    log:
        "results/logs/figures/scale_{ablation}.log",
    resources:
        **job_resources("small", per_model=False),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/fig_scale.py"
