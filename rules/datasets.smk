rule dataset:
    input:
        unpack(lambda wc: inputs.dataset_inputs(config, ROOT, wc)),
        card=kept(paths.CARD),
    output:
        data=paths.DATA,
        filter=paths.FILTER,
    log:
        paths.log("data/{task}/{model}"),
    benchmark:
        paths.benchmark("dataset/{task}/{model}")
    wildcard_constraints:
        task=views.one_of(TASKS),
        model=views.one_of(groups.stage_free_models(config)),
    priority: job_priority("dataset")
    conda:
        "../envs/circuitloc.yaml"
    threads: 1
    resources:
        **job_resources("dataset"),
    params:
        cfg=lambda wc: views.dataset_config(config, wc.task, wc.model),
        seed=config["seed"],
        batch_tokens=config["max_batch_tokens"],
        device=config["device"],
        code=code_version("build_dataset.py"),
    script:
        "../workflow/scripts/build_dataset.py"


# A family-shared condition (a task spec's `shared`: facts_shared of facts): the prompts of its base
# task that every model of the family has, from the members' datasets.
rule dataset_shared:
    input:
        members=lambda wc: views.shared_members(config, wc.task, wc.model),
    output:
        data=paths.DATA,
        filter=paths.FILTER,
    log:
        paths.log("data/{task}/{model}"),
    benchmark:
        paths.benchmark("dataset_shared/{task}/{model}")
    wildcard_constraints:
        task=views.one_of(views.shared_tasks(config)),
    priority: job_priority("dataset")
    conda:
        "../envs/circuitloc.yaml"
    threads: 1
    resources:
        **job_resources("small"),
    params:
        members=lambda wc: views.family_members(config, wc.model, wc.task),
        n_score=lambda wc: views.task_config(config, wc.task, wc.model)["n_score"],
        seed=config["seed"],
        code=code_version("build_shared_dataset.py"),
    script:
        "../workflow/scripts/build_shared_dataset.py"
