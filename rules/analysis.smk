# One job per model runs every ablation of the model (or one per ablation with `group_ablations:
# false`; circuitloc.plan.jobs.groups), one file per ablation.
for _ablations, _models in groups.specificity_groups(config):

    rule:
        name:
            groups.group_rule(config, "specificity", _ablations)
        input:
            card=kept(paths.CARD),
            data=lambda wc: [paths.DATA.format(task=t, model=wc.model) for t in views.model_tasks(config, wc.model)],
            scores=lambda wc, abls=_ablations: [
                paths.SCORES.format(task=t, model=wc.model, ablation=a)
                for a in abls
                for t in views.model_tasks(config, wc.model)
            ],
            neutral=inputs.neutral_text(config, ROOT),
        output:
            [paths.fill(paths.SPECIFICITY, ablation=a) for a in _ablations],
        log:
            paths.log(f"specificity/{{model}}{groups.group_tag(config, _ablations)}"),
        benchmark:
            paths.benchmark(f"specificity/{{model}}{groups.group_tag(config, _ablations)}")
        wildcard_constraints:
            model=views.one_of(_models),
        priority: job_priority("specificity")
        conda:
            "../envs/circuitloc.yaml"
        threads: 1
        resources:
            **job_resources("specificity"),
        params:
            **torch_params(),
            ablations=_ablations,
            tasks=lambda wc: views.model_tasks(config, wc.model),
            metrics=lambda wc: {t: views.task_metric(config, t) for t in views.model_tasks(config, wc.model)},
            code=code_version("specificity.py"),
            # finished ablations of a failed or killed job (circuitloc.resume)
            resume=lambda wc, abls=_ablations: f"{paths.RESUME}/specificity/{wc.model}{groups.group_tag(config, abls)}",
        script:
            "../workflow/scripts/specificity.py"


rule specificity_table:
    input:
        [paths.SPECIFICITY.format(model=m, ablation=a) for m in MODELS for a in views.model_ablations(config, m)],
    output:
        csv=paths.file(paths.SPECIFICITY_TABLE, "csv"),
        html=report(
            paths.file(paths.SPECIFICITY_TABLE, "html"),
            caption="../report/specificity.rst",
            category="all tasks",
            subcategory="beyond the paper",
            labels={"output": "Specificity table", "task": "all", "ablation": "all"},
        ),
        md=paths.file(paths.SPECIFICITY_TABLE, "md"),
    log:
        paths.log("tables/specificity"),
    benchmark:
        paths.benchmark("specificity_table")
    conda:
        "../envs/report.yaml"
    resources:
        **job_resources("small", per_model=False),
    params:
        code=code_version("specificity_table.py"),
    script:
        "../workflow/scripts/specificity_table.py"


rule stability:
    input:
        cards=kept(lambda wc: [views.card(m) for m in views.models_for(config, wc.task)]),
        files=lambda wc: targets.stability_files(config, wc.task),
    output:
        csv=paths.file(paths.STABILITY_TABLE, "csv"),
        html=report(
            paths.file(paths.STABILITY_TABLE, "html"),
            caption="../report/stability.rst",
            category="{task}",
            subcategory="beyond the paper",
            # no `ablation` label: beside the figure's one ablation, Snakemake's report would make a label
            # with two values a toggle and find neither item under the other value (a blank page)
            labels={"output": "Stability table (every ablation)", "task": "{task}"},
        ),
        md=paths.file(paths.STABILITY_TABLE, "md"),
        png=report(
            paths.file(paths.STABILITY_FIGURE, "png"),
            caption="../report/stability_figure.rst",
            category="{task}",
            subcategory="beyond the paper",
            labels={"output": f"Stability figure ({ABLATIONS[0]})", "task": "{task}"},
        ),
        pdf=paths.file(paths.STABILITY_FIGURE, "pdf"),
    log:
        paths.log("tables/stability_{task}"),
    benchmark:
        paths.benchmark("stability/{task}")
    conda:
        "../envs/report.yaml"
    resources:
        **job_resources("small", per_model=False),
    params:
        entries=lambda wc: targets.stability_entries(config, wc.task),
        primary=ABLATIONS[0],
        code=code_version("stability.py"),
    script:
        "../workflow/scripts/stability.py"


rule robustness:
    input:
        [paths.TABLE1.format(task=t, ablation=a) for t, a in targets.table_pairs(config)],
    output:
        csv=paths.file(paths.ROBUSTNESS_TABLE, "csv"),
        html=report(
            paths.file(paths.ROBUSTNESS_TABLE, "html"),
            caption="../report/robustness.rst",
            category="all tasks",
            subcategory="beyond the paper",
            labels={"output": "Robustness table", "task": "all", "ablation": "all"},
        ),
        md=paths.file(paths.ROBUSTNESS_TABLE, "md"),
    log:
        paths.log("tables/robustness"),
    benchmark:
        paths.benchmark("robustness")
    conda:
        "../envs/report.yaml"
    resources:
        **job_resources("small", per_model=False),
    params:
        pairs=targets.table_pairs(config),
        code=code_version("robustness.py"),
    script:
        "../workflow/scripts/robustness.py"
