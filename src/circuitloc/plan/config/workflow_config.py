"""The one step that changes the run's config and environment while Snakemake parses the workflow
(`prepare`, called once from the Snakefile); everything the rules read afterwards is a function of
the prepared config (plan.config.views, plan.jobs.targets, plan.jobs.groups, plan.jobs.inputs)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from circuitloc.errors import ConfigError
from circuitloc.plan.vocabulary import catalog as registry
from circuitloc.plan.config.checks import (
    Provenance,
    check_scores,
    check_run_wide_task_keys,
    check_sizes,
    check_stops,
    check_sweep_primary,
    check_task_names,
    put_back_left_out,
    selected_tasks,
    take_left_out,
)
from circuitloc.plan.config.configload import (
    check_unknown_keys,
    cli_values,
    effective_config,
    load_layer,
    load_schema,
    overlay,
    validate,
)
from circuitloc.plan.jobs.groups import check_group_stages
from circuitloc.plan.config.hub import check_model_sources
from circuitloc.plan.config.layers import run_layers
from circuitloc.plan.config.sweep_power import check_sweep_power
from circuitloc.plan.config.sweep_toys import expand as expand_sweep
from circuitloc.plan.config.userfiles import check_user_files

DEFAULT = Path("config") / "config.yaml"
SCHEMA = Path("config") / "schema.yaml"


def with_sweep(models, sweep) -> dict:
    """The configured models plus the sweep's toys (a name may repeat only with the same spec: the
    report re-reads an already expanded config)."""
    models = dict(models or {})
    for name, spec in expand_sweep(sweep).items() if sweep else ():
        if name in models and models[name] != spec:
            raise ConfigError(f"config: models.{name} clashes with a model of the sweep; rename one of them")
        models[name] = spec
    if not models:
        raise ConfigError("config: no models: list some under models: or give a sweep: section")
    return models


def layered(root, given: dict, configfiles=(), overrides=None, as_module=False) -> dict:
    """The embedded default (`root`/config/config.yaml) with the run's layers on top: the config
    files (plan.config.layers.run_layers) then --config k=v; a module whose caller gave a config of its own
    gets that `config:` as its one layer."""
    default = Path(root) / DEFAULT
    if as_module:
        return overlay(load_layer(default), dict(given))
    return effective_config(default, configfiles, overrides)


def register_task_modules(names) -> None:
    """Register the tasks of the modules a config names (task_modules); one that cannot be imported
    or defines no task is an error naming it. A malformed list is left to the schema."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return
    try:
        registry.load_task_modules(names)
    except ImportError as e:
        raise ConfigError(f"config: task_modules: cannot import {e.name or ''!r} ({e})") from None
    except ValueError as e:
        raise ConfigError(f"config: task_modules: {e}") from None


def _ablation_blocks(cfg: dict):
    """(dotted key, ablation block) of the run, of each model and of the sweep's model recipe."""
    yield "ablation", cfg.get("ablation")
    for name, spec in (cfg.get("models") or {}).items():
        yield f"models.{name}.ablation", (spec or {}).get("ablation") if isinstance(spec, dict) else None
    sweep = cfg.get("sweep")
    model = sweep.get("model") if isinstance(sweep, dict) else None
    yield "sweep.model.ablation", model.get("ablation") if isinstance(model, dict) else None


def check_kinds(cfg: dict) -> None:
    """Every ablation kind a config names is a registered kind (built in, or of a module in
    task_modules): one line naming the key, where the rules would otherwise fail with a traceback.
    Run after the schema (kinds is then a list of names)."""
    known = registry.kinds()
    for where, block in _ablation_blocks(cfg):
        for kind in (block or {}).get("kinds") or () if isinstance(block, dict) else ():
            if kind not in known:
                close = difflib.get_close_matches(kind, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(f"config: {where}.kinds: unknown kind {kind!r}{hint}: expected one of "
                                  f"{', '.join(known)} (a kind of your own: its module in task_modules)")


def provenance(root, given: dict, configfiles=(), overrides=None, as_module=False) -> Provenance:
    """Which keys the run's own layers (those `layered` puts on the embedded default) write."""
    layers = [dict(given)] if as_module else [load_layer(p) for p in configfiles or ()]
    if overrides and not as_module:
        layers.append(cli_values(dict(overrides)))
    return Provenance.of(load_layer(Path(root) / DEFAULT), layers)


def resolve(cfg: dict, root, written: Provenance | None = None, missing_ok: bool = False) -> dict:
    """A layered config checked (unknown keys, task names, schema, sizes), with the schema's defaults
    filled in (`written`: which keys the user wrote, for the errors), the tasks a layer removed (`tasks.<name>: null`) left out, those a model leaves out
    (`models.<m>.tasks.<name>: null`) kept as nulls for plan.config.views, the sweep's toys among its
    models and the task modules it names registered. `missing_ok`: a file a job would read may be
    absent (a job's own process, which may see other storage than the run's: the run checked it)."""
    schema = load_schema(Path(root) / SCHEMA)
    if isinstance(cfg.get("tasks"), dict):
        cfg["tasks"] = selected_tasks(cfg["tasks"])
    # before the unknown-key walk: a misspelt task under a model is an unknown task, not a key
    register_task_modules(cfg.get("task_modules", []))
    left_out = take_left_out(cfg.get("models"))
    check_run_wide_task_keys(cfg.get("models"))
    check_unknown_keys(cfg, schema)
    if isinstance(cfg.get("tasks"), dict):
        check_task_names(cfg["tasks"])
    validate(cfg, schema)
    check_kinds(cfg)
    put_back_left_out(cfg, left_out)
    cfg["models"] = with_sweep(cfg.get("models"), cfg.get("sweep"))
    # `hf:` as from_pretrained reads it: a local directory that does not exist is a plan-time error
    # naming models.<name>.hf, not the model job's later
    check_model_sources(cfg["models"])
    check_sizes(cfg, written)  # blaming the key the user wrote
    check_stops(cfg)  # every early stop of a curve at least its threshold, run-wide and per model
    check_scores(cfg)
    check_sweep_primary(cfg)
    check_sweep_power(cfg)  # a primary family that cannot say yes: refused before any toy trains
    check_group_stages(cfg)
    check_user_files(cfg, root, missing_ok)  # every file a job reads that no job writes: there, and well-formed
    return cfg


def as_layer(config: dict, root) -> dict:
    """A resolved config as one layer that resolves to itself again on the embedded default (a
    `snakemake --report` of the same run reads it): the default's tasks this run left out are null."""
    default_tasks = load_layer(Path(root) / DEFAULT).get("tasks", {})
    left_out = {t: None for t in default_tasks if t not in config["tasks"]}
    return {**config, "tasks": {**left_out, **config["tasks"]}}


def prepare(config: dict, workflow, root) -> dict:
    """Replace `config` (Snakemake's, in place) by the run's resolved config, and tell the jobs which
    task modules to load (they inherit the environment). `root`: the checkout holding the Snakefile."""
    files, as_module = run_layers(config, workflow, root)  # read before Snakemake merged them
    layers = (root, config, files, workflow.config_settings.config, as_module)
    cfg = resolve(layered(*layers), root, provenance(*layers), missing_ok=not getattr(workflow, "is_main_process", True))
    config.clear()
    config.update(cfg)
    os.environ[registry.TASK_MODULES_ENV] = ",".join(cfg.get("task_modules", []))
    return config
