"""Snakemake puts this folder on sys.path; this puts the checkout's src/ first there too, so jobs
import the circuitloc of this workflow even inside a --use-conda environment, and even when the
calling Python (a .venv made in another checkout, whose src/ is on its path) has another circuitloc.
Every script imports it first, so it also turns third-party progress bars off."""

import os
import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parents[2] / "src")
sys.path[:] = [_SRC] + [p for p in sys.path if p != _SRC]

# Third-party progress bars (transformers' GGUF conversion, downloads) off in job logs: each job
# logs its own progress. tqdm reads this when first imported, so it is set before any import.
os.environ.setdefault("TQDM_DISABLE", "1")
