"""What a run does when it starts, succeeds or fails (the Snakefile's onstart, onsuccess and
onerror), as one record of the workflow, so that the same handlers serve a standalone run and a
caller that uses circuitloc as a module (plan.hooks.dag.chain_handlers: Snakemake runs the main
Snakefile's handlers only)."""

from __future__ import annotations

import atexit
import sys
import time

from circuitloc.plan.hooks.command import record as record_command
from circuitloc.plan.hooks.console import explain_failures, report_ready
from circuitloc.plan.hooks.dag import own_rule_name, plan_summary, record_dag
from circuitloc.plan.jobs.resources import unsized


class Handlers:
    """The run's handlers: `workflow` and `config` as the Snakefile has them, `dag_record` the file
    the cost job reads the DAG from, `report` the report's path (said last on success)."""

    def __init__(self, workflow, config, dag_record: str, report: str):
        self.workflow, self.config, self.dag_record, self.report = workflow, config, dag_record, report
        self.started = time.time()  # a failure summary names the logs of jobs that failed since
        # this workflow's rule names as the run knows them: a caller's `use rule * from circuitloc
        # as x_*` renames them (own_rule_name maps them back)
        self.renamed = workflow.modifier.modify_rulename("\0")
        # a dry run (-n) calls no handler: what it would run is said when it ends (dry_run_end)
        atexit.register(self.dry_run_end)

    def name(self, rule: str) -> str:
        return own_rule_name(rule, self.renamed)

    def start(self, log=None) -> None:
        """Record the user's command (the jobs' recovery hints print it back), say what will run,
        and record the DAG for the cost job when this run makes the cost table: Snakemake's lock lets
        one run at a time make it, so a concurrent run on other targets never replaces its record."""
        self.watch_end()
        wf = self.workflow
        if getattr(wf, "is_main_process", True):  # a job's own Snakemake keeps the record it inherited
            record_command(sys.argv, wf.dag_settings.targets, wf.workdir_init)
        jobs = list(wf.dag.needrun_jobs())
        print(plan_summary(self.config, jobs), file=sys.stderr)
        for line in unsized(self.config, self.config["models"]):  # resources estimated from nothing
            print(line, file=sys.stderr)
        if any(self.name(j.rule.name) == "cost" for j in jobs):
            record_dag(wf.dag.jobs, self.dag_record, exclude=("cost", "report", "all"), rule_name=self.name)

    def dry_run_end(self, stream=None) -> str | None:
        """After a dry run (-n), which calls no onstart: the line a run prints when it starts (what it
        runs, how many jobs), printed last, below Snakemake's job table. Nothing for any other kind of
        invocation (a run, --report, a job's own process) or a dry run that failed before scheduling."""
        wf = self.workflow
        try:
            if not wf.dryrun or getattr(wf, "scheduler", None) is None:
                return None
            # the jobs it would run: those still to run and those the dry run marked done (as
            # Snakemake's own job table counts them)
            jobs = {*wf.dag.needrun_jobs(), *wf.dag.finished_jobs}
            summary = plan_summary(self.config, sorted(jobs, key=str))
        except Exception:  # an interpreter at exit after any error: say nothing rather than a traceback
            return None
        print(summary, file=stream or sys.stderr, flush=True)
        return summary

    def success(self, log=None) -> None:
        self.ended = True
        report_ready(self.report)

    def error(self, log=None) -> None:
        """A failed job's reason is in its own log: print it last, where the user is looking."""
        self.ended = True
        explain_failures(log, since=self.started)

    def watch_end(self) -> None:
        """From the run's start: at exit, `unfinished_end` unless onsuccess or onerror ran."""
        self.ended = False
        atexit.register(self.unfinished_end)

    def unfinished_end(self, stream=None) -> list[str] | None:
        """A run that started and ended through neither onsuccess nor onerror: an error out of
        Snakemake's own scheduler, which calls no handler (a full disk fails its metadata record of a
        finished job: "Error recording metadata for finished job"). The failure summary then, with
        the full disk's line where the disk is full, printed at exit below Snakemake's error."""
        if getattr(self, "ended", True):
            return None
        self.ended = True
        try:
            log = self.workflow.logger_manager.get_logfile()
        except Exception:  # at exit: the summary from the job logs alone rather than a traceback
            log = None
        return explain_failures(log, since=self.started, stream=stream)
