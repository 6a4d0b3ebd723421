"""The cost record in Snakemake's plan: the cost job runs after every job that writes a benchmark
file, and a grouped or per-ablation score job each writes one (the cost table: unit/test_cost.py)."""

import re

import pytest
import yaml
from workflow_helpers import ROOT, smk


def _jobs(dry_run_output):
    """(rule, input line, benchmark file) of every job a dry run lists."""
    out = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run_output):
        m = re.match(r"(?:local)?rule (\w+):", block.strip())
        if m:
            inp = re.search(r"^\s+input: (.*)$", block, flags=re.M)
            bench = re.search(r"^\s+benchmark: (.*)$", block, flags=re.M)
            out.append((m.group(1), inp.group(1) if inp else "", bench.group(1) if bench else None))
    return out


@pytest.mark.parametrize("configfile", ["config/config.yaml", ".test/config.yaml", "config/sweep.yaml",
                                        "config/paper.yaml", "config/sweep_capacity.yaml"])
def test_cost_job_runs_after_every_job_that_writes_a_benchmark(configfile):
    """A dry run from scratch plans one cost job (a target of rule all); every other job but the
    report writes a benchmark file, and the cost job waits for every other target of the run, so it
    sums the finished DAG (its job list is Snakemake's own: circuitloc.plan.hooks.dag.record_dag)."""
    jobs = _jobs(smk("-n", "--nolock", "--configfile", configfile).stdout)
    cost = [j for j in jobs if j[0] == "cost"]
    assert len(cost) == 1
    assert {rule for rule, _, b in jobs if b is None} == {"report", "all"}
    targets = set(next(inp for rule, inp, _ in jobs if rule == "all").split(", "))
    # the intermediates (data, scores, curves, specificity files, built weights) are targets so that a
    # deleted one is rebuilt; the cost job waits for them through the tables that read them
    inter = {f for f in targets if f.startswith(("results/data/", "results/scores/", "results/curves/",
                                                 "results/specificity/")) or f.endswith("/weights")}
    assert inter
    assert set(cost[0][1].split(", ")) == targets - inter - {"results/tables/cost.csv", "results/report.html"}
    assert "results/tables/cost.csv" in next(inp for rule, inp, _ in jobs if rule == "report").split(", ")


def test_one_score_job_per_task_and_model_or_per_ablation(tmp_path):
    """group_ablations (default true): one score and one curve job per task and model, writing every
    ablation's file; false: one job per ablation. Either way the same files are planned."""
    def plan(configfile):
        out = smk("-n", "--nolock", "--configfile", str(configfile)).stdout
        jobs = []
        for block in re.split(r"\n(?=(?:local)?rule \w+:)", out):
            m = re.match(r"(?:local)?rule (scores(?:__\w+)?):", block.strip())
            if m:
                files = re.search(r"^\s+output: (.*)$", block, flags=re.M).group(1).split(", ")
                jobs.append([f for f in files if not f.endswith(".prompts.parquet")])
        return jobs

    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    (tmp_path / "single.yaml").write_text(yaml.safe_dump({**cfg, "group_ablations": False}))
    grouped, single = plan(ROOT / ".test" / "config.yaml"), plan(tmp_path / "single.yaml")
    files = sorted(f for job in single for f in job)
    assert sorted(f for job in grouped for f in job) == files and len(files) > len(grouped)
    assert all(len(job) == 1 for job in single)
    pairs = {tuple(f.split("/")[2:4]) for f in files}  # results/scores/{task}/{model}/{ablation}.parquet
    assert len(grouped) == len(pairs)
    assert all(len({tuple(f.split("/")[2:4]) for f in job}) == 1 for job in grouped)
