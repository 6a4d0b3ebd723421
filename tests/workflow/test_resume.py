"""A killed run loses nothing: SIGKILL to Snakemake's whole process group while a score job runs
(one job per task and model, several ablations each), then the README's recovery (`--unlock`, then
the same command; profiles/default sets rerun-incomplete) finishes only what is missing: finished
jobs stay, the killed job's finished ablations come back from its stash (circuitloc.resume) and
are not recomputed, every artifact equals an uninterrupted run's (the tiny run's, whose toys and
datasets the run starts from) and no temporary, partial or stashed file is left."""

import base64
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from circuitloc.plan.config import views
from workflow_helpers import (ROOT, SNAKEMAKE, copy_workflow, resolve_over_test_config, reuse_models, reuse_results, smk,
                              smk_env)

MODELS = ("tiny_mha", "tiny_gqa")


def _config() -> dict:
    """The test config on IOI alone: the tiny run's toys and IOI datasets are copied in (the run's
    jobs are the score jobs alone), and its score files are an uninterrupted run's of this config."""
    cfg = yaml.safe_load((ROOT / ".test" / "config.yaml").read_text())
    cfg["tasks"] = {"ioi": cfg["tasks"]["ioi"]}
    return cfg


ABLATIONS = {m: views.model_ablations(resolve_over_test_config({}), m) for m in MODELS}  # tiny_mha: 2, tiny_gqa: 6
TARGETS = [f"results/scores/ioi/{m}/{a}.parquet" for m in MODELS for a in ABLATIONS[m]]


def _outputs(work: Path) -> dict:
    """Every score artifact (and its per-prompt file) -> bytes."""
    return {str(p.relative_to(work)): p.read_bytes() for p in sorted((work / "results/scores").rglob("*.parquet"))}


def _incomplete(work: Path) -> set:
    """Outputs Snakemake has marked incomplete (a job started, its completion not recorded)."""
    root = work / ".snakemake/incomplete"
    out = set()
    for p in root.rglob("*") if root.exists() else ():
        if p.is_file():
            b64 = "".join(part.lstrip("@") for part in p.relative_to(root).parts)
            try:
                out.add(base64.urlsafe_b64decode(b64).decode())
            except ValueError:
                continue
    return out


def _finished(work: Path) -> list:
    """Targets whose job Snakemake recorded as finished: the output exists and is not incomplete."""
    inc = _incomplete(work)
    return [t for t in TARGETS if (work / t).exists() and t not in inc and str(work / t) not in inc]


def _kept_in_a_running_job(work: Path) -> list:
    """Targets of a score job that is still running whose ablation has finished and is stashed."""
    inc = _incomplete(work)
    done = {(p.parts[-4], p.parts[-2]) for p in (work / "results/.resume/scores/ioi").glob("*/*/*/done")}
    return [t for t in TARGETS if (work / t).exists() and (t in inc or str(work / t) in inc)
            and (Path(t).parent.name, Path(t).name.removesuffix(".parquet")) in done]


@pytest.mark.workflow
@pytest.mark.long(30)
def test_sigkill_during_scores_then_resume_is_exact(tmp_path, tiny_run):
    work = copy_workflow(tmp_path / "wf")
    reuse_models(tiny_run, work, MODELS)  # a model build or a dataset would add seconds and test nothing more here
    reuse_results(tiny_run, work, *(f"data/ioi/{m}.{ext}" for m in MODELS for ext in ("parquet", "filter.json")))
    (work / "kr.yaml").write_text(json.dumps(_config()))
    args = [*TARGETS, "--cores", "1", "--configfile", "kr.yaml"]

    # 1. start, and kill the whole process group once a score job has written some of its
    #    ablations and not all (one job at a time: the second model's job, or the first's)
    proc = subprocess.Popen(SNAKEMAKE + args, cwd=work, env=smk_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            kept = _kept_in_a_running_job(work)
            if kept and len(kept) < len(ABLATIONS[Path(kept[0]).parent.name]):
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed during the score jobs"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    time.sleep(2)
    before = {t: ((work / t).stat().st_mtime_ns, (work / t).read_bytes()) for t in _finished(work)}
    kept = {t: ((work / t).stat().st_mtime_ns, (work / t).read_bytes()) for t in _kept_in_a_running_job(work)}
    after_kill = _outputs(work)
    time.sleep(1)
    assert _outputs(work) == after_kill, "a job outlived the SIGKILL of Snakemake's process group"
    assert kept and len(before) + len(kept) < len(TARGETS)
    # what a writer killed mid-write would leave (atomic_path's temporary), beside a missing output
    missing = [t for t in TARGETS if t not in before and t not in kept]
    assert any(not (work / t).exists() for t in missing)  # (one may exist, written and not yet stashed)
    stale = work / Path(missing[0]).parent / f".{Path(missing[0]).name}.k1ll3d_x.parquet"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"PAR1 half a parquet")

    # 2. the plain command fails on the lock, as the README says; --unlock, then the same command
    locked = smk(*args, cwd=work, check=False, timeout=120)
    assert locked.returncode != 0 and "lock" in (locked.stdout + locked.stderr).lower()
    smk("--unlock", "--configfile", "kr.yaml", cwd=work, timeout=120)
    rerun = smk(*args, cwd=work, timeout=600)

    # finished jobs were not recomputed, nor the killed job's finished ablations (from its stash;
    # Snakemake touches a rerun job's outputs, so for those the job's log says what it computed)
    for t, (mtime, data) in before.items():
        assert (work / t).stat().st_mtime_ns == mtime and (work / t).read_bytes() == data, t
    log = rerun.stdout + rerun.stderr
    assert not [t for t in before if t in log] and all(t in log for t in missing)  # which jobs ran
    for t, (_, data) in kept.items():
        model, ablation = Path(t).parent.name, Path(t).name.removesuffix(".parquet")
        job_log = (work / f"results/logs/scores/ioi/{model}.log").read_text()
        assert (work / t).read_bytes() == data, t
        assert f"score ioi/{model}/{ablation}: finished by an earlier, interrupted run" in job_log
        assert f"scores ioi/{model}/{ablation}: " not in job_log  # (the lines of a computed ablation)
    # every artifact is there, complete, and nothing temporary or partial is left
    assert all((work / t).exists() for t in TARGETS)
    # (a directory output's .snakemake_timestamp is Snakemake's: the copied toys' weights folders)
    leftovers = [p for p in (work / "results").rglob(".*") if p.name != ".snakemake_timestamp"]
    assert not leftovers, leftovers
    assert not _incomplete(work)

    # 3. every score file (the killed job's, and the other model's, which ran whole before the kill
    #    or after it) has the bytes of an uninterrupted run's: the tiny run's, of the same config
    killed = {Path(t).parent.name for t in kept}
    assert len(killed) == 1
    every = _outputs(work)
    assert len(every) == 2 * len(TARGETS)
    assert [k for k in every if every[k] != (tiny_run / k).read_bytes()] == []
