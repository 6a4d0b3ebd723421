"""circuitloc: how concentrated are the attention-head circuits of language models?

The Python API (docs/api.md) is imported on first use (`circuitloc.Run`, ...): `import circuitloc`
itself loads no torch, polars or engine, so the workflow's plan stays light. It is imported by name
(importlib), so the code hash of a job (plan.jobs.codehash, which follows import statements) does not take
in the API and every module it imports."""

import importlib

__version__ = "0.1.0"

_API = ("Metric", "Model", "Run", "TaskData", "load_model", "own_prompts")
_FIGURES = ("plot_scores", "plot_curves")  # circuitloc.api.figures: matplotlib only where a figure is drawn
__all__ = ["__version__", *_API, *_FIGURES]


def __getattr__(name):
    if name in _API:
        return getattr(importlib.import_module("circuitloc.api"), name)
    if name in _FIGURES:
        return getattr(importlib.import_module("circuitloc.api.figures"), name)
    raise AttributeError(f"module 'circuitloc' has no attribute {name!r}")
