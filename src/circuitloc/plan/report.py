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


def build_report(config, snakefile, html, log_path) -> None:
    """Write the report of the run of `snakefile` with `config` to `html`; Snakemake's output to
    `log_path`. No executor profile: the report is built here, in this process's machine."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "config.yaml"
        layer = dict(config)
        # the layer merges onto the embedded default again: a default task this run left out stays out
        default = yaml.safe_load((Path(snakefile).parent / "config" / "config.yaml").read_text()) or {}
        layer["tasks"] = {**{t: None for t in default.get("tasks", {}) if t not in config.get("tasks", {})},
                          **dict(config.get("tasks", {}))}
        cfg.write_text(yaml.safe_dump(layer, sort_keys=False))
        cmd = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile), "--directory", os.getcwd(),
               "--configfile", str(cfg), "--nolock", "--report", str(html)]
        env = {k: v for k, v in os.environ.items() if k != "SNAKEMAKE_PROFILE"}
        with open(log_path, "w") as log_file:
            subprocess.run(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, check=True, timeout=3600)
