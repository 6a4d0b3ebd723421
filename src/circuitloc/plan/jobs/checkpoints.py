"""The files of a stored toy checkpoint. No heavy imports: the Snakefile names them as inputs."""

from __future__ import annotations

from pathlib import Path

CHECKPOINT_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                    "toy_facts.json", "toy_checks.json")


def checkpoint_files(checkpoint) -> list[str]:
    """Every file of a stored toy, so that editing one rebuilds the model."""
    return [str(Path(checkpoint) / f) for f in CHECKPOINT_FILES]
