#!/usr/bin/env bash
# Snakemake runs this inside the environment right after creating it, from report.yaml or from a
# pin file (report.linux-64.pin.txt lists conda packages only, never the yaml's pip section).
# The same pip packages as report.yaml's pip: section (tests/test_envs.py checks they agree).
set -euo pipefail
python -m pip install --no-input "polars==2.1.0"
