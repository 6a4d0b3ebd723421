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


def build_report(layer, snakefile, html, log_path) -> None:
    """Write the report of the run of `snakefile` with the config `layer` (the run's resolved config
    as a layer: plan.workflow_config.as_layer) to `html`; Snakemake's output to `log_path`. No
    executor profile: the report is built here, in this process's machine."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "config.yaml"
        cfg.write_text(yaml.safe_dump(dict(layer), sort_keys=False))
        cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", os.getcwd(),
               "--configfile", str(cfg), "--nolock", "--report", str(html)]
        env = {k: v for k, v in os.environ.items() if k != "SNAKEMAKE_PROFILE"}
        with open(log_path, "w") as log_file:
            subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, check=True, timeout=3600)
