"""A run's config layers as the user wrote them, read before Snakemake merged them.

Snakemake merges config files key by key: a module caller's `configfile:` and every `--configfile`
end up as one `config` whose `models:` hold the models of all of them. circuitloc's rule (a layer
with its own `models:` replaces the models below it, plan.configload.overlay) needs the layers
themselves; `run_layers` finds them, so the checkout, a module caller and the snakedeploy layout
plan the same jobs from the same `--configfile`."""

from __future__ import annotations

import os
from pathlib import Path

from circuitloc.plan.config.configload import load_layer, merge

# The working directory's config, as the Snakemake workflow template reads it (`configfile:
# "config/config.yaml"` relative to the working directory): `--directory .test` plans .test's config.
WORKDIR_CONFIG = Path("config") / "config.yaml"


def workdir_config(root) -> list[str]:
    """[config/config.yaml] of the working directory when it is not the checkout's own (which is the
    embedded default) and exists, else []."""
    here = WORKDIR_CONFIG
    if not here.is_file() or (Path(root) / WORKDIR_CONFIG).resolve() == here.resolve():
        return []
    return [str(here)]


def snakemake_merge(files, settings) -> dict:
    """The config Snakemake builds from `files` (a caller's `configfile:` lines) and the command
    line's layers (`settings`: its ConfigSettings, whose overwrite_config holds every --configfile
    and --config merged), as its `configfile` directive does (key by key, as configload.merge)."""
    merged = {}
    for f in files:
        merged = merge(merged, load_layer(f))
    if settings.overwrite_config:
        if settings.replace_workflow_config:  # --replace-workflow-config: the caller's files dropped
            merged = {}
        merged = merge(merged, dict(settings.overwrite_config))
    return merged


def caller_files(given: dict, workflow) -> list[str] | None:
    """A module caller's own config files (its `configfile:` lines, in order) when `given` (the
    module's `config:`) is exactly what Snakemake merged from them and the command line: each is then
    a layer of its own. None when the caller gave anything else (a dict of its own, or a config it
    changed in code): `given` is then one layer."""
    cli = list(workflow.overwrite_configfiles or ())
    own = [str(f) for f in list(workflow.configfiles)[len(cli):] if os.path.exists(f)]
    settings = workflow.config_settings
    if settings.replace_workflow_config and settings.overwrite_config:
        own = []
    return own if snakemake_merge(own, settings) == given else None


def run_layers(given: dict, workflow, root) -> tuple[list[str], bool]:
    """(config files on top of the embedded default, in order; whether `given` is the module's one
    layer instead). From the checkout: the working directory's config/config.yaml (`workdir_config`),
    then every --configfile. As a module: the caller's `configfile:` files, then every --configfile,
    where Snakemake merged exactly those into `given`."""
    cli = [str(f) for f in workflow.overwrite_configfiles or ()]
    if workflow.modifier.is_main_snakefile():
        return workdir_config(root) + cli, False
    own = caller_files(given, workflow)
    if own is None:
        return [], True
    return own + cli, False
