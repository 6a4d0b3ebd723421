rule sweep_tables:
    input:
        table1=paths.TABLE1,
        cards=kept(lambda wc: [views.card(m) for m in targets.sweep_members(config, wc.task, wc.ablation)]),
        layers=lambda wc: targets.sweep_layer_table(config, wc.task, wc.ablation),
    output:
        csv=paths.file(paths.SWEEP_TABLE, "csv"),
        html=report(
            paths.file(paths.SWEEP_TABLE, "html"),
            caption="../report/sweep.rst",
            category="sweep",
            subcategory="{task}",
            labels={"output": "Sweep table", "task": "{task}", "ablation": "{ablation}"},
        ),
        md=paths.file(paths.SWEEP_TABLE, "md"),
        paired=paths.file(paths.SWEEP_PAIRED_TABLE, "csv"),
        paired_html=report(
            paths.file(paths.SWEEP_PAIRED_TABLE, "html"),
            caption="../report/sweep_paired.rst",
            category="sweep",
            subcategory="{task}",
            labels={"output": "Sweep paired test", "task": "{task}", "ablation": "{ablation}"},
        ),
        paired_md=paths.file(paths.SWEEP_PAIRED_TABLE, "md"),
        # the per-model rows of the paired table, which the overview resamples for verdict_all's stability
        models=paths.SWEEP_MODELS,
        png=report(
            paths.file(paths.SWEEP_FIGURE, "png"),
            caption="../report/sweep_figure.rst",
            category="sweep",
            subcategory="{task}",
            labels={"output": "Sweep figure", "task": "{task}", "ablation": "{ablation}"},
        ),
        pdf=paths.file(paths.SWEEP_FIGURE, "pdf"),
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
        paired=[paths.file(paths.SWEEP_PAIRED_TABLE, "csv", task=t, ablation=a) for t, a in targets.sweep_pairs(config)],
        extra=list(targets.sweep_adjust_with(config).values()),
    output:
        csv=paths.file(paths.SWEEP_OVERVIEW_TABLE, "csv"),
        html=report(
            paths.file(paths.SWEEP_OVERVIEW_TABLE, "html"),
            caption="../report/sweep_overview.rst",
            category="sweep",
            subcategory="all tasks",
            labels={"output": "Sweep overview", "task": "all", "ablation": "all"},
        ),
        md=paths.file(paths.SWEEP_OVERVIEW_TABLE, "md"),
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
