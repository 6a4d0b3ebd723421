# With `group_stages: true`, one job per model builds its datasets and runs its scores and curves on
# every task (circuitloc.engine.stages), writing the files the dataset, score and curve rules would:
# a toy's jobs are mostly start-up, so a sweep of toys pays it once per model instead of nine times.
# Models that share one list of tasks and one of ablations share a rule (plan.jobs.groups.stage_groups).
for _tasks, _ablations, _models in STAGE_GROUPS:

    rule:
        name:
            groups.stage_rule(config, _tasks, _ablations)
        input:
            unpack(inputs.stage_inputs(config, ROOT, _tasks)),
            card=kept(paths.CARD),
        output:
            data=[paths.fill(paths.DATA, task=t) for t in _tasks],
            filter=[paths.fill(paths.FILTER, task=t) for t in _tasks],
            scores=[paths.fill(paths.SCORES, task=t, ablation=a) for t in _tasks for a in _ablations],
            prompts=[paths.fill(paths.PROMPTS, task=t, ablation=a) for t in _tasks for a in _ablations],
            curve=[paths.fill(paths.CURVES, task=t, ablation=a) for t in _tasks for a in _ablations],
            control=[paths.fill(paths.CONTROLS, task=t, ablation=a) for t in _tasks for a in _ablations],
        log:
            paths.log("model_stages/{model}"),
        benchmark:
            paths.benchmark("model_stages/{model}")
        wildcard_constraints:
            model=views.one_of(_models),
        priority: job_priority("model_stages", _models)
        conda:
            "../envs/circuitloc.yaml"
        threads: 1
        resources:
            **job_resources("model_stages"),
        params:
            **torch_params(),
            tasks=_tasks,
            ablations=_ablations,
            # per task: what its dataset, score and curve jobs would be told
            settings=groups.stage_settings(config, _tasks),
            seed=config["seed"],
            code=code_version("model_stages.py"),
            # finished datasets and ablations of a failed or killed job (circuitloc.resume)
            resume=lambda wc: f"{paths.RESUME}/model_stages/{wc.model}",
        script:
            "../workflow/scripts/model_stages.py"
