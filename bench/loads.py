"""How many times does a run load a model and hash its weights? A dry run, nothing computed:

    python bench/loads.py [--configfile config/paper.yaml] [--config group_ablations=false ...]

Snakemake plans the run (`snakemake -n` in a scratch directory, so no results are needed) and every
planned job is counted by what it does with a model:

- a model job builds the card: it hashes the weights once (models.card.weights_record) and loads none;
- a score, curve, specificity or staged job loads its model once, for every ablation it runs;
- a dataset job loads the model only for a task whose filter needs the model's logits (`--logit-tasks`:
  facts' knowledge filter); IOI and induction read the tokenizer alone.

Weight hashes are counted two ways: `hash_every_load` (each load hashes every weights file again, as
before circuitloc.weightstamps) and `hash_once` (each load reuses the hash the model job stamped; a
model whose weights the model job writes itself, a toy or a GGUF conversion, hashes once more in its
first loading job, since a stamp made in the same moment as the write is not trusted).
Prints one line per model and a total line; `--json` for a machine-readable record.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOADING = re.compile(r"^(scores|curves|specificity|model_stages)(__|$)")
JOB = re.compile(r"^(?:local)?rule (\S+):$")


def planned_jobs(configfile: str, overrides: list[str]) -> list[tuple[str, dict]]:
    """(rule, wildcards) of every job a dry run of `configfile` plans from an empty directory."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--configfile", str(ROOT / configfile),
               "-s", str(ROOT / "Snakefile"), "-d", d]
        if overrides:
            cmd += ["--config", *overrides]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"dry run failed ({' '.join(cmd)}):\n{out.stderr[-3000:]}")
    jobs, rule = [], None
    for line in (out.stdout + out.stderr).splitlines():
        m = JOB.match(line.strip())
        if m:
            rule = m.group(1)
            jobs.append((rule, {}))
        elif rule and line.strip().startswith("wildcards:"):
            jobs[-1][1].update(kv.split("=", 1) for kv in line.split(":", 1)[1].strip().split(", "))
    return jobs


def count(jobs, logit_tasks: set, own_weights: set) -> dict:
    """{model: {jobs, loads, hash_every_load, hash_once}} over the planned jobs."""
    per: dict = {}
    for rule, wc in jobs:
        model = wc.get("model")
        if model is None:
            continue
        c = per.setdefault(model, Counter())
        if rule.startswith("model") and not rule.startswith("model_stages"):
            c["builds"] += 1
            continue
        loads = bool(LOADING.match(rule)) or (rule == "dataset" and wc.get("task") in logit_tasks)
        c["model_jobs"] += 1
        c["loads"] += loads
    out = {}
    for model, c in sorted(per.items()):
        first = 1 if model in own_weights and c["loads"] else 0
        out[model] = {"jobs": c["model_jobs"], "loads": c["loads"], "hash_every_load": c["builds"] + c["loads"],
                      "hash_once": c["builds"] + first}
    return out


def own_weights_models(configfile: str, overrides: list[str]) -> set:
    """Models whose weights the run writes itself (not `source: hf`)."""
    import yaml

    cfg = yaml.safe_load((ROOT / configfile).read_text())
    return {m for m, spec in (cfg.get("models") or {}).items() if (spec or {}).get("source") != "hf"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configfile", default="config/paper.yaml")
    ap.add_argument("--config", nargs="*", default=[], help="KEY=VALUE overrides, as snakemake --config")
    ap.add_argument("--logit-tasks", nargs="*", default=["facts"], help="tasks whose dataset job loads the model")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    per = count(planned_jobs(args.configfile, args.config), set(args.logit_tasks),
                own_weights_models(args.configfile, args.config))
    total = {k: sum(v[k] for v in per.values()) for k in ("jobs", "loads", "hash_every_load", "hash_once")}
    if args.json:
        print(json.dumps({"configfile": args.configfile, "config": args.config, "models": per, "total": total}))
        return 0
    for model, v in [*per.items(), ("total", total)]:
        print(f"{model:>14}: {v['jobs']:4d} jobs of the model, {v['loads']:4d} model loads, weight hashes "
              f"{v['hash_every_load']:4d} (every load hashes) / {v['hash_once']:4d} (hashed once, stamped)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
