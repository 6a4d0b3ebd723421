"""Faults are caught and named: NaN/inf never reach an artifact, corrupt inputs name their file,
and a failed job's reason is found in its log (on a real run's console:
workflow/test_faults_snakemake.py)."""

import contextlib
import io as stdio
import os

import polars as pl
import pytest
from helpers import card_for

from circuitloc import io
from circuitloc import runner
from circuitloc.engine import datasets
from circuitloc.engine import pipeline
from circuitloc.engine.job import read_ranked
from circuitloc.engine.scan import Scanner
from circuitloc.engine.settings import CurveFiles, CurveSettings, JobSettings, ScoreFiles
from circuitloc.errors import ArtifactError, NonFiniteError
from circuitloc.plan.hooks.console import explain_failures, last_error_line
from circuitloc.stats import Bootstrap

BOOT = Bootstrap(20, 0, 0.95)


def _job(card, **fields) -> JobSettings:
    return JobSettings(card=card, batch_tokens=4096, task="ioi", min_group=2, seed=0, **fields)


@pytest.fixture(scope="module")
def ioi_job(tmp_path_factory, tiny_dirs):
    """A card and an IOI dataset of the tiny Qwen2 model."""
    root = tmp_path_factory.mktemp("faults")
    card = card_for(tiny_dirs["qwen_gqa"], name="tinyq")
    # the test tokenizer's closed vocabulary lacks most words of the templates: keep those prompts
    datasets.build_dataset(_job(card), {"source": {"kind": "generate"}, "n": 24, "n_score": 8, "unknown_tokens": "keep"},
                    None, root / "ioi.parquet", root / "ioi.filter.json")
    return card, root / "ioi.parquet"


def _poison(layer, head):
    """Scanner._ablating that turns the logits of the copy ablating (layer, head) into NaN."""
    orig = Scanner._ablating

    @contextlib.contextmanager
    def poisoned(self, keep, copies, rows):
        with orig(self, keep, copies, rows):
            mask = keep.get(layer)
            hit = [] if mask is None else (mask[:, head] == 0).nonzero().flatten().tolist()
            if not hit:
                yield
                return
            j = hit[0]

            def nan_out(mod, args, out):
                out = out.clone()
                n = out.shape[0] // copies
                out[j * n:(j + 1) * n] = float("nan")
                return out

            h = self.unembed.register_forward_hook(nan_out)
            try:
                yield
            finally:
                h.remove()
    return poisoned


@pytest.mark.parametrize("stage", ["score", "curve"])
def test_nan_in_one_ablation_fails_the_job_and_writes_nothing(ioi_job, tmp_path, monkeypatch, stage):
    card, data = ioi_job
    scores = tmp_path / "ok.parquet"
    if stage == "curve":  # a clean scores file first, then poison the curve's steps
        pipeline.score(_job(card, bootstrap=BOOT), data, "zero-query", ScoreFiles(scores, tmp_path / "ok.prompts.parquet"))
        top = read_ranked(scores).row(0, named=True)
        layer, head = int(top["layer"]), int(top["head"])
    else:
        layer, head = 1, 2
    monkeypatch.setattr(Scanner, "_ablating", _poison(layer, head))
    out = {"score": [tmp_path / "s.parquet", tmp_path / "s.prompts.parquet"],
           "curve": [tmp_path / "c.parquet", tmp_path / "c.control.parquet"]}[stage]
    with pytest.raises(NonFiniteError) as e:
        if stage == "score":
            pipeline.score(_job(card, bootstrap=BOOT), data, "zero-query", ScoreFiles(*out))
        else:
            cfg = {"n_curve": 16, "max_steps": 3, "methods": ["ranked"], "control_draws": 2, "prompts": "all"}
            pipeline.curve(_job(card, curves=CurveSettings.of(cfg)), data, "zero-query", CurveFiles(scores, *out))
    msg = str(e.value)
    for part in ("model tinyq", "task ioi", "ablation zero-query", f"L{layer}H{head}", "float32", "NaN"):
        assert part in msg, (part, msg)
    assert not any(p.exists() for p in out)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left either


def test_nan_error_is_one_line_from_run(ioi_job, tmp_path, monkeypatch, capsys):
    card, data = ioi_job
    monkeypatch.setattr(Scanner, "_ablating", _poison(0, 1))
    with pytest.raises(SystemExit) as e:
        runner.run(pipeline.score, _job(card), data, "zero-query", ScoreFiles(tmp_path / "s.parquet", tmp_path / "p.parquet"))
    assert e.value.code == 1
    assert "circuitloc error: model tinyq" in capsys.readouterr().err


def test_truncated_dataset_parquet_is_named(ioi_job, tmp_path):
    card, data = ioi_job
    bad = tmp_path / "ioi.parquet"
    raw = data.read_bytes()
    bad.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ArtifactError, match=rf"{bad}: not a readable parquet file, truncated or corrupt"):
        pipeline.score(_job(card), bad, "zero-query", ScoreFiles(tmp_path / "s.parquet", tmp_path / "p.parquet"))
    assert not (tmp_path / "s.parquet").exists()


def test_dataset_missing_a_column_is_named(ioi_job, tmp_path):
    card, data = ioi_job
    bad = tmp_path / "ioi.parquet"
    pl.read_parquet(data).drop("io_id").write_parquet(bad)
    with pytest.raises(ArtifactError, match=rf"{bad}: this ioi dataset lacks column\(s\) \['io_id'\]"):
        pipeline.score(_job(card), bad, "zero-query", ScoreFiles(tmp_path / "s.parquet", tmp_path / "p.parquet"))


def test_scores_missing_a_column_is_named(tmp_path):
    bad = tmp_path / "scores.parquet"
    pl.DataFrame({"unit": ["L0H0"], "layer": [0], "head": [0]}).write_parquet(bad)
    with pytest.raises(ArtifactError, match=r"scores table lacks column\(s\) \['drop'\]"):
        read_ranked(bad)


@pytest.mark.parametrize("content, what", [("{\"name\": \"m\", ", "Expecting"), ("", "empty file"),
                                           (b"\xff\xfe\x00garbage", "not UTF-8")])
def test_card_that_is_not_json_is_named(tmp_path, capsys, content, what):
    card = tmp_path / "card.json"
    (card.write_bytes if isinstance(content, bytes) else card.write_text)(content)
    with pytest.raises(ArtifactError, match=rf"{card}: not .*{what}"):
        io.read_json(card)
    with pytest.raises(SystemExit):  # what the job scripts do: one line, no traceback
        runner.run(io.read_json, card)
    assert f"circuitloc error: {card}: not" in capsys.readouterr().err


def test_stale_temporary_of_a_killed_writer_is_removed(tmp_path):
    target = tmp_path / "x.parquet"
    stale = tmp_path / ".x.parquet.ab12cd_9.parquet"  # what atomic_path leaves if killed mid-write
    other = tmp_path / ".x.parquet.bak.ab12cd_9.bak"  # not its own temporary: kept
    stale.write_bytes(b"half")
    other.write_bytes(b"keep")
    io.write_parquet(pl.DataFrame({"a": [1]}), target)
    assert not stale.exists() and other.exists()
    assert pl.read_parquet(target)["a"].to_list() == [1]


def test_explain_failures_prints_each_failed_jobs_last_error(tmp_path):
    logs = tmp_path / "results" / "logs"
    (logs / "models").mkdir(parents=True)
    (logs / "scores").mkdir(parents=True)
    (logs / "models" / "bad.log").write_text("2026-01-01 00:00:00,000 INFO loading\n"
                                             "2026-01-01 00:00:01,000 ERROR model 'bad': local directory "
                                             "/nonexistent/dir does not exist\n")
    (logs / "scores" / "crash.log").write_text("Traceback (most recent call last):\n  File x\n"
                                               "ValueError: boom\n")
    (logs / "scores" / "fine.log").write_text("2026-01-01 00:00:00,000 INFO all good\n")
    smk_log = tmp_path / "snakemake.log"
    smk_log.write_text("Error in rule model:\n    message: None\n    jobid: 0\n"
                       f"    log: {logs}/models/bad.log (check log file(s) for error details)\n"
                       "Error in rule scores:\n    jobid: 3\n"
                       f"    log: {logs}/scores/crash.log (check log file(s) for error details)\n"
                       "Shutting down, this might take some time.\n")
    out = stdio.StringIO()
    lines = explain_failures([str(smk_log)], logs, since=0.0, stream=out)
    assert lines == [f"circuitloc: model job failed: model 'bad': local directory /nonexistent/dir does not "
                     f"exist  [log: {logs}/models/bad.log]",
                     f"circuitloc: scores job failed: ValueError: boom  [log: {logs}/scores/crash.log]"]
    assert lines[0] in out.getvalue()
    assert last_error_line(tmp_path / "missing.log").startswith("(log not readable")


def test_ctrl_c_is_reported_as_an_interruption_not_a_failure(tmp_path):
    """What Snakemake 9 logs on Ctrl-C (recorded from a real run): "Terminating processes on user
    request", then an "Error in rule" for every job it killed. A killed job's log ends in an INFO
    line: that is no reason. A job that failed on its own before the Ctrl-C is still a failure."""
    logs = tmp_path / "results" / "logs"
    (logs / "scores").mkdir(parents=True)
    (logs / "models").mkdir(parents=True)
    (logs / "scores" / "cut.log").write_text("2026-01-01 00:00:00,000 INFO scoring 96 units on 20 prompts\n")
    (logs / "scores" / "tb.log").write_text("2026-01-01 00:00:00,000 INFO loading\nTraceback (most recent call "
                                            "last):\n  File \"x.py\", line 3, in run\nKeyboardInterrupt\n")
    (logs / "models" / "bad.log").write_text("2026-01-01 00:00:01,000 ERROR model 'bad': no config.json\n")
    smk_log = tmp_path / "snakemake.log"
    jobs = [("model_hf", "models/bad.log"), ("scores", "scores/cut.log"), ("scores", "scores/tb.log")]
    smk_log.write_text("Terminating processes on user request, this might take some time.\n" + "".join(
        f"RuleException:\nCalledProcessError in file Snakefile, line 8:\nCommand 'python x.py' died with "
        f"<Signals.SIGINT: 2>.\nError in rule {rule}:\n    message: None\n    jobid: {i}\n"
        f"    log: {logs}/{log} (check log file(s) for error details)\n" for i, (rule, log) in enumerate(jobs)))
    out = stdio.StringIO()
    lines = explain_failures([str(smk_log)], logs, since=None, stream=out)
    assert lines == [f"circuitloc: model_hf job failed: model 'bad': no config.json  [log: {logs}/models/bad.log]",
                     f"circuitloc: scores job interrupted before it finished  [log: {logs}/scores/cut.log]",
                     f"circuitloc: scores job interrupted before it finished  [log: {logs}/scores/tb.log]",
                     ("circuitloc: the run was interrupted (Ctrl-C), not failed: the outputs it finished are kept; "
                      "rerun the same command to go on")]
    assert "the run was interrupted" in out.getvalue() and "why the run failed" not in out.getvalue()


def test_a_full_disk_is_said_last(tmp_path, monkeypatch):
    """A full disk fails Snakemake's own records, with no job log saying why: the summary says it."""
    import collections
    import shutil

    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10**9, 10**9 - 4096, 4096))
    smk_log = tmp_path / "snakemake.log"
    smk_log.write_text("OSError: [Errno 28] No space left on device: '.snakemake/metadata/x'\n")
    out = stdio.StringIO()
    lines = explain_failures([str(smk_log)], tmp_path / "results" / "logs", since=None, stream=out)
    assert lines == [f"circuitloc: the disk of {os.path.abspath('.')} is full (4096 bytes free): no partial result was "
                     "kept; free space, then rerun the same command"]
    assert "why the run failed" in out.getvalue()


@pytest.mark.parametrize("ended, line", [
    ("Command 'python x.py' died with <Signals.SIGINT: 2>.", "scores job interrupted (SIGINT) before it finished"),
    ("Command 'set -euo pipefail; python x.py' returned non-zero exit status 130.",
     "scores job interrupted (SIGINT) before it finished"),
    ("Command 'python x.py' died with <Signals.SIGKILL: 9>.",
     "scores job killed by SIGKILL before it finished (out of memory, or a scheduler's limit?)"),
])
def test_a_job_a_signal_ended_is_named_so_even_when_snakemake_went_on(tmp_path, ended, line):
    """A SIGINT Snakemake itself ignored (no "Terminating processes on user request") still ended the
    job, whose log ends in an INFO line: that line is no reason; the signal is. A job with an error
    of its own in its log, or no signal, keeps its error line."""
    logs = tmp_path / "results" / "logs"
    (logs / "scores").mkdir(parents=True)
    (logs / "scores" / "cut.log").write_text("2026-01-01 00:00:00,000 INFO scoring 96 units on 20 prompts\n")
    (logs / "scores" / "bad.log").write_text("2026-01-01 00:00:00,000 ERROR model 'm': no config.json\n")
    (logs / "scores" / "quiet.log").write_text("2026-01-01 00:00:00,000 INFO loading\n")
    smk_log = tmp_path / "snakemake.log"
    smk_log.write_text("".join(
        f"RuleException:\nCalledProcessError in file Snakefile, line 8:\n{how}\nError in rule scores:\n"
        f"    message: None\n    jobid: {i}\n    log: {logs}/scores/{log} (check log file(s) for error details)\n"
        for i, (how, log) in enumerate([(ended, "cut.log"), (ended, "bad.log"),
                                        ("Command 'python x.py' returned non-zero exit status 1.", "quiet.log")])))
    lines = explain_failures([str(smk_log)], logs, since=None, stream=stdio.StringIO())
    assert lines == [f"circuitloc: {line}  [log: {logs}/scores/cut.log]",
                     f"circuitloc: scores job failed: model 'm': no config.json  [log: {logs}/scores/bad.log]",
                     f"circuitloc: scores job failed: 2026-01-01 00:00:00,000 INFO loading  [log: {logs}/scores/quiet.log]"]


def test_a_run_that_ends_through_no_handler_still_says_the_disk_is_full(tmp_path, monkeypatch):
    """Snakemake's failure to record a finished job's metadata (a full disk) raises out of its
    scheduler and calls no onerror: the summary is printed at exit instead, and only then."""
    import atexit
    import collections
    import shutil
    import types

    from circuitloc.plan.hooks.handlers import Handlers

    smk_log = tmp_path / "snakemake.log"
    smk_log.write_text("WorkflowError:\nError recording metadata for finished job ([Errno 28] No space left on "
                       "device: '.snakemake/metadata/x').\n")
    wf = types.SimpleNamespace(modifier=types.SimpleNamespace(modify_rulename=lambda name: name), dryrun=False,
                               logger_manager=types.SimpleNamespace(get_logfile=lambda: str(smk_log)))
    at_exit = []
    monkeypatch.setattr(atexit, "register", at_exit.append)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(10**9, 10**9 - 4096, 4096))
    full = (f"circuitloc: the disk of {os.path.abspath('.')} is full (4096 bytes free): no partial result was kept; "
            "free space, then rerun the same command")
    for ended_by in (None, "success", "error"):
        handlers = Handlers(wf, {"models": {}}, str(tmp_path / "dag.json"), str(tmp_path / "report.html"))
        handlers.watch_end()  # what onstart does first
        assert at_exit[-1] == handlers.unfinished_end
        if ended_by:
            getattr(handlers, ended_by)(str(smk_log))
        out = stdio.StringIO()
        lines = handlers.unfinished_end(stream=out)
        if ended_by:  # a handler ran (and said what it says): nothing more at exit
            assert lines is None and out.getvalue() == ""
        else:
            assert lines == [full] and "why the run failed" in out.getvalue()
            assert handlers.unfinished_end(stream=out) is None  # said once
