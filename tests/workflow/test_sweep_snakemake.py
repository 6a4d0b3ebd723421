"""The controlled sweep planned by Snakemake: one training job per model, and a run that adjusts its
p-values with another run's paired tables reads them (the sweep's statistics: unit/test_sweep.py)."""

import re

import yaml
from workflow_helpers import ROOT, smk

from circuitloc.plan.config.sweep_toys import expand


def test_sweep_config_dag_has_one_training_job_per_model():
    """config/sweep.yaml as shipped: N seeds x K KV counts x S sizes training jobs, same recipe."""
    cfg = yaml.safe_load((ROOT / "config" / "sweep.yaml").read_text())
    sw = cfg["sweep"]
    n = len(sw["seeds"]) * len(sw["kv_heads"]) * len(sw["sizes"])
    out = smk("-n", "--nolock", "--configfile", "config/sweep.yaml").stdout
    stats = dict(re.findall(r"^(\w+)\s+(\d+)$", out, flags=re.M))
    assert int(stats["model"]) == n == 40
    assert int(stats["sweep_tables"]) == 3 * 3  # per task, zero ablation of query heads, kv groups and layers
    # group_stages: one job per toy for its datasets, scores and curves of all three tasks
    assert int(stats["model_stages"]) == n
    assert not {"dataset", "scores", "curves", "dataset_shared"} & set(stats)  # tasks.facts.shared: false
    # the cluster sweep: valid against the schema, 30 seeds x (4 KV counts x 3 sizes + 3 x 2 capacity sizes)
    from snakemake.utils import validate

    large = yaml.safe_load((ROOT / "config" / "sweep_large.yaml").read_text())
    validate(large, str(ROOT / "config" / "schema.yaml"))
    big = expand(large["sweep"])
    assert len(big) == 30 * (4 * 3 + 3 * 2 - 1)  # the parameter-matched size's MHA toys are its twin's
    assert {s["toy"]["d_model"] // s["toy"]["n_heads"] for s in big.values()} >= {32}  # a d_head >= 32 size


def test_adjust_with_reads_the_other_runs_paired_tables(tmp_path):
    """The overview rule's inputs include the other run's facts tables for every sweep ablation (a
    dry run's plan: the missing file is named)."""
    overlay = tmp_path / "adjust.yaml"
    overlay.write_text(yaml.safe_dump({"sweep": {"adjust_with": [
        {"label": "accuracy", "tables": "/nonexistent/tables", "tasks": ["facts"]}]}}))
    res = smk("-n", "--configfile", str(ROOT / "config" / "sweep.yaml"), str(overlay), check=False)
    assert "/nonexistent/tables/sweep_paired_facts_zero-query.csv" in res.stdout + res.stderr
