# One job per task draws Figures 1 and 2 of each of its ablations (a figure job is mostly importing
# matplotlib); tasks that share one list of ablations share a rule (plan.jobs.targets.task_groups).
for _tasks, _ablations in targets.task_groups(config):

    rule:
        name:
            targets.task_rule(config, "figures", _ablations)
        input:
            # a sweep's figures show a sample of its models (figures.max_models; plan.jobs.targets.figure_models)
            unpack(
                kept(
                    targets.per_ablation_inputs(
                        config,
                        _ablations,
                        {"cards": paths.CARD, "scores": paths.SCORES, "curves": paths.CURVES},
                        targets.figure_models,
                    )
                )
            ),
        output:
            fig1=[
                report(
                    paths.file(paths.FIG1, "png", ablation=a),
                    caption="../report/fig1_heatmap.rst",
                    category="{task}",
                    subcategory=f"{a} ablation",
                    labels={"output": "Figure 1: head heatmap", "task": "{task}", "ablation": a},
                )
                for a in _ablations
            ],
            fig1_pdf=[paths.file(paths.FIG1, "pdf", ablation=a) for a in _ablations],
            fig2=[
                report(
                    paths.file(paths.FIG2, "png", ablation=a),
                    caption="../report/fig2_curves.rst",
                    category="{task}",
                    subcategory=f"{a} ablation",
                    labels={"output": "Figure 2: ablation curves", "task": "{task}", "ablation": a},
                )
                for a in _ablations
            ],
            fig2_pdf=[paths.file(paths.FIG2, "pdf", ablation=a) for a in _ablations],
        log:
            paths.log("figures/figures_{task}"),
        benchmark:
            paths.benchmark("figures/{task}")
        wildcard_constraints:
            task=views.one_of(_tasks),
        conda:
            "../envs/report.yaml"
        resources:
            **job_resources("small", per_model=False),
        params:
            ablations=_ablations,
            threshold=config["curves"]["threshold"],
            # {ablation: the models drawn}, {ablation: all its models} (a sample's title says "k of n")
            models=targets.figure_shown(config, _ablations),
            all_models=targets.per_ablation_models(config, _ablations),
            code=code_version("figures.py"),
        script:
            "../workflow/scripts/figures.py"


# One job draws the scale figure of every ablation (from each task's Table 1 under it).
rule figure_scale:
    input:
        tables=[paths.TABLE1.format(task=t, ablation=a) for t, a in targets.table_pairs(config)],
    output:
        png=[
            report(
                paths.file(paths.SCALE_FIGURE, "png", ablation=a),
                caption="../report/scale.rst",
                category="all tasks",
                subcategory=f"{a} ablation",
                labels={"output": "Scale figure", "task": "all", "ablation": a},
            )
            for a in ABLATIONS
        ],
        pdf=[paths.file(paths.SCALE_FIGURE, "pdf", ablation=a) for a in ABLATIONS],
    log:
        paths.log("figures/scale"),
    benchmark:
        paths.benchmark("figure_scale")
    conda:
        "../envs/report.yaml"
    resources:
        **job_resources("small", per_model=False),
    params:
        # [(task, ablation)] of the input tables, in order
        pairs=targets.table_pairs(config),
        ablations=ABLATIONS,
        threshold=config["curves"]["threshold"],
        code=code_version("fig_scale.py"),
    script:
        "../workflow/scripts/fig_scale.py"
