# One job per task and model runs every ablation of the model, or one job per ablation with
# `group_ablations: false` (circuitloc.plan.jobs.groups).
for _ablations, _models in ABLATION_GROUPS:

    rule:
        name:
            groups.group_rule(config, "curves", _ablations)
        input:
            card=kept(paths.CARD),
            data=paths.DATA,
            scores=[paths.fill(paths.SCORES, ablation=a) for a in _ablations],
        output:
            curve=[paths.fill(paths.CURVES, ablation=a) for a in _ablations],
            control=[paths.fill(paths.CONTROLS, ablation=a) for a in _ablations],
        log:
            paths.log(f"curves/{{task}}/{{model}}{groups.group_tag(config, _ablations)}"),
        benchmark:
            paths.benchmark(f"curves/{{task}}/{{model}}{groups.group_tag(config, _ablations)}")
        wildcard_constraints:
            model=views.one_of(_models),
        priority: job_priority("curves", _models)
        conda:
            "../envs/circuitloc.yaml"
        threads: 1
        resources:
            **job_resources("curves"),
        params:
            **torch_params(),
            ablations=_ablations,
            cfg=lambda wc: views.curve_config(config, wc.task, wc.model),
            seed=config["seed"],
            metric=lambda wc: views.task_metric(config, wc.task),
            code=code_version("curve.py"),
            # finished ablations of a failed or killed job (circuitloc.resume)
            resume=groups.resume_dir(config, "curves", _ablations),
        script:
            "../workflow/scripts/curve.py"
