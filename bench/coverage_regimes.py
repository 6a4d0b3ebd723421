"""Coverage of the damage interval that ships (`intervals.damage_bounds`), case by case: per-prompt
noise normal, skewed, heavy-tailed or Student's t (3 degrees of freedom); span (clean - floor) CV
0.25, 1, 2, 3; 10, 20 and 60 prompts; the shipped 1,000 resamples. docs/method.md quotes this table
verbatim and tests/unit/test_coverage.py checks that it still equals what this code computes.

    python bench/coverage_regimes.py           # print the table
    python bench/coverage_regimes.py --write   # and replace it in docs/method.md

Each synthetic run: span_i = 1 + CV e1_i, drop_i = 0.4 span_i + 0.25 e2_i over N prompts (e1, e2
independent draws of the case's noise, mean 0, variance 1), so the true damage is 0.4. A run
counts only where the conditioning rule admits it (the span's interval, `stats.span_interval`, lies
above 0), as the tables do; coverage is the share of admitted runs with a finite interval whose
interval holds 0.4 (an unbounded interval is no interval, counted apart), and "unflagged runs" the
same share over the runs whose tables carry no note (`intervals.MIN_PROMPTS` prompts or more, prompts
not skewed), and "look unskewed" the same share over the runs whose prompts' skewness (the ratio's
influence and the span) is within +-1 whatever their note: what a run of that size cannot tell apart.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from coverage import noise  # noqa: E402  (after the path insert)

from circuitloc import intervals, stats  # noqa: E402

DISTS = ("normal", "skewed", "heavy", "t3")  # new cases at the end: the others keep their seeds
CVS = (0.25, 1.0, 2.0, 3.0)
PROMPTS = (10, 20, 60)
TRUTH, DROP_NOISE = 0.4, 0.25
REPS, CHUNKS, N_BOOT, SEED = 2000, 4, 1000, 47  # 4 chunks of 500 runs, each chunk its own resamples
LEVEL = 0.93
DOC = ROOT / "docs" / "method.md"
START, END = "<!-- coverage-table:start -->", "<!-- coverage-table:end -->"


def admitted(s: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The conditioning rule of each row of spans s [runs, N]: `stats.mean_intervals(s, w)[0] > 0`
    (`stats.span_interval`'s lower bound above 0, the shipped studentized interval), its quantile of
    the resamples' t taken over every row at once where no t is missing (np.nanquantile goes column
    by column, most of that call's time): the same floats, and where a t is missing the call itself
    (tests/unit/test_coverage.py checks the two agree)."""
    n = s.shape[1]
    est, boots = s.mean(axis=1), w @ s.T
    se = np.sqrt(np.mean((s - est[:, None]) ** 2, axis=1) / n)
    se_boots = np.sqrt(np.maximum(w @ (s ** 2).T - boots ** 2, 0.0) / n)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (boots - est) / se_boots
    if stats.INTERVAL != "studentized" or not np.isfinite(t).all() or not np.isfinite(est).all() \
            or (se <= 1e-12 * np.maximum(1.0, np.abs(est))).any():
        return stats.mean_intervals(s, w)[0] > 0
    a = (1 - 0.95) / 2  # as mean_intervals' ci 0.95 gives it
    return est - np.quantile(t, [a, 1 - a], axis=0)[1] * se > 0


def case(dist: str, cv: float, n: int, reps: int = REPS, n_boot: int = N_BOOT) -> dict:
    """Coverage of one case and how its admitted runs were read (Fieller, unbounded, widened); an
    unbounded interval is no interval: it counts neither as covering nor as missing."""
    rng = np.random.default_rng([SEED, DISTS.index(dist), int(4 * cv), n])
    hit, adm, fieller, unbounded, widened, noted, plain = [], [], [], [], [], [], []
    for _ in range(CHUNKS):
        m = reps // CHUNKS
        s = 1.0 + cv * noise(rng, dist, (m, n))
        d = TRUTH * s + DROP_NOISE * noise(rng, dist, (m, n))
        w = stats.bootstrap_weights(n, n_boot, int(rng.integers(2 ** 31)))
        ok = admitted(s, w)  # the conditioning rule
        lo, hi, method, few = intervals.damage_bounds(d, s, w)
        hit.append(((lo <= TRUTH) & (TRUTH <= hi))[ok])
        adm.append(ok)
        fieller.append((intervals.damage_method(s) == "fieller")[ok])  # before any widening
        unbounded.append(~(np.isfinite(lo) & np.isfinite(hi))[ok])
        widened.append((method == intervals.WIDENED)[ok])
        noted.append(((method == intervals.WIDENED) | few)[ok])  # the runs whose tables carry a note
        g = np.maximum(np.abs(intervals.influence_skew(d, s)), np.abs(intervals.skewness(s)))
        plain.append((g <= intervals.SKEWED)[ok])  # prompts that look unskewed (|skewness| <= 1)
    hit, k = np.concatenate(hit), int(np.concatenate(adm).sum())
    bounded = ~np.concatenate(unbounded)
    quiet = bounded & ~np.concatenate(noted)
    plain = bounded & np.concatenate(plain)

    def share(mask):
        return float(hit[mask].mean()) if mask.any() else float("nan")

    return {"dist": dist, "cv": cv, "n": n, "admitted": k / reps, "coverage": share(bounded),
            "unflagged": share(quiet), "unflagged_share": float(quiet.sum() / max(k, 1)), "unskewed": share(plain),
            "se": float(np.sqrt(LEVEL * (1 - LEVEL) / max(int(bounded.sum()), 1))),
            "fieller": float(np.concatenate(fieller).mean()), "unbounded": float(np.mean(~bounded)),
            "widened": float(np.concatenate(widened).mean())}


def status(r: dict) -> str:
    """How docs/method.md names the case: covered at the level (the runs with a bound, and those
    of them without a note), or where and how it falls short."""
    few = f" (n < {intervals.MIN_PROMPTS})" if r["n"] < intervals.MIN_PROMPTS else ""
    if r["coverage"] < LEVEL:
        return "may under-cover" + few
    if r["unflagged"] < LEVEL:  # NaN (no run without a note) passes
        return "runs without a note under-cover"
    return "covered"


def rows(reps: int = REPS) -> list[dict]:
    return [case(d, cv, n, reps) for d in DISTS for cv in CVS for n in PROMPTS]


def _cov(x: float) -> str:
    return "—" if np.isnan(x) else f"{x:.3f}"


def table(results: list[dict]) -> str:
    """The markdown table docs/method.md quotes."""
    head = ("| noise | span CV | prompts | admitted | Fieller | unbounded | widened | coverage | "
            "unflagged runs | their share | look unskewed | case |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
    body = "".join(f"| {r['dist']} | {r['cv']:g} | {r['n']} | {r['admitted']:.2f} | {r['fieller']:.2f} | "
                   f"{r['unbounded']:.2f} | {r['widened']:.2f} | {_cov(r['coverage'])} | {_cov(r['unflagged'])} | "
                   f"{r['unflagged_share']:.2f} | {_cov(r['unskewed'])} | {status(r)} |\n"
                   for r in results)
    return head + body


def doc_table(text: str) -> str:
    """The table between the markers in docs/method.md."""
    m = re.search(re.escape(START) + r"\n(.*?)" + re.escape(END), text, re.S)
    if not m:
        raise ValueError(f"{DOC}: no coverage table between {START} and {END}")
    return m.group(1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--write", action="store_true", help="replace the table in docs/method.md")
    a = p.parse_args(argv)
    t = table(rows())
    print(t, end="")
    if a.write:
        text = DOC.read_text()
        doc_table(text)
        DOC.write_text(text.replace(START + "\n" + doc_table(text) + END, START + "\n" + t + END))


if __name__ == "__main__":
    main()
