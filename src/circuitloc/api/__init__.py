"""circuitloc from Python (docs/api.md): `Run` (a run config's settings) and its stages — a task's
prompts, per-unit scores, curves and Table 1's row, the ablations you choose (with your own `Metric`), attention patterns and figures — over `load_model`'s models, or your own
prompts (`own_prompts`). The same functions the workflow's jobs call, with the same settings."""

from circuitloc.api.ablate import Metric
from circuitloc.api.model import Model, load_model
from circuitloc.api.own import own_prompts
from circuitloc.api.run import Run, TaskData

__all__ = ["Metric", "Model", "Run", "TaskData", "load_model", "own_prompts"]
