"""The tests' Snakemake calls run in children forked from a server that imported Snakemake once
(tests/snakemake_fork.py): such a call must be what a fresh `python -m snakemake` is, in what it
plans, prints, records of the user's command, and exits with."""

import json
import os
import subprocess
import time

import pytest
from snakemake_fork import ENV, SERVER
from workflow_helpers import SNAKEMAKE, copy_workflow, planned_jobs, smk_env

pytestmark = pytest.mark.workflow


def _call(how, args, cwd, env=None):
    """`python -m snakemake ARGS` forked by the server, or ("fresh") as a plain subprocess."""
    env = env or smk_env()
    if how == "forked":
        return SERVER.run(list(args), cwd, env, 600, serve_env=smk_env())
    return subprocess.run(SNAKEMAKE + list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _both(args, cwd, env=None):
    return _call("forked", args, cwd, env), _call("fresh", args, cwd, env)


def _circuitloc_lines(text):
    return [line for line in text.splitlines() if line.startswith("circuitloc:")]


def test_a_forked_dry_run_plans_and_prints_what_a_fresh_process_does(tmp_path):
    run = copy_workflow(tmp_path / "wf")
    cpu = SERVER.cpu
    forked, fresh = _both(["-n", "--configfile", ".test/config.yaml"], run)
    assert forked.returncode == fresh.returncode == 0, forked.stderr[-2000:]
    jobs = sorted(map(repr, planned_jobs(fresh.stdout)))  # the order of a dry run's job list varies between
    assert sorted(map(repr, planned_jobs(forked.stdout))) == jobs and jobs  # processes (str hashes are salted)
    out = forked.stdout + forked.stderr
    assert _circuitloc_lines(out) == _circuitloc_lines(fresh.stdout + fresh.stderr) and _circuitloc_lines(out)
    assert SERVER.cpu > cpu  # the call's CPU is counted for the suite's report (conftest's --cpu-durations)


def test_a_forked_call_fails_with_the_fresh_processs_code_and_line(tmp_path):
    run = copy_workflow(tmp_path / "wf")
    (run / "bad.yaml").write_text("curves: {threshold: 2.5}\n")
    forked, fresh = _both(["-n", "--configfile", ".test/config.yaml", "bad.yaml"], run)
    assert forked.returncode == fresh.returncode != 0
    assert _circuitloc_lines(forked.stdout + forked.stderr) == _circuitloc_lines(fresh.stdout + fresh.stderr)
    assert "threshold" in forked.stdout + forked.stderr


def test_a_forked_call_sees_the_calls_environment_and_argv(tmp_path):
    """A Snakefile that prints what the recovery hints read (circuitloc.plan.hooks.command: sys.argv)
    and an environment variable of the call's own."""
    (tmp_path / "Snakefile").write_text(
        "import os, sys\nprint('argv', os.path.basename(sys.argv[0]), sys.argv[1:], os.environ.get('FORK_PROBE'))\n"
        "rule all:\n    output: 'x'\n    shell: 'touch {output}'\n")
    forked, fresh = _both(["-n", "--cores", "1"], tmp_path, env=smk_env(FORK_PROBE="here"))
    line = [x for x in forked.stdout.splitlines() if x.startswith("argv")]
    assert line == [x for x in fresh.stdout.splitlines() if x.startswith("argv")]
    assert line == ["argv __main__.py ['-n', '--cores', '1'] here"]


def test_a_forked_call_past_its_timeout_is_killed_with_what_it_started(tmp_path):
    """subprocess.run's timeout, kept: TimeoutExpired, and the call (with a process it started) gone."""
    (tmp_path / "Snakefile").write_text(
        "import subprocess, time\nopen('child.pid', 'w').write(str(subprocess.Popen(['sleep', '60']).pid))\n"
        "time.sleep(60)\nrule all:\n    output: 'x'\n    shell: 'touch {output}'\n")
    with pytest.raises(subprocess.TimeoutExpired):
        SERVER.run(["-n", "--cores", "1"], tmp_path, smk_env(), 5, serve_env=smk_env())
    pid = int((tmp_path / "child.pid").read_text())
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    assert state in ("", "Z"), state  # gone, or a zombie waiting for init to reap it


PROBE = """import json, os, sys, time
started_with_torch = 'torch' in sys.modules  # a forked job's zygote imported it; a fresh process has not
print('torch at start:', started_with_torch, file=sys.stderr)
t = time.process_time()
while time.process_time() - t < float(snakemake.params.busy):
    pass
json.dump({'torch_at_start': started_with_torch, 'name': __name__, 'cwd': os.getcwd(),
           'argv': os.path.basename(sys.argv[0]).split('.', 1)[1], 'path0': os.path.relpath(sys.path[0]),
           'threads': os.environ.get('OMP_NUM_THREADS'), 'tmpdir': __import__('tempfile').gettempdir(),
           'umask': os.umask(0o022), 'probe': os.environ.get('FORK_PROBE')}, open(snakemake.output[0], 'w'))
if snakemake.params.fail:
    raise ValueError('the probe fails here')
time.sleep(float(snakemake.params.sleep))
"""


# the tests of forked jobs, which CIRCUITLOC_TEST_FORK=0 or =calls switches off
jobs_forked = pytest.mark.skipif(os.environ.get(ENV, "1") in ("0", "calls"),
                                 reason=f"{ENV}={os.environ.get(ENV)}: every job starts fresh")


def _script_workflow(path, busy=0.0, fail=False, sleep=0.0):
    path.mkdir(parents=True)
    (path / "probe.py").write_text(PROBE)
    (path / "Snakefile").write_text(
        f"rule probe:\n    output: 'probe.json'\n    params: busy={busy}, fail={fail}, sleep={sleep}\n"
        "    script: 'probe.py'\n")
    return path


@jobs_forked
def test_a_script_job_is_forked_from_the_zygote_and_sees_what_a_fresh_one_does(tmp_path):
    """A job of a forked call runs in a process forked from the server's imports, with the fresh
    job's name, directory, argv, sys.path, Snakemake's thread and temp settings and umask; its CPU is
    counted in the call's."""
    seen = {}
    for how in ("forked", "fresh"):
        run = _script_workflow(tmp_path / how, busy=1.0)
        cpu = SERVER.cpu
        res = _call(how, ["--cores", "1"], run)
        assert res.returncode == 0, res.stderr[-2000:]
        if how == "forked":
            assert SERVER.cpu - cpu > 1.0  # the job's second of CPU is in the call's
        seen[how] = json.loads((run / "probe.json").read_text())
    assert seen["forked"].pop("torch_at_start") and not seen["fresh"].pop("torch_at_start")
    assert seen["forked"]["cwd"] == str(tmp_path / "forked")
    seen["forked"]["cwd"] = seen["fresh"]["cwd"]
    assert seen["forked"] == seen["fresh"]
    assert seen["fresh"]["name"] == "__main__" and seen["fresh"]["argv"] == "probe.py"
    assert seen["fresh"]["path0"] == os.path.join(".snakemake", "scripts")  # the script Snakemake ran is there


@jobs_forked
def test_a_failing_forked_job_fails_the_call_as_a_fresh_one_does(tmp_path):
    res = {}
    for how in ("forked", "fresh"):
        res[how] = _call(how, ["--cores", "1"], _script_workflow(tmp_path / how, fail=True))
        assert f"torch at start: {how == 'forked'}" in res[how].stderr  # its output is removed: it failed
    assert res["forked"].returncode == res["fresh"].returncode != 0
    for r in res.values():
        assert "ValueError: the probe fails here" in r.stderr and "non-zero exit status 1" in r.stderr


def test_a_job_with_another_environment_runs_fresh(tmp_path):
    """A variable the server's imports did not see may change what they do: such a job is not forked."""
    run = _script_workflow(tmp_path / "wf")
    res = SERVER.run(["--cores", "1"], run, smk_env(FORK_PROBE="other"), 600, serve_env=smk_env())
    assert res.returncode == 0, res.stderr[-2000:]
    seen = json.loads((run / "probe.json").read_text())
    assert seen["probe"] == "other" and not seen["torch_at_start"]


@jobs_forked
def test_a_forked_job_past_its_calls_timeout_is_killed(tmp_path):
    run = _script_workflow(tmp_path / "wf", sleep=60)
    (run / "probe.py").write_text("import os\nopen('job.pid', 'w').write(str(os.getpid()))\n" + PROBE)
    with pytest.raises(subprocess.TimeoutExpired):
        # 10 s: a forked call starts its job within 1-3 s even on a busy machine, and the test waits it all
        SERVER.run(["--cores", "1"], run, smk_env(), 10, serve_env=smk_env())
    assert json.loads((run / "probe.json").read_text())["torch_at_start"]
    pid = int((run / "job.pid").read_text())
    deadline = time.monotonic() + 10  # SIGKILL is sent; on a busy machine the job may take a moment to go
    while (state := subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True,
                                   text=True).stdout.strip()) not in ("", "Z") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert state in ("", "Z"), state
