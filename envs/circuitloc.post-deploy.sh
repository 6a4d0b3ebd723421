#!/usr/bin/env bash
# Snakemake runs this inside the environment right after creating it, from circuitloc.yaml or from
# a pin file (circuitloc.linux-64.pin.txt lists conda packages only, never the yaml's pip section).
# The same pip packages as circuitloc.yaml's pip: section (tests/test_envs.py checks they agree).
set -euo pipefail
python -m pip install --no-input "transformers==5.17.0" "polars==2.1.0" "transformer-lens==4.3.0"
