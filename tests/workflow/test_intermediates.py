"""Nothing silently missing: every file a table is computed from is part of the default target, so a
deleted one, or one Snakemake removed after a forced job failed, is rebuilt by a plain rerun; and
the recovery hint of broken weights is the user's own command rebuilding the card alone."""

import re
import shlex
import shutil
import subprocess

import pytest
from workflow_helpers import CORES, copy_workflow, planned_jobs, smk, smk_env, stand_in_outputs

pytestmark = pytest.mark.workflow

RUN = ("--cores", CORES, "--configfile", ".test/config.yaml")
# what a run keeps beside its results that a rerun rewrites or leaves (not results a table reads)
NOT_RESULTS = ("logs/", "benchmarks/", ".resume/")


def _results(run):
    return sorted(str(p.relative_to(run / "results")) for p in (run / "results").rglob("*")
                  if p.is_file() and not str(p.relative_to(run / "results")).startswith(NOT_RESULTS))


def test_deleted_intermediates_are_planned_by_a_plain_rerun(tmp_path):
    """A finished run of stand-ins (nothing computed): a deleted score file, a deleted specificity
    file and a deleted toy's weights are each planned again with what depends on them (before,
    Snakemake said "Nothing to be done": no target asked for them)."""
    run = copy_workflow(tmp_path / "wf")
    stand_in_outputs(run, smk("-n", *RUN, cwd=run).stdout)
    smk("--touch", "--forceall", *RUN, cwd=run)
    assert planned_jobs(smk("-n", *RUN, cwd=run).stdout) == []
    (run / "results/specificity/tiny_mha/zero-query.parquet").unlink()
    jobs = planned_jobs(smk("-n", *RUN, cwd=run).stdout)
    assert any(r.split("__")[0] == "specificity" and wc == {"model": "tiny_mha"} for r, wc in jobs), jobs
    (run / "results/scores/ioi/tiny_gqa/zero-query.parquet").unlink()
    shutil.rmtree(run / "results/models/tiny_mha/weights")
    jobs = planned_jobs(smk("-n", *RUN, cwd=run).stdout)
    assert ("model", {"model": "tiny_mha"}) in jobs
    assert any(r.startswith("scores") and wc == {"task": "ioi", "model": "tiny_gqa"} for r, wc in jobs), jobs
    assert any(r.startswith("table") for r, _ in jobs), jobs  # and what is computed from them


def test_a_failed_forced_job_leaves_a_plain_rerun_that_restores_every_file(tiny_run, tmp_path):
    """A corrupt weights file of the right size (a cut one the plan sees and rebuilds itself:
    plan.jobs.weights, workflow/test_inputs.py): a forced job that loads the model fails on the
    card's sha256 and Snakemake removes the files it had written. The hint's command, the user's own
    as typed (here `python -m snakemake`), run as printed in the run's directory, runs the card's job alone
    and rebuilds the weights; a plain rerun then restores every file (another model's intermediate
    deleted meanwhile too), and the tables equal the clean run's. The forced job is tiny_mha's
    specificity job and the deleted file tiny_gqa's specificity file: every torch job loads its model
    through the same check, and a specificity file has the fewest dependants of the torch stages'
    files (the specificity table, the cost table and the report), where a score file's rerun remakes
    its task's curves, tables, figures and stability."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, symlinks=True)
    clean = _results(run)
    weights = run / "results/models/tiny_mha/weights/model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    forced = "results/specificity/tiny_mha/zero-query.parquet"
    p = smk(*RUN, "--forcerun", forced, cwd=run, check=False)
    console = p.stdout + p.stderr
    assert p.returncode != 0 and not (run / forced).exists(), console[-3000:]
    hint = re.search(r"rebuild the model alone: (.+?); then rerun your command", console)
    assert hint, console[-3000:]
    cmd = shlex.split(hint.group(1))
    assert cmd[1:3] == ["-m", "snakemake"] and "--cores" in cmd and ".test/config.yaml" in cmd, cmd
    # run as printed: the jobs it runs (the blocks Snakemake prints as it starts each) are the card's alone
    ran = subprocess.run(cmd, cwd=run, env=smk_env(), capture_output=True, text=True)
    said = ran.stdout + ran.stderr
    assert ran.returncode == 0 and planned_jobs(said) == [("model", {"model": "tiny_mha"})], said[-3000:]
    # another job's intermediate, deleted meanwhile: tiny_gqa's specificity file, whose table the
    # forced job's rerun remakes anyway (a score file would rerun its task's curves, tables and figures)
    (run / "results/specificity/tiny_gqa/zero-query.parquet").unlink()
    smk(*RUN, cwd=run)
    assert _results(run) == clean
    for table in sorted((tiny_run / "results/tables").glob("*.csv")):
        if table.name != "cost.csv":  # timings
            assert (run / "results/tables" / table.name).read_bytes() == table.read_bytes(), table.name
