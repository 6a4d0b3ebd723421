rule sweep_tables:
    input:
        table1=paths.TABLE1,
        cards=kept(lambda wc: [views.card(m) for m in targets.sweep_members(config, wc.task, wc.ablation)]),
        layers=lambda wc: targets.sweep_layer_table(config, wc.task, wc.ablation),
    output:
        csv="results/tables/sweep_{task}_{ablation}.csv",
        html=report(
            "results/tables/sweep_{task}_{ablation}.html",
            caption="../report/sweep.rst",
            category="sweep",
            subcategory="{task}",
            labels={"output": "Sweep table", "task": "{task}", "ablation": "{ablation}"},
        ),
        md="results/tables/sweep_{task}_{ablation}.md",
        paired="results/tables/sweep_paired_{task}_{ablation}.csv",
        paired_html=report(
            "results/tables/sweep_paired_{task}_{ablation}.html",
            caption="../report/sweep_paired.rst",
            category="sweep",
            subcategory="{task}",
            labels={"output": "Sweep paired test", "task": "{task}", "ablation": "{ablation}"},
        ),
        paired_md="results/tables/sweep_paired_{task}_{ablation}.md",
        # the per-model rows of the paired table, which the overview resamples for verdict_all's stability
        models="results/tables/sweep_models_{task}_{ablation}.parquet",
        png=report(
            "results/figures/sweep_{task}_{ablation}.png",
            caption="../report/sweep_figure.rst",
            category="sweep",
            subcategory="{task}",
            labels={"output": "Sweep figure", "task": "{task}", "ablation": "{ablation}"},
        ),
        pdf="results/figures/sweep_{task}_{ablation}.pdf",
    log:
        paths.log("tables/sweep_{task}_{ablation}"),
    benchmark:
        paths.benchmark("sweep_tables/{task}/{ablation}")
    conda:
        "../envs/report.yaml"
    resources:
        **job_resources("small", per_model=False),
    params:
        models=lambda wc: targets.sweep_members(config, wc.task, wc.ablation),
        meta={m: views.model_spec(config, m)[SWEEP_META] for m in SWEEP_MODELS},
        ci=config.get("sweep", {}).get("ci"),  # this rule runs only with a sweep: (schema defaults)
        stats={k: config.get("sweep", {}).get(k) for k in ("alpha", "p_adjust", "primary")},
        threshold=config["curves"]["threshold"],
        code=code_version("sweep_tables.py"),
    script:
        "../workflow/scripts/sweep_tables.py"


rule sweep_overview:
    input:
        paired=[f"results/tables/sweep_paired_{t}_{a}.csv" for t, a in targets.sweep_pairs(config)],
        extra=list(targets.sweep_adjust_with(config).values()),
    output:
        csv="results/tables/sweep_overview.csv",
        html=report(
            "results/tables/sweep_overview.html",
            caption="../report/sweep_overview.rst",
            category="sweep",
            subcategory="all tasks",
            labels={"output": "Sweep overview", "task": "all", "ablation": "all"},
        ),
        md="results/tables/sweep_overview.md",
    log:
        paths.log("tables/sweep_overview"),
    benchmark:
        paths.benchmark("sweep_overview/all")
    conda:
        "../envs/report.yaml"
    resources:
        **job_resources("small", per_model=False),
    params:
        pairs=[f"{t}/{a}" for t, a in targets.sweep_pairs(config)],
        extra=list(targets.sweep_adjust_with(config)),
        stats={k: config.get("sweep", {}).get(k) for k in ("alpha", "p_adjust", "primary")},
        code=code_version("sweep_overview.py"),
    script:
        "../workflow/scripts/sweep_overview.py"
