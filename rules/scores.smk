# One job per task and model runs every ablation of the model, or one job per ablation with
# `group_ablations: false` (circuitloc.plan.jobs.groups).
for _ablations, _models in ABLATION_GROUPS:

    rule:
        name:
            groups.group_rule(config, "scores", _ablations)
        input:
            card=kept(paths.CARD),
            data=paths.DATA,
        output:
            scores=[paths.fill(paths.SCORES, ablation=a) for a in _ablations],
            prompts=[paths.fill(paths.PROMPTS, ablation=a) for a in _ablations],
        log:
            paths.log(f"scores/{{task}}/{{model}}{groups.group_tag(config, _ablations)}"),
        benchmark:
            paths.benchmark(f"scores/{{task}}/{{model}}{groups.group_tag(config, _ablations)}")
        wildcard_constraints:
            model=views.one_of(_models),
        priority: job_priority("scores", _models)
        conda:
            "../envs/circuitloc.yaml"
        threads: 1
        resources:
            **job_resources("scores"),
        params:
            **torch_params(),
            ablations=_ablations,
            metric=lambda wc: views.task_metric(config, wc.task),
            code=code_version("score.py"),
            # finished ablations of a failed or killed job (circuitloc.resume)
            resume=groups.resume_dir(config, "scores", _ablations),
        script:
            "../workflow/scripts/score.py"
