"""Run directories: a finished run that is moved or copied plans nothing; two runs at once in one
directory each keep their own job list for the cost table (with the workflow as a renamed module); a corrupt intermediate is rebuilt, with
exactly what depends on it, by the command its error gives; lost weights are rebuilt by the plain
command and nothing after them reruns; one checkout holds several runs
(`--directory`); and the workflow works as a Snakemake module from another directory."""

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import polars as pl
import pytest
import yaml
from workflow_helpers import CORES, ROOT, SNAKEMAKE, copy_workflow, planned_jobs, reuse_models, smk, smk_env

from circuitloc import resume

TEST_CONFIG = ROOT / ".test" / "config.yaml"
DAG_RECORD = Path(".snakemake") / "circuitloc" / "dag_jobs.json"


def _small_config(models, root="", **extra) -> dict:
    """The test config cut to `models` (of its two toys), IOI alone and the zero ablation of query
    heads; its files named from `root` (the working directory's way to the checkout's .test/)."""
    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    cfg["models"] = {m: cfg["models"][m] for m in models}
    for spec in cfg["models"].values():
        spec["toy"]["checkpoint"] = os.path.join(root, spec["toy"]["checkpoint"])
        spec.pop("ablation", None)
    cfg["tasks"] = {"ioi": {**cfg["tasks"]["ioi"], "n": 24, "n_score": 8}, "induction": None, "facts": None}
    cfg["tasks"]["ioi"]["source"]["path"] = os.path.join(root, cfg["tasks"]["ioi"]["source"]["path"])
    cfg.update(ablation={"kinds": ["zero"], "units": ["query"], "min_group": 2}, analysis=[], **extra)
    return cfg


def _digests(run: Path, parts=("data", "scores", "curves", "specificity", "tables")) -> dict:
    """{path: sha256} of every result file the numbers live in (the cost table's timings aside)."""
    out = {}
    for part in parts:
        for p in sorted((run / "results" / part).rglob("*")):
            if p.is_file() and not p.name.startswith("cost."):
                out[str(p.relative_to(run))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.mark.workflow
def test_a_moved_run_plans_nothing(tiny_run, tmp_path):
    """The whole run directory (workflow, results and .snakemake) copied elsewhere: every path a
    job recorded is relative to it, so Snakemake finds nothing to do."""
    moved = tmp_path / "elsewhere" / "renamed_run"
    shutil.copytree(tiny_run, moved, symlinks=True)
    p = smk("-n", "--configfile", ".test/config.yaml", cwd=moved)
    assert planned_jobs(p.stdout) == [], p.stdout[-3000:]
    assert "Nothing to be done" in p.stdout + p.stderr


def test_a_stash_key_does_not_depend_on_where_the_run_is(tmp_path, monkeypatch):
    """A grouped job's stash of finished ablations (circuitloc.resume) is keyed by its params, its
    inputs as the rule names them (relative) and their size and modification time: a copied run
    finds the stash of its original."""
    a = tmp_path / "a"
    (a / "results" / "data").mkdir(parents=True)
    (a / "results" / "data" / "x.parquet").write_bytes(b"rows")
    shutil.copytree(a, tmp_path / "b")  # copy2: the same modification times
    params = {"ablations": ["zero-query"], "resume": "results/.resume/scores/ioi/m"}
    keys = []
    for where in ("a", "b"):
        monkeypatch.chdir(tmp_path / where)
        keys.append(resume.digest(params, ["results/data/x.parquet"], {"task": "ioi", "model": "m"}))
    assert keys[0] == keys[1]


@pytest.mark.workflow
@pytest.mark.long(25)
def test_a_corrupt_intermediate_is_rebuilt_by_the_command_its_error_gives(tiny_run, tmp_path):
    """A truncated specificity file of a finished run: the rerun fails naming the file and the
    command; that command rebuilds the file and only what depends on it, and every result comes out
    as before, byte for byte. (Engine and report jobs read parquet through the same reader; a
    specificity file has the fewest dependants of the torch stages' files: its model's specificity
    job, the specificity table, the cost table and the report, 4 jobs where a curve has 9. tiny_mha's
    job runs two ablations where tiny_gqa's runs six.)"""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, symlinks=True)
    before = _digests(run)
    bad = "results/specificity/tiny_mha/zero-query.parquet"
    mtimes = {f: os.stat(run / f).st_mtime_ns for f in before}
    (run / bad).write_bytes((run / bad).read_bytes()[:100])
    failed = smk("--cores", CORES, "--configfile", ".test/config.yaml", cwd=run, check=False)
    assert failed.returncode != 0
    # the user's own command (here `python -m snakemake`, its --cores and --configfile) with a forcerun
    advice = re.search(r"rebuild it and what depends on it: (.+?)(?:  \[log: .*\])?$", failed.stdout + failed.stderr, flags=re.MULTILINE)
    assert advice and bad in advice.group(1), (failed.stdout + failed.stderr)[-3000:]
    printed = shlex.split(advice.group(1))
    assert printed[1:3] == ["-m", "snakemake"] and printed[-2:] == ["--forcerun", bad], printed
    args = printed[3:]
    assert args[:4] == ["--cores", CORES, "--configfile", ".test/config.yaml"], args
    # the command run: the jobs it runs (the blocks Snakemake prints as it starts each) are its plan
    ran = smk(*args, cwd=run)
    said = ran.stdout + ran.stderr
    plan = planned_jobs(said)
    assert [rule for rule, wc in plan if rule.startswith("specificity") and wc == {"model": "tiny_mha"}]
    assert not [rule for rule, _ in plan if rule.startswith(("model", "dataset", "scores", "curves", "tables",
                                                              "figures"))], plan
    for rule, wc in plan:  # only what reads the specificity file, directly or not
        assert wc.get("model", "tiny_mha") == "tiny_mha" and "task" not in wc, (rule, wc)
    rebuilt = {f.strip() for line in re.findall(r"^\s+output: (.*)$", said, flags=re.MULTILINE) for f in line.split(",")}
    assert _digests(run) == before
    for f, t in mtimes.items():  # what the plan named was written again, and nothing else
        assert (os.stat(run / f).st_mtime_ns != t) == (f in rebuilt), f


@pytest.mark.workflow
@pytest.mark.long(18)
def test_a_model_rebuilt_with_identical_weights_reruns_nothing_downstream(tiny_run, tmp_path):
    """`--forcerun` of one model's card in a finished run: its model job runs again and writes the
    same card, byte for byte, so a dry run plans nothing (Snakemake sees the rewritten card's
    content unchanged). A card holding a build timestamp or duration would differ between the two
    builds (they run minutes apart) and fail the first assertion; the last step shows the dry run
    would catch it too: the card with one such key added plans the model's dependants again."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, symlinks=True)
    card = run / "results" / "models" / "tiny_gqa" / "card.json"
    before, built = card.read_bytes(), os.stat(card).st_mtime_ns
    target = str(card.relative_to(run))
    smk(target, "--forcerun", target, "--cores", "1", "--configfile", ".test/config.yaml", cwd=run)
    assert os.stat(card).st_mtime_ns != built  # the model job ran again
    assert card.read_bytes() == before
    after = smk("-n", "--configfile", ".test/config.yaml", cwd=run)
    assert planned_jobs(after.stdout) == [], after.stdout[-3000:]
    card.write_text(card.read_text().replace("{", '{"build_seconds": 12.5, ', 1))
    stamped = planned_jobs(smk("-n", "--configfile", ".test/config.yaml", cwd=run).stdout)
    # its dependants (the family's shared facts among them, which read every member's card), no model
    assert ("dataset", {"task": "ioi", "model": "tiny_gqa"}) in stamped, stamped
    assert not [job for job in stamped if job[0].startswith("model")], stamped


def _job_stats(output: str) -> dict:
    """{rule: jobs} of the 'Job stats' table Snakemake prints when it starts running."""
    table = output.split("Job stats:", 1)[1].split("total", 1)[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, flags=re.MULTILINE)}


@pytest.mark.workflow
@pytest.mark.long(30)
def test_lost_weights_are_rebuilt_by_the_plain_command_and_nothing_after_them_reruns(tiny_run, tmp_path):
    """A finished run whose toy lost its weights folder, then (in the same run) only its
    model.safetensors (inside the folder, where Snakemake does not look): each time the plain
    command, as it was, runs the model's job alone (rule model_rebuilt, and the target), which writes
    the same weights and card, byte for byte; every result is as before and not one written again,
    and the next dry run plans nothing (after the first loss, the second plain command's jobs say it)."""
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run, symlinks=True)
    folder = run / "results" / "models" / "tiny_gqa" / "weights"
    weights = folder / "model.safetensors"
    card = folder.parent / "card.json"
    before, card_bytes, weight_bytes = _digests(run), card.read_bytes(), weights.read_bytes()
    mtimes = {f: os.stat(run / f).st_mtime_ns for f in before}
    for lost in ("folder", "file"):
        shutil.rmtree(folder) if lost == "folder" else weights.unlink()
        p = smk("--cores", CORES, "--configfile", ".test/config.yaml", cwd=run)
        said = p.stdout + p.stderr
        assert "results/models/tiny_gqa/card.json: its weights file results/models/tiny_gqa/weights/model.safetensors " \
               "is missing; the model is rebuilt" in said, lost
        assert _job_stats(said) == {"model_rebuilt": 1, "all": 1}, (lost, said[-3000:])
        assert weights.read_bytes() == weight_bytes and card.read_bytes() == card_bytes, lost
        assert "rebuilt with other contents" not in said, lost
        assert not (folder.parent / "rebuilt").exists(), lost  # the marker is gone with the run
        assert _digests(run) == before, lost
        assert {f for f, t in mtimes.items() if os.stat(run / f).st_mtime_ns != t} == set(), lost
    after = smk("-n", "--configfile", ".test/config.yaml", cwd=run)
    assert planned_jobs(after.stdout) == [], after.stdout[-3000:]


@pytest.mark.workflow
def test_one_checkout_holds_several_runs_with_directory(tiny_run, tmp_path):
    """`--directory runs/<name>`: each run keeps its results and Snakemake records in its own
    directory; the checkout's resources are found from there, and a config's own paths are read
    from the run directory (each run's IOI dataset job reads the config's fahamu file; its model is
    the tiny run's, copied in: a model build would add seconds and test nothing more here)."""
    work = copy_workflow(tmp_path / "wf")
    for name, model in (("a", "tiny_gqa"), ("b", "tiny_mha")):
        (work / "runs" / name).mkdir(parents=True)
        (work / "runs" / f"{name}.yaml").write_text(yaml.safe_dump(_small_config([model], root="../..")))
    for name, model in (("a", "tiny_gqa"), ("b", "tiny_mha")):
        args = ("--directory", f"runs/{name}", "--configfile", f"runs/{name}.yaml")
        plan = planned_jobs(smk("-n", *args, cwd=work).stdout)
        assert {wc["model"] for _, wc in plan if "model" in wc} == {model}
        assert ("model", {"model": model}) in plan
        reuse_models(tiny_run, work / "runs" / name, [model])
        smk(f"results/data/ioi/{model}.parquet", "--cores", "1", *args, cwd=work)
    assert (work / "runs/a/results/data/ioi/tiny_gqa.parquet").is_file()
    assert (work / "runs/b/results/data/ioi/tiny_mha.parquet").is_file()
    assert not (work / "runs/a/results/data/ioi/tiny_mha.parquet").exists() and not (work / "results").exists()
    assert (work / "runs/a/.snakemake").is_dir() and (work / "runs/b/.snakemake").is_dir()


@pytest.mark.workflow
def test_the_workflow_works_as_a_module_from_another_directory(tiny_run, tmp_path):
    """Another workflow uses circuitloc with `module` and `use rule *`: the plan reads circuitloc's
    own config files and scripts from its checkout, writes under the caller's directory, and a
    job runs."""
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "mine.yaml").write_text(yaml.safe_dump(_small_config(["tiny_gqa"], root=str(ROOT))))
    (caller / "Snakefile").write_text(
        'configfile: "mine.yaml"\n\n'
        f'module circuitloc:\n    snakefile: "{ROOT / "Snakefile"}"\n    config: config\n\n'
        "use rule * from circuitloc\n")
    plan = planned_jobs(smk("-n", cwd=caller).stdout)
    rules = {rule for rule, _ in plan}
    assert {"model", "dataset", "scores", "curves", "tables", "figures", "cost", "report"} <= rules, rules
    assert {wc["model"] for _, wc in plan if "model" in wc} == {"tiny_gqa"}
    reuse_models(tiny_run, caller, ["tiny_gqa"])  # a model build would add seconds and test nothing more here
    smk("results/data/ioi/tiny_gqa.parquet", "--cores", "1", cwd=caller)
    assert (caller / "results/data/ioi/tiny_gqa.parquet").is_file()


@pytest.mark.workflow
@pytest.mark.long(60)
def test_the_module_renamed_runs_the_default_target_to_its_report(tiny_run, tmp_path):
    """`use rule * from circuitloc as circuitloc_*` from another directory, through
    workflow/Snakefile (snakedeploy's path): the default target runs to the report, the cost table
    counts the run's jobs under their own stage names (Snakemake runs a module's onstart only
    through circuitloc's chaining), and the start block names what runs. Two runs at once in one
    directory each count their own jobs: meanwhile a run on other targets in the caller's directory
    (a model build, with a config of its own on top) records its own DAG, and the cost table counts
    the first run's jobs, not the second's. The first run reuses the tiny run's tiny_gqa (no model
    job of its own)."""
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "mine.yaml").write_text(yaml.safe_dump(_small_config(["tiny_gqa"], root=str(ROOT))))
    (caller / "other.yaml").write_text(yaml.safe_dump(_small_config(["tiny_mha"], root=str(ROOT))))
    (caller / "Snakefile").write_text(
        'configfile: "mine.yaml"\n\n'
        f'module circuitloc:\n    snakefile: "{ROOT / "workflow" / "Snakefile"}"\n    config: config\n\n'
        "use rule * from circuitloc as circuitloc_*\n")
    reuse_models(tiny_run, caller, ["tiny_gqa"])  # the toy's build (seconds of CPU) is the tiny run's, as above
    cmd = SNAKEMAKE + ["--cores", CORES]
    first = subprocess.Popen(cmd, cwd=caller, env=smk_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        deadline = time.time() + 600
        while not (caller / DAG_RECORD).exists():  # the first run has recorded its DAG
            assert first.poll() is None and time.time() < deadline, "the run ended before it recorded its DAG"
            time.sleep(0.5)
        smk("results/models/tiny_mha/card.json", "--cores", "1", "--configfile", "other.yaml", cwd=caller)
        out, _ = first.communicate(timeout=1500)
    finally:
        first.kill()
    assert first.returncode == 0, out[-4000:]
    assert (caller / "results" / "models" / "tiny_mha" / "card.json").is_file()  # the second run ran its job
    assert (caller / "results" / "report.html").is_file()
    assert "circuitloc: 1 models x 1 tasks (ioi) x up to 1 ablations (zero-query)" in out
    cost = pl.read_csv(caller / "results" / "tables" / "cost.csv")
    assert {"dataset", "scores", "curves"} <= set(cost["stage"].to_list()), cost
    assert "tiny_mha" not in cost["model"].to_list()
    # every job of the first run that wrote a benchmark, once (the cost job's own aside)
    benches = [p for p in (caller / "results" / "benchmarks").rglob("*.tsv")
               if "tiny_mha" not in str(p) and p.name != "cost.tsv"]
    total = cost.filter((pl.col("stage") == "all") & (pl.col("model") == "all"))["jobs"].to_list()
    assert total == [len(benches)] and len(benches) >= 6
