"""circuitloc: how concentrated are the attention-head circuits of language models?

The Python API (docs/api.md) is imported on first use (`circuitloc.Run`, ...): `import circuitloc`
itself loads no torch, polars or engine, so the workflow's plan stays light."""

__version__ = "0.1.0"

_API = ("Model", "Run", "TaskData", "load_model", "own_prompts")
__all__ = ["__version__", *_API]


def __getattr__(name):
    if name in _API:
        from circuitloc import api

        return getattr(api, name)
    raise AttributeError(f"module 'circuitloc' has no attribute {name!r}")
