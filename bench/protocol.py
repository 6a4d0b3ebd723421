"""What one model's score and curve jobs cost, stage by stage, today and under each saving, and
whether the savings change a number. Not a test: it prints a table.

    .venv/bin/python bench/protocol.py --quick                      # minutes: short curves, few prompts
    .venv/bin/python bench/protocol.py                              # the paper's curve settings, n_curve 100
    .venv/bin/python bench/protocol.py --card results/models/smollm2_135m/card.json --tasks ioi
    .venv/bin/python bench/protocol.py --device cuda --dtype bfloat16 --batch-tokens auto   # on a GPU, as a job there

Stages: scan (every unit alone on the scoring prompts, the score job), ranked curve, greedy
selection (the candidates, on the scoring prompts), greedy reported steps (on the curve prompts),
sufficiency, control. Specificity is left out (it needs every task's data and the neutral text; a
few passes). Each stage's cost is in forward-pass equivalents (engine `Scanner.forward_passes`:
one full forward over that stage's prompts; resumed layers count their share) and seconds; the
total converts the scoring prompts' passes to curve-prompt passes by their token counts.

Variants are settings overrides (`VARIANTS`): `today` (every set from the clean stream),
`resume` (engine.incremental), `resume+stop` (and the ranked curve's early stop, config/paper.yaml's).
`guided` (and guided greedy: `greedy_guided` candidates run exactly per step, chosen by
attribution, `greedy_audit` the share of steps whose whole pool also runs; config/paper.yaml's). Each variant's numbers are compared with today's: ranked curve
values on common steps, heads-to-80% (ranked and greedy), curve area (`area_diff`: a ranked curve
stopped early holds its last damage to the end, docs/method.md, so where the full curve falls back
below damage 1 after the stop its area is larger than today's), greedy choices, sufficiency and
control values.

`--device` runs it where the jobs run (`models.load.load_engine` on that device, with the attention
kernel a job gets there; `--batch-tokens auto` sizes the budget to the device as a job's `auto`
does, engine.budget); seconds are taken after the device has finished its queued work. `main(argv)`
returns what it printed: tests/models/test_bench_commands.py runs it on the CPU with a tiny model.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np
import torch

from circuitloc import metrics
from circuitloc.engine import ablation, greedy
from circuitloc.engine.job import AblationJob, read_ranked
from circuitloc.engine.settings import OPTIONAL, CurveSettings, JobSettings
from circuitloc.engine.sufficiency import sufficiency_curve
from circuitloc.modelcard import ModelCard
from circuitloc.models.load import load_engine
from circuitloc.tasks.common import curve_rows

PAPER = {"max_steps": 200, "greedy_candidates": 40, "greedy_steps": 60, "control_draws": 20, "n_curve": 100}
QUICK = {"max_steps": 20, "greedy_candidates": 5, "greedy_steps": 4, "control_draws": 3, "n_curve": 10}
VARIANTS = {
    "today": {"incremental": False},
    "resume": {"incremental": True},
    "resume+stop": {"incremental": True, "ranked_stop_damage": 1.0, "ranked_stop_patience": 5},
    "guided": {"incremental": True, "ranked_stop_damage": 1.0, "ranked_stop_patience": 5,
               "greedy_guided": 8, "greedy_audit": 0.25},  # guided greedy as config/paper.yaml sets it
}
STAGES = ("scan", "ranked", "greedy_select", "greedy_report", "sufficiency", "control")


def _sync():
    """Wait for the GPU's queued work, so that seconds are the device's, not the launches'."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class Timed:
    """A probe whose `extend` calls are timed (greedy's selection and reported steps apart)."""

    def __init__(self, probe):
        self.probe, self.task, self.seconds = probe, probe.task, 0.0

    def extend(self, chosen, additions):
        _sync()
        t = time.perf_counter()
        out = self.probe.extend(chosen, additions)
        _sync()
        self.seconds += time.perf_counter() - t
        return out

    def __getattr__(self, name):
        return getattr(self.probe, name)


def _passes(scanner, fn):
    """(result, forward passes, seconds) of fn() on `scanner`."""
    _sync()
    scanner.forward_passes, t = 0.0, time.perf_counter()
    out = fn()
    _sync()
    return out, scanner.forward_passes, time.perf_counter() - t


def scan(job: JobSettings, data, loaded, scores: Path | None):
    """The score job's scan: (ranked units, stage cost, job) on the scoring prompts; with `scores`
    (the run's scores table) the ranking is read from it and the scan is not run (cost NaN: the
    same in every variant, since no change here touches it)."""
    aj = AblationJob(job, data, "zero-query", loaded=loaded, self_check=False)
    by_label = {u.label: u for u in aj.units}
    if scores is not None:
        return [by_label[u] for u in read_ranked(scores)["unit"]], (float("nan"), float("nan")), aj
    floor = aj.floor_per_prompt()
    (df, _), fp, sec = _passes(aj.scanner, lambda: ablation.score_units(aj.probe, aj.units, floor))
    return [by_label[u] for u in ablation.rank(df)["unit"]], (fp, sec), aj


def curves(job, data, ranked, loaded, over: dict):
    """One variant's curve job: ({stage: (passes, seconds)}, what it reports)."""
    cfg = job.curves
    full = data
    rows = curve_rows(full["score"].to_numpy(), cfg["n_curve"], "all")
    aj = AblationJob(job, full, "zero-query", rows=rows, loaded=loaded, self_check=False)
    sel = AblationJob(job, full, "zero-query", loaded=loaded, self_check=False)
    for sc in (aj.scanner, sel.scanner):
        sc.incremental = over["incremental"]
    floor_pp, clean_pp = aj.floor_per_prompt(), aj.clean_per_prompt()
    clean, floor = float(clean_pp.mean()), float(floor_pp.mean())
    cost, out = {}, {}
    # the variant's curve keys over the bench's, every other key at its default (CurveSettings)
    settings = CurveSettings.of({"methods": ["ranked", "greedy"], "prompts": "all", **cfg, "greedy_stop_damage": 1.0,
                                 **{k: v for k, v in over.items() if k in OPTIONAL}})
    plan = settings.ranked(len(ranked))
    out["ranked"], *cost["ranked"] = _passes(aj.scanner, lambda: ablation.ranked_curve(
        aj.probe, ranked, ablation.Baseline(clean, floor_pp, clean_pp), plan))
    gplan = settings.greedy("greedy curve")
    rep, chooser = Timed(aj.probe), Timed(sel.probe)
    aj.scanner.forward_passes = sel.scanner.forward_passes = 0.0
    out["greedy"] = greedy.greedy_curve(rep, ranked, ablation.Baseline(clean, floor), gplan,
                                        select=(chooser, float(sel.clean_per_prompt().mean())))
    cost["greedy_report"] = (aj.scanner.forward_passes, rep.seconds)
    cost["greedy_select"] = (sel.scanner.forward_passes * _tokens(sel) / _tokens(aj), chooser.seconds)
    out["sufficiency"], *cost["sufficiency"] = _passes(aj.scanner, lambda: sufficiency_curve(aj.probe, ranked))
    pool = ablation.control_pool(aj.units, job.card.n_layers, exclude=[ranked[0].label])
    ctrl, *cost["control"] = _passes(aj.scanner, lambda: ablation.random_control(
        aj.probe, pool, clean, cfg["control_draws"], job.seed))
    out["control"] = ctrl[aj.task.metric_name].to_list()
    out["n_units"] = len(aj.units)
    return cost, out


def _tokens(aj) -> int:
    return int(aj.prompts.input_ids.numel())


def summary(out: dict, threshold: float = 0.8) -> dict:
    d = np.array([r["damage"] for r in out["ranked"]])
    g = np.array([r["damage"] for r in out["greedy"]])
    return {"heads_to": metrics.HeadsTo.of_curve(d, threshold, out["n_units"]).label(),
            "heads_to_greedy": metrics.HeadsTo.of_curve(g, threshold, out["n_units"]).label(),
            "area": metrics.curve_area(d, out["n_units"]), "steps": len(d)}


def audit(out: dict) -> str:
    """The guided greedy's audit in one line: on how many audited steps attribution's choice equals the
    exact choice over the whole pool, and the largest damage it would have given up."""
    rows = [r for r in out["greedy"] if r.get("audited")]
    guided = sum(r.get("chosen_by") == greedy.GUIDED for r in out["greedy"])
    if not rows:
        return f"{guided} of {len(out['greedy'])} steps chosen by attribution; no audited steps"
    gaps = [r["audit_gap"] for r in rows]
    agree = sum(bool(r["audit_agrees"]) for r in rows)
    return (f"{guided} of {len(out['greedy'])} steps chosen by attribution; {agree} of {len(rows)} audited "
            f"steps agree (attribution's pick = the exact best of the pool); largest damage gap "
            f"{max(gaps):.2e}, mean {float(np.mean(gaps)):.2e}")


def _diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, float) - np.asarray(b, float)))) if len(a) else 0.0


def compare(out: dict, ref: dict, metric: str) -> dict:
    """Largest differences from today's numbers, and whether the discrete ones are equal."""
    n = min(len(out["ranked"]), len(ref["ranked"]))
    return {"ranked_max_diff": _diff([r[metric] for r in out["ranked"][:n]], [r[metric] for r in ref["ranked"][:n]]),
            "greedy_same_choices": [r["unit"] for r in out["greedy"]] == [r["unit"] for r in ref["greedy"]],
            "greedy_max_diff": _diff([r[metric] for r in out["greedy"]], [r[metric] for r in ref["greedy"]])
            if len(out["greedy"]) == len(ref["greedy"]) else float("nan"),
            "sufficiency_max_diff": _diff([r[metric] for r in out["sufficiency"]], [r[metric] for r in ref["sufficiency"]]),
            "control_max_diff": _diff(out["control"], ref["control"]),
            "area_diff": summary(out)["area"] - summary(ref)["area"]}


def print_task(task: str, scan_cost, results: dict, metric: str) -> dict:
    names = list(results)
    print(f"\n## {task}: forward-pass equivalents (curve prompts; scan: scoring prompts) and seconds")
    print(f"{'stage':15s}" + "".join(f"{n:>24s}" for n in names))
    for stage in STAGES:
        cells = [scan_cost if stage == "scan" else results[n][0][stage] for n in names]
        print(f"{stage:15s}" + "".join(f"{fp:>14.1f} {sec:>7.1f}s " for fp, sec in cells))
    tot = [sum(results[n][0][s][i] for s in STAGES[1:]) for n in names for i in (0, 1)]
    print(f"{'curve job':15s}" + "".join(f"{tot[2 * i]:>14.1f} {tot[2 * i + 1]:>7.1f}s " for i in range(len(names))))
    base = tot[0]
    print(f"{'x fewer passes':15s}" + "".join(f"{base / tot[2 * i]:>23.2f}x" for i in range(len(names))))
    ref = results[names[0]][1]
    shown = {}
    for n in names:
        s = summary(results[n][1])
        c = compare(results[n][1], ref, metric)
        shown[n] = {"cost": results[n][0], "summary": s, "vs_first": c, "total_passes": tot[2 * names.index(n)]}
        print(f"{n}: {s} | vs {names[0]}: " + ", ".join(f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}"
                                                         for k, v in c.items()))
        if "greedy_guided" in VARIANTS.get(n, {}):
            shown[n]["audit"] = audit(results[n][1])
            print(f"{n} audit: {shown[n]['audit']}")
    return shown


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--card", default="results/models/smollm2_135m/card.json")
    ap.add_argument("--data", default="results/data", help="the run's results/data")
    ap.add_argument("--tasks", nargs="+", default=["ioi", "induction"])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS))
    ap.add_argument("--quick", action="store_true", help=f"short settings {QUICK}")
    ap.add_argument("--n-curve", type=int, default=None)
    ap.add_argument("--batch-tokens", default="4096", help="max_batch_tokens: a number, or auto (as a job: "
                    "sized to the device's free memory on a GPU)")
    ap.add_argument("--device", default="cpu", help="where the model runs (cpu, cuda, cuda:1, ...)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], help="load in this dtype (default: the card's)")
    ap.add_argument("--greedy-guided", type=int, default=None, help="the guided variant's exact candidates per step "
                    "(default: config/paper.yaml's 8)")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch threads (a busy machine: 1)")
    ap.add_argument("--scan", action="store_true", help="run the scan (else the ranking is read from the run's "
                    "scores table beside --data, and the scan's row is blank)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    card_path = Path(args.card).resolve()
    card = ModelCard.read(card_path)
    if not Path(card.path).is_absolute():  # a card's paths are relative to its run's directory
        card = dataclasses.replace(card, path=str(card_path.parents[3] / card.path))
    if args.dtype:
        card = dataclasses.replace(card, dtype=args.dtype)
    cfg = {**(QUICK if args.quick else PAPER)}
    cfg["n_curve"] = args.n_curve or cfg["n_curve"]
    batch_tokens = args.batch_tokens if args.batch_tokens == "auto" else int(args.batch_tokens)
    print(f"# bench/protocol.py: {card.name} ({card.dtype}) on {args.device}, {'quick' if args.quick else 'paper'} "
          f"settings {cfg}, {torch.get_num_threads()} threads")
    loaded = load_engine(card, args.device)
    import polars as pl

    shown = {}
    for task in args.tasks:
        data = pl.read_parquet(Path(args.data) / task / f"{card.name}.parquet")
        job = JobSettings(card=card, batch_tokens=batch_tokens, task=task, device=args.device, seed=0)
        job = dataclasses.replace(job, curves=cfg)  # the bench reads its own dict, not CurveSettings
        torch.manual_seed(0)
        stored = Path(args.data).parent / "scores" / task / card.name / "zero-query.parquet"
        ranked, scan_cost, aj = scan(job, data, loaded, None if args.scan else stored)
        results = {}
        for name in args.variants:
            over = VARIANTS[name]
            if args.greedy_guided is not None and "greedy_guided" in over:
                over = {**over, "greedy_guided": args.greedy_guided}
            torch.manual_seed(0)
            results[name] = curves(job, data, ranked, loaded, over)
            cost = results[name][0]  # each variant as it ends, so a run cut short keeps what it measured
            print(f"({task} {name}: done; " + ", ".join(f"{s} {fp:.1f} fp {sec:.0f}s" for s, (fp, sec) in cost.items())
                  + f"; {summary(results[name][1])})", flush=True)
        shown[task] = print_task(task, scan_cost, results, aj.task.metric_name)
    return shown


if __name__ == "__main__":
    main()
