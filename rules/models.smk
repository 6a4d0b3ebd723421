# Models with weights of their own (toy: trained or copied here; gguf: dequantized here) declare
# them as a directory() output, so Snakemake tracks, cleans and moves them with the card; an hf
# model's weights stay in the Hugging Face cache (its card records the snapshot), so rule model_hf
# writes the card only. The two rules split the models by source (plan.config.views.weights_pattern).
# The card records each weights file's size and sha256 and no timings (those are in the log and the
# benchmark file), so a rebuild with identical weights writes identical bytes. Snakemake does not
# look inside weights/: a model whose folder is gone, lacks a file the card lists or holds one of
# another size is rebuilt by rule model_rebuilt below, and what reads its card reruns only if the card
# changes (plan.jobs.weights, from the Snakefile); a job that loads weights checks them against the card
# first (a corrupt file: its hint prints the user's command with a forcerun).
rule model:
    input:
        unpack(lambda wc: inputs.model_inputs(config, ROOT, wc)),
    output:
        card=paths.CARD,
        weights=directory(paths.WEIGHTS),
    log:
        paths.log("models/{model}"),
    benchmark:
        paths.benchmark("model/{model}")
    wildcard_constraints:
        model=LOST_WEIGHTS.pattern(rebuilt=False),
    priority: job_priority("model")
    conda:
        "../envs/circuitloc.yaml"
    threads: 1
    resources:
        **job_resources("model"),
    params:
        spec=lambda wc: views.model_build_spec(config, wc.model),
        weights=lambda wc: paths.WEIGHTS.format(model=wc.model),  # toy/gguf: the output below; hf: unused
        code=code_version("build_model.py"),
    script:
        "../workflow/scripts/build_model.py"


use rule model as model_hf with:
    input:
        [],
    output:
        card=paths.CARD,
    benchmark:
        paths.benchmark("model_hf/{model}")
    wildcard_constraints:
        model=views.weights_pattern(config, False),


# A model whose weights a finished run lost (plan.jobs.weights): rule model's job with one more output, a
# marker file the default target asks for (rule all), so Snakemake plans it as it plans any missing
# output a target needs, in a dry run too; the marker is removed once the run no longer needs it. In a
# job's own process both rules match every such model and rule model comes first.
use rule model as model_rebuilt with:
    output:
        card=paths.CARD,
        weights=directory(paths.WEIGHTS),
        rebuilt=temp(touch(LOST_WEIGHTS.REBUILT)),
    wildcard_constraints:
        model=LOST_WEIGHTS.pattern(rebuilt=True),


ruleorder: model > model_rebuilt
