rule model:
    input:
        unpack(model_inputs),
    output:
        card="results/models/{model}/card.json",
    params:
        spec=lambda wc: model_build_spec(wc.model),
        weights=lambda wc: f"results/models/{wc.model}/weights",
        code=code_version("build_model.py"),
    log:
        "results/logs/models/{model}.log",
    benchmark:
        "results/benchmarks/model/{model}.tsv",
    threads: 1
    priority: job_priority("model")
    resources:
        **job_resources("model"),
    conda:
        "../envs/circuitloc.yaml"
    script:
        "../workflow/scripts/build_model.py"
