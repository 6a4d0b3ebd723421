"""The controlled experiment's plan: a `sweep:` config block expands into ordinary toy models that
differ only in their number of key/value heads, trained with one recipe over several seeds and
sizes (every stage treats them like any other model). Read while the workflow is planned, so
standard library only; what the seeds say together is circuitloc.report.sweep.summary."""

from __future__ import annotations

from circuitloc.errors import ConfigError

META = "sweep"  # the key under which an expanded model carries its (size, kv_heads, seed)


def model_name(prefix: str, size: str, kv: int, seed: int) -> str:
    return f"{prefix}_{size}_kv{kv}_s{seed}"


# Per-size keys that are not architecture fields.
SIZE_KEYS = ("kv_heads", "match_params")


def kv_params(d_model: int, n_heads: int, n_kv_heads: int) -> int:
    """Key and value projection parameters of one toy layer (Qwen2: weights and biases)."""
    d_head = d_model // n_heads
    return 2 * n_kv_heads * d_head * (d_model + 1)


def matched_d_mlp(arch: dict, kv: int) -> int:
    """The MLP width that gives back what fewer KV heads take away: a gated MLP has 3 d_model
    parameters per unit of width, so KV 1 of 8 at d_model 128 (d_head 32) gets +64.5 -> +64
    units per layer. Rounding leaves at most 1.5 d_model parameters per layer."""
    d_model, heads = int(arch["d_model"]), int(arch["n_heads"])
    removed = kv_params(d_model, heads, heads) - kv_params(d_model, heads, kv)
    return int(arch["d_mlp"]) + round(removed / (3 * d_model))


def expand(sweep: dict) -> dict:
    """{model name: model spec}: one toy per size x KV-head count x seed. The recipe is shared; a
    size sets only architecture fields; a model differs from its siblings only in n_kv_heads, seed
    and its size's fields. Models of one size and seed form a family (the controlled set).

    A size may name its own `kv_heads` (for example 4, 2, 1 for 4 query heads of width 32) and
    `match_params: true`: then each model's MLP is widened by what its fewer KV heads removed
    (`matched_d_mlp`), so attention type is separated from parameter count.

    A toy whose spec equals one already expanded (a match_params size's MHA toy is its plain
    twin's: nothing is taken away, so nothing is given back) is trained and scored once: the first
    model stands for both cells, its meta listing the other sizes under `also`
    (`report.sweep.summary.per_model` gives it a row in each)."""
    prefix = sweep.get("prefix", "sweep")
    recipe = dict(sweep["recipe"])
    for key in ("n_kv_heads", "seed"):
        if key in recipe:
            raise ConfigError(f"sweep.recipe.{key}: set by the sweep itself (sweep.kv_heads / sweep.seeds)")
    extra = dict(sweep.get("model", {}))  # model-level keys for every sweep model (tasks, curves, ablation)
    out, built = {}, {}  # built: a toy's spec (as text) -> the model that trains it
    for size, arch in sweep["sizes"].items():
        toy = {**recipe, **{k: v for k, v in arch.items() if k not in SIZE_KEYS}}
        heads = int(toy.get("n_heads", 8))
        kv_list = arch.get("kv_heads", sweep["kv_heads"])
        field = f"sweep.sizes.{size}.kv_heads" if "kv_heads" in arch else "sweep.kv_heads"
        if max(int(k) for k in kv_list) != heads:
            raise ConfigError(f"{field}: {list(kv_list)} has no MHA model (n_kv_heads = n_heads = {heads}), "
                              f"which the paired comparisons of size {size!r} need")
        for kv in kv_list:
            if heads % int(kv):
                raise ConfigError(f"{field}: {kv} does not divide n_heads = {heads} (size {size!r})")
            shape = dict(toy)
            if arch.get("match_params"):
                for key in ("d_model", "d_mlp"):
                    if key not in shape:
                        raise ConfigError(f"sweep.sizes.{size}: match_params needs {key} in the size or the recipe")
                shape["d_mlp"] = matched_d_mlp({**shape, "n_heads": heads}, int(kv))
            for seed in sweep["seeds"]:
                toy_spec = {**shape, "n_kv_heads": int(kv), "seed": int(seed)}
                key = repr(sorted(toy_spec.items()))
                if key in built:
                    out[built[key]][META].setdefault("also", []).append(size)
                    continue
                name = built[key] = model_name(prefix, size, int(kv), int(seed))
                out[name] = {
                    **extra, "source": "toy", "family": f"{prefix}_{size}_s{seed}",
                    "toy": toy_spec, META: {"size": size, "kv_heads": int(kv), "seed": int(seed)}}
    return out


def figure_sample(models: dict, names: list, max_models: int) -> list:
    """Which of `names` (models of one figure, in config order) get a panel when a figure may show
    at most `max_models`: every model that is not from a sweep, then sweep toys lowest seed first
    (within a seed, in `names` order, which is the sweep's size x KV order), until `max_models`. The
    chosen keep their `names` order. Deterministic, and with one toy per (size, KV) cell before any
    cell gets a second, where max_models allows."""
    if max_models < 1:
        raise ConfigError(f"figures.max_models: must be at least 1, got {max_models}")
    if len(names) <= max_models:
        return list(names)
    rank = {n: (0, 0, i) if META not in models[n] else (1, int(models[n][META]["seed"]), i)
            for i, n in enumerate(names)}
    chosen = set(sorted(names, key=rank.__getitem__)[:max_models])
    return [n for n in names if n in chosen]
