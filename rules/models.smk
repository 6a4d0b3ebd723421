# Models with weights of their own (toy: trained or copied here; gguf: dequantized here) declare
# them as a directory() output, so Snakemake tracks, cleans and moves them with the card; an hf
# model's weights stay in the Hugging Face cache (its card records the snapshot), so rule model_hf
# writes the card only. The two rules split the models by source (models_by_weights, common.smk).
rule model:
    input:
        unpack(model_inputs),
    output:
        card="results/models/{model}/card.json",
        weights=directory("results/models/{model}/weights"),
    wildcard_constraints:
        model=models_by_weights(True),
    params:
        spec=lambda wc: model_build_spec(wc.model),
        weights=lambda wc: f"results/models/{wc.model}/weights",  # toy/gguf: the output below; hf: unused
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


use rule model as model_hf with:
    input:
        [],
    output:
        card="results/models/{model}/card.json",
    wildcard_constraints:
        model=models_by_weights(False),
    benchmark:
        "results/benchmarks/model_hf/{model}.tsv"
