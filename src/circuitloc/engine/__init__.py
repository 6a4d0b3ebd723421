"""What runs inside a torch job: the exact ablation engine (scan), ablation kinds and units,
replacement outputs, attribution, the ablation job, the score/curve/specificity pipelines and
dataset building. Imports nothing from circuitloc.report."""
