"""circuitloc: how concentrated are the attention-head circuits of language models?"""

__version__ = "0.1.0"
