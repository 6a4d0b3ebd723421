# With `group_stages: true`, one job per model builds its datasets and runs its scores and curves on
# every task (circuitloc.engine.stages), writing the files the dataset, score and curve rules would:
# a toy's jobs are mostly start-up, so a sweep of toys pays it once per model instead of nine times.
# Models that share one list of tasks and one of ablations share a rule (plan.groups.stage_groups).
for _tasks, _ablations, _models in STAGE_GROUPS:

    rule:
        name:
            groups.stage_rule(config, _tasks, _ablations)
        input:
            unpack(inputs.stage_inputs(config, ROOT, _tasks)),
            card=targets.CARD,
        output:
            data=[f"results/data/{t}/{{model}}.parquet" for t in _tasks],
            filter=[f"results/data/{t}/{{model}}.filter.json" for t in _tasks],
            scores=[f"results/scores/{t}/{{model}}/{a}.parquet" for t in _tasks for a in _ablations],
            prompts=[f"results/scores/{t}/{{model}}/{a}.prompts.parquet" for t in _tasks for a in _ablations],
            curve=[f"results/curves/{t}/{{model}}/{a}.parquet" for t in _tasks for a in _ablations],
            control=[f"results/curves/{t}/{{model}}/{a}.control.parquet" for t in _tasks for a in _ablations],
        wildcard_constraints:
            model=views.one_of(_models),
        params:
            tasks=_tasks,
            ablations=_ablations,
            # per task: what its dataset, score and curve jobs would be told
            settings=groups.stage_settings(config, _tasks),
            seed=config["seed"],
            code=code_version("model_stages.py"),
            # finished datasets and ablations of a failed or killed job (circuitloc.resume)
            resume=lambda wc: f"results/.resume/model_stages/{wc.model}",
            **torch_params(),
        log:
            "results/logs/model_stages/{model}.log",
        benchmark:
            "results/benchmarks/model_stages/{model}.tsv"
        threads: 1
        priority: job_priority("model_stages", _models)
        resources:
            **job_resources("model_stages"),
        conda:
            "../envs/circuitloc.yaml"
        script:
            "../workflow/scripts/model_stages.py"
