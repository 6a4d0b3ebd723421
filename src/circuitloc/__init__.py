"""circuitloc: how concentrated are the attention-head circuits of language models?

The Python API (docs/api.md) is imported on first use (`circuitloc.Run`, ...): `import circuitloc`
itself loads no torch, polars or engine, so the workflow's plan stays light. It is imported by name
(importlib), so the code hash of a job (plan.jobs.codehash, which follows import statements) does not take
in the API and every module it imports."""

import importlib

__version__ = "0.1.0"

_API = ("Model", "Run", "TaskData", "load_model", "own_prompts")
__all__ = ["__version__", *_API]


def __getattr__(name):
    if name in _API:
        return getattr(importlib.import_module("circuitloc.api"), name)
    raise AttributeError(f"module 'circuitloc' has no attribute {name!r}")
