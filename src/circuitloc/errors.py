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
