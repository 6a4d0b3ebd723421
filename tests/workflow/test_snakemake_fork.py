"""The tests' Snakemake calls run in children forked from a server that imported Snakemake once
(tests/snakemake_fork.py): such a call must be what a fresh `python -m snakemake` is, in what it
plans, prints, records of the user's command, and exits with."""

import subprocess

import pytest
from snakemake_fork import SERVER
from workflow_helpers import SNAKEMAKE, copy_workflow, planned_jobs, smk_env

pytestmark = pytest.mark.workflow


def _both(args, cwd, env=None):
    env = env or smk_env()
    forked = SERVER.run(list(args), cwd, env, 600, serve_env=smk_env())
    fresh = subprocess.run(SNAKEMAKE + list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return forked, fresh


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
