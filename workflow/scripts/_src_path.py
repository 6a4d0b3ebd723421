"""Snakemake puts this folder on sys.path; this puts the checkout's src/ there too, so jobs import
the circuitloc of this workflow even inside a --use-conda environment."""

import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parents[2] / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)
