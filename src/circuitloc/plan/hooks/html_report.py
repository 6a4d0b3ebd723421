"""The HTML report of a run: `snakemake --report` on this workflow with the run's effective config,
so the report shows the DAG just built. It only reads the records under .snakemake (no lock needed
beside the run)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from circuitloc.plan.jobs.targets import LANDING  # written by rule landing
from circuitloc.plan.config.workflow_config import as_layer


def report_text(root) -> str:
    """The report's landing text: the run's first page (its claims, Table 1 and headline figures)
    where the run has written it, else the workflow's description."""
    landing = os.path.abspath(LANDING)
    return landing if os.path.exists(landing) else os.path.join(root, "report", "workflow.rst")


def build_report(config, root, snakefile, html, log_path) -> None:
    """Write the report of the run of `snakefile` with the run's resolved `config` (passed on as a
    layer: plan.config.workflow_config.as_layer) to `html`, styled by the checkout `root`'s stylesheet (a
    caller's Snakefile, using circuitloc as a module, has none); Snakemake's output to `log_path`.
    No executor profile: the report is built here, in this process's machine."""
    layer = as_layer(config, root)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "config.yaml"
        cfg.write_text(yaml.safe_dump(dict(layer), sort_keys=False))
        meta = Path(tmp) / "metadata.yaml"
        meta.write_text(yaml.safe_dump(_metadata(layer), sort_keys=False))
        style = Path(root) / "report" / "style.css"
        cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", os.getcwd(),
               "--configfile", str(cfg), "--nolock", "--report", str(html),
               "--report-metadata", str(meta), "--report-stylesheet", str(style)]
        env = {k: v for k, v in os.environ.items() if k != "SNAKEMAKE_PROFILE"}
        with open(log_path, "w") as log_file:
            subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, check=True, timeout=3600)


def _metadata(layer) -> dict:
    """Snakemake's report metadata: with any, the report opens on its text rather than on the workflow
    graph. Only the seed, a number: Snakemake 9 renders every string value with docutils'
    `publish_parts` and shows each of its parts (WHOLE, ENCODING, VERSION, ...) under the page; the
    run's models, tasks, device and seed are on the page itself (report/workflow.rst, its tail)."""
    return {"seed": int(layer.get("seed", 0))}
