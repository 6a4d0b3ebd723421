"""Through Snakemake: a dry run (-n) ends on the line a run starts with (what it would run, how many
jobs), and the plan-time refusals of a mistyped task and of an `hf:` path that does not exist
beside a local folder are one line each, without a traceback (the messages: unit/test_error_lines.py,
unit/test_hf_names.py)."""

import re

import pytest
from workflow_helpers import smk

pytestmark = pytest.mark.workflow


def test_a_dry_run_says_what_will_run():
    p = smk("-n", "--configfile", ".test/config.yaml")
    err = (p.stdout + p.stderr).rstrip().splitlines()
    m = re.fullmatch(r"circuitloc: 2 models x 3 tasks \(ioi, induction, facts\) x up to 6 ablations \(mean-kv, "
                     r"mean-query, resample-kv, resample-query, zero-kv, zero-query\): (\d+) jobs to run", err[-1])
    assert m, err[-3:]
    # as many jobs as Snakemake's own table counts
    totals = [int(ln.split()[1]) for ln in err if re.fullmatch(r"total\s+\d+", ln.strip())]
    assert int(m.group(1)) == (totals[-1] if totals else 0) and sum("jobs to run" in ln for ln in err) == 1


def _refusal(tmp_path, text):
    cfg = tmp_path / "my.yaml"
    cfg.write_text(text)
    p = smk("-n", "--configfile", str(cfg), check=False)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "Traceback" not in out, out[-2000:]
    return [ln for ln in out.splitlines() if ln.startswith("config")]


def test_a_mistyped_task_is_one_line_with_did_you_mean(tmp_path):
    lines = _refusal(tmp_path, "tasks:\n  inductoin:\n    n: 30\n")
    assert len(lines) == 1 and lines[0].startswith(
        "config: tasks.inductoin: unknown task 'inductoin' (did you mean 'induction'?)"), lines


def test_an_hf_path_beside_a_local_folder_is_refused_at_plan_time(tmp_path):
    # config/ is a folder of the checkout (the run's working directory): config/gpt2_small is a
    # mistyped local path, not a hub id
    lines = _refusal(tmp_path, "models:\n  m:\n    source: hf\n    hf: config/gpt2_small\n    family: gpt2\n")
    assert len(lines) == 1 and lines[0].startswith("config: models.m.hf: local directory ") \
        and "config/ does" in lines[0], lines
