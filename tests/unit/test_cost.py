"""The cost record: every job that runs a script writes Snakemake's benchmark file, and rule cost sums
them per stage and per model (circuitloc.report.tables.cost) into results/tables/cost.csv / cost.md (the
cost job in Snakemake's plan: workflow/test_cost_snakemake.py)."""

import re

import polars as pl
import pytest
from snakemake.benchmark import BenchmarkRecord, write_benchmark_records
from workflow_helpers import ROOT

from circuitloc.report.tables.cost import (
    ALL,
    SHARED,
    cost_table,
    job_costs,
    read_benchmark,
    write_cost,
)


def _record(s, cpu=None, rss=None):
    """A record as Snakemake's benchmark thread leaves it: no sample (cpu None) -> NA columns."""
    r = BenchmarkRecord(running_time=s, max_rss=rss, max_vms=rss, max_uss=rss, max_pss=rss, io_in=0.0, io_out=0.0,
                        cpu_time=cpu)
    r.data_collected = cpu is not None
    return r


@pytest.fixture
def benchmarks(tmp_path):
    """Four jobs written with Snakemake's own writer: two models' training, one score job run twice
    (repeat), one table over both models that ended before its first sample (NA)."""
    files = {
        ("model", "a"): [_record(10.5, 9.0, 500.2)],
        ("model", "b"): [_record(4.0, 3.0, 300.0)],
        ("scores", "a"): [_record(20.0, 18.0, 800.0), _record(30.0, 22.0, 900.0)],
        ("tables", None): [_record(1.25)],
    }
    jobs = []
    for (stage, model), records in files.items():
        path = tmp_path / f"{stage}_{model}.tsv"
        write_benchmark_records(records, str(path), extended_fmt=False)
        jobs.append((stage, model, str(path)))
    return jobs


def test_snakemake_writes_the_header_read_here(benchmarks):
    assert open(benchmarks[0][2]).readline().rstrip("\n").split("\t") == BenchmarkRecord.get_header() == \
        ["s", "h:m:s", "max_rss", "max_vms", "max_uss", "max_pss", "io_in", "io_out", "mean_load", "cpu_time"]
    assert read_benchmark(benchmarks[2][2]) == {"wall_s": 25.0, "cpu_s": 20.0, "max_rss_mb": 850.0}  # repeats: mean
    assert read_benchmark(benchmarks[3][2]) == {"wall_s": 1.25, "cpu_s": None, "max_rss_mb": None}  # NA


def test_cost_table_against_hand_computed_sums(benchmarks):
    got = cost_table(job_costs(benchmarks))
    expected = [  # stage, model, jobs, wall_s, cpu_s, max_rss_mb
        ("model", "a", 1, 10.5, 9.0, 500.2),
        ("model", "b", 1, 4.0, 3.0, 300.0),
        ("model", ALL, 2, 14.5, 12.0, 500.2),  # times add up, the peak is the larger one
        ("scores", "a", 1, 25.0, 20.0, 850.0),
        ("scores", ALL, 1, 25.0, 20.0, 850.0),
        ("tables", SHARED, 1, 1.25, None, None),  # no sample: no CPU time or memory, not 0
        ("tables", ALL, 1, 1.25, None, None),
        (ALL, "a", 2, 35.5, 29.0, 850.0),
        (ALL, "b", 1, 4.0, 3.0, 300.0),
        (ALL, SHARED, 1, 1.25, None, None),
        (ALL, ALL, 4, 40.75, 32.0, 850.0),
    ]
    assert got.columns == ["stage", "model", "jobs", "wall_s", "cpu_s", "max_rss_mb"]
    assert got.rows() == expected


def test_write_cost_csv_and_markdown(benchmarks, tmp_path):
    csv, md = tmp_path / "out" / "cost.csv", tmp_path / "out" / "cost.md"
    table = write_cost(benchmarks, csv, md)
    assert pl.read_csv(csv).equals(table)
    text = md.read_text()
    for title in ("per stage", "per model", "per stage and model"):
        assert f"### Cost of the run {title}\n" in text
    assert "| all | 4 | 0:00:41 | 40.8 | 32.0 | 850.0 |" in text  # the run's total
    assert "| tables / (shared) | 1 | 0:00:01 | 1.2 |  |  |" in text
    assert not [p for p in csv.parent.iterdir() if p.name.startswith(".")]  # written atomically


def test_a_file_that_is_no_benchmark_is_an_error(tmp_path):
    bad = tmp_path / "x.tsv"
    bad.write_text("a\tb\n1\t2\n")
    with pytest.raises(ValueError, match="not a Snakemake benchmark file"):
        read_benchmark(bad)


def test_every_script_rule_has_a_benchmark_file():
    """Each rule that runs a script writes results/benchmarks/<rule>[/<wildcards>].tsv."""
    for smk_file in sorted((ROOT / "rules").glob("*.smk")):
        for block in re.split(r"\n(?=rule \w+:)", smk_file.read_text()):
            m = re.match(r"rule (\w+):", block)
            if not m or "    script:" not in block:
                continue
            bench = re.search(r'    benchmark:\n\s+paths\.benchmark\("([^"]+)"\)', block)  # results/benchmarks/<name>.tsv
            assert bench, f"{smk_file.name}: rule {m.group(1)} has no benchmark:"
            assert re.fullmatch(rf"{m.group(1)}(/.+)?", bench.group(1)), bench.group(1)


def test_the_recorded_dag_gives_each_jobs_stage_model_and_benchmark(tmp_path):
    """Snakemake's jobs become [stage, model, benchmark file] in pipeline order; a rule made per group
    of ablations counts under its stage; a job without a benchmark is left out; a missing benchmark
    file is reported, not read."""
    from types import SimpleNamespace

    from circuitloc.plan.hooks.dag import dag_jobs, record_dag

    def job(rule, bench, **wc):
        if bench:
            (tmp_path / bench).write_text("x")
        return SimpleNamespace(rule=SimpleNamespace(name=rule), wildcards_dict=wc, benchmark=str(tmp_path / bench) if bench else None)

    jobs = [job("tables", "t.tsv", task="ioi"), job("scores__zero_mean__query", "s.tsv", task="ioi", model="a"),
            job("model", "m.tsv", model="a"), job("all", None), job("report", None), job("cost", "c.tsv")]
    jobs.append(SimpleNamespace(rule=SimpleNamespace(name="curves"), wildcards_dict={"model": "a"}, benchmark=str(tmp_path / "gone.tsv")))
    record = tmp_path / "dag.json"
    rec = record_dag(jobs, record, exclude=("cost",))
    assert [(s, m) for s, m, _ in rec] == [("model", "a"), ("scores", "a"), ("curves", "a"), ("tables", None)]
    found, missing = dag_jobs(record)
    assert [(s, m) for s, m, _ in found] == [("model", "a"), ("scores", "a"), ("tables", None)]
    assert missing == [str(tmp_path / "gone.tsv")]
