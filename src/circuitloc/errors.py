"""Errors a user can act on. Each message names the model, field or file and what to do."""


class CircuitlocError(Exception):
    """Base class: the pipeline prints these without a traceback's noise."""


class ConfigError(CircuitlocError):
    pass


class ModelSourceError(CircuitlocError):
    pass


class DatasetError(CircuitlocError):
    pass


class ToyTrainingError(CircuitlocError):
    pass


class UnsupportedArchitectureError(CircuitlocError):
    """The scan engine does not know how to ablate or resume this architecture."""


class EngineMismatchError(UnsupportedArchitectureError):
    """The engine's self-check found its logits differ from a plain forward of the model."""


class NonFiniteError(CircuitlocError):
    """NaN or inf in logits or metrics: never written to an artifact."""


class ArtifactError(CircuitlocError):
    """An input artifact (parquet, JSON) that is unreadable, truncated, or not what the stage expects."""
