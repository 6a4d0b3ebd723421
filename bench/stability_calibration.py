"""How a sweep verdict's stability (the share of seed resamples that give the same verdict) relates
to its replication (the share of fresh seed sets, drawn from the same truth, that give the same
verdict), on simulated primary families. docs/method.md quotes the table this prints.

    python bench/stability_calibration.py            # print the table
    python bench/stability_calibration.py --write    # and replace it in docs/method.md

Each simulated run is one primary family as the sweep builds it: K comparisons (9: 3 tasks x 3
sizes), each read from n seed pairs by two tests, Holm-adjusted together over the 2K tests:
- top head: per pair, the fewer-KV toy's score minus the MHA toy's, normal with mean `d_top` sd
  and sd 1; the paired t-test;
- heads-to: each toy's count round(N(6, 1.5)), the fewer-KV toy's mean lowered by `d_h` x 1.5,
  kept in 1..16 (ties happen, as on real curves); `stats.paired_censored`'s exact sign-flip test on
  Gehan scores, as the paired tables run it.
The verdict is `verdicts.verdict` and two verdicts agree when their `verdicts.verdict_key`s do
(measure and direction). Each comparison's true effects d_top and d_h are drawn once per run,
uniform on [0, `max_effect`], so a run holds clear, borderline and null comparisons. Stability:
`boot` resamples of the n seeds with replacement, one draw for all K comparisons (as
`stability.overview_stability` does); replication: `fresh` new sets of n seeds from the same truth.
tests/unit/test_sweep_calibration.py checks that these verdicts equal what the paired tables and
overview give on the same numbers.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from circuitloc import seedtests, stats  # noqa: E402  (after the path insert)
from circuitloc.report.sweep.verdicts import verdict, verdict_key  # noqa: E402

K, ALPHA, H_MEAN, H_SD = 9, 0.05, 6.0, 1.5
SEEDS, RUNS, BOOT, FRESH, MAX_EFFECT, SEED = (10, 30), 40, 200, 200, 1.5, 61
BINS = (0.0, 0.5, 0.8, 0.9, 0.95, 1.0001)
DOC = ROOT / "docs" / "method.md"
START, END = "<!-- stability-calibration:start -->", "<!-- stability-calibration:end -->"


def draw(rng, truth: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n seed pairs of every comparison: top head differences [K, n], MHA and fewer-KV heads-to [K, n]."""
    top = rng.normal(truth[:, :1], 1.0, (len(truth), n))
    mha = np.clip(np.rint(rng.normal(H_MEAN, H_SD, (len(truth), n))), 1, 16)
    kv = np.clip(np.rint(rng.normal(H_MEAN - truth[:, 1:] * H_SD, H_SD, (len(truth), n))), 1, 16)
    return top, mha, kv


def heads_to_tests(mha: np.ndarray, kv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`stats.paired_censored(mha, no, kv, no)`'s p and stat (nothing censored) for every row of
    [..., n] arrays at once: Gehan scores over each row's pooled 2n values, their paired differences
    (kv minus mha) and the exact sign-flip p of `seedtests.integer_sign_flip_p`, counted in integers
    as it counts them, so the same floats (test_sweep_calibration checks it against paired_censored)."""
    shape, n = mha.shape[:-1], mha.shape[-1]
    v = np.concatenate([mha, kv], axis=-1).reshape(-1, 2 * n)
    scores = (v[:, None, :] < v[:, :, None]).sum(-1) - (v[:, None, :] > v[:, :, None]).sum(-1)  # below i, minus above i
    d = (scores[:, n:] - scores[:, :n]).astype(np.int64)
    stat = d.sum(axis=1)
    a = np.abs(d)
    assert (np.count_nonzero(a, axis=1) <= seedtests.EXACT_COUNTS).all()  # the counted program's range
    total = a.sum(axis=1)
    p = np.ones(len(a))  # stat 0: p 1
    order = np.argsort(total)
    order = order[stat[order] != 0]
    for rows in np.array_split(order, max(1, len(order) // 128)):  # rows of like sums together: narrow arrays
        if len(rows):
            p[rows] = _counted_p(a[rows], total[rows], np.abs(stat[rows]))
    p = np.where(stat == 0, 1.0, p)
    return p.reshape(shape), stat.astype(float).reshape(shape)


def _counted_p(a: np.ndarray, total: np.ndarray, t: np.ndarray) -> np.ndarray:
    """`seedtests._counted_p` of every row of a ([R, n] nonnegative integers, zeros carrying no sign;
    t > 0): count[r, x], the sign patterns of row r whose '+' pairs sum to x, built pair by pair,
    each row shifted by its own value through a window of a zero-padded copy. The counts are
    symmetric (x and total - x), so the patterns at least as extreme are twice those with
    x <= (total - t) / 2, and only those x are counted: the same integers, so the same p."""
    low = (total - t) // 2  # signed sum 2x - total <= -t
    width, pad = int(low.max()) + 1, int(a.max())
    count = np.zeros((len(a), pad + width), np.int32 if a.shape[1] < 31 else np.int64)  # at most 2^n patterns
    count[:, pad] = 1
    rows = np.arange(len(a))
    reach = np.minimum(np.cumsum(a, axis=1).max(axis=0) + 1, width)  # columns that can be nonzero yet
    for j in range(a.shape[1]):
        w = int(reach[j])
        shifted = np.lib.stride_tricks.sliding_window_view(count[:, :pad + w], w, axis=1)[rows, pad - a[:, j]]
        shifted *= (a[:, j:j + 1] > 0)
        count[:, pad:pad + w] += shifted
    hits = 2 * np.where(np.arange(width)[None, :] <= low[:, None], count[:, pad:], 0).sum(axis=1, dtype=np.int64)
    return np.minimum(1.0, hits / 2.0 ** np.count_nonzero(a, axis=1))


def verdicts_many(top: np.ndarray, mha: np.ndarray, kv: np.ndarray) -> list[list[str]]:
    """`verdicts` of B families at once ([B, K, n] arrays): the tests are computed for every family
    together, Holm and `verdicts.verdict` family by family."""
    import scipy.stats

    n = top.shape[-1]
    sd = top.std(axis=-1, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = top.mean(axis=-1) / (sd / np.sqrt(n))
    p_top = np.where(sd > 0, 2 * scipy.stats.t.sf(np.abs(t), n - 1), np.nan)
    p_h, stat = heads_to_tests(mha, kv)
    direction_top = np.sign(top.mean(axis=-1)).astype(int)
    out = []
    for b in range(len(top)):
        adj = stats.holm(np.r_[p_top[b], p_h[b]])
        keys = []
        for k in range(top.shape[1]):
            row = {"n_pairs": n, "verdict_heads_to": "h", "top_head_pct_family": "primary", "h_family": "primary",
                   "top_head_pct_p_all": adj[k], "h_frac_p_all": adj[top.shape[1] + k],
                   "direction_top_head": int(direction_top[b, k]), "direction_heads_to": int(np.sign(-stat[b, k]))}
            keys.append(_verdict_key(row))
        out.append(keys)
    return out


_KEYS: dict = {}


def _verdict_key(row: dict) -> str:
    """verdict_key(verdict(row, "all", ALPHA)), remembered by what `verdicts.verdict` reads of such a
    row: the seed count, which of the two adjusted p-values are below alpha, and the directions
    (test_sweep_calibration checks it against the call on random rows)."""
    sig = tuple(bool(np.isfinite(row[c]) and row[c] < ALPHA) for c in ("top_head_pct_p_all", "h_frac_p_all"))
    key = (row["n_pairs"] >= 2, sig, row["direction_top_head"], row["direction_heads_to"])
    if key not in _KEYS:
        _KEYS[key] = verdict_key(verdict(row, "all", ALPHA))
    return _KEYS[key]


def verdicts(top: np.ndarray, mha: np.ndarray, kv: np.ndarray) -> list[str]:
    """The K verdict keys of one family: per comparison the paired t-test of the top head and the
    sign-flip test of heads-to, Holm over the 2K tests, `verdicts.verdict`."""
    return verdicts_many(top[None], mha[None], kv[None])[0]


def run(rng, n: int, boot: int, fresh: int, max_effect: float) -> list[tuple[str, float, float]]:
    """(verdict key, stability, replication) of each comparison of one simulated run (the resamples
    and the fresh sets drawn one after another, as one at a time would, then tested together)."""
    truth = rng.uniform(0, max_effect, (K, 2))
    top, mha, kv = draw(rng, truth, n)
    ref = np.array(verdicts(top, mha, kv))
    idx = np.array([rng.integers(0, n, n) for _ in range(boot)])  # one draw of the seeds for every comparison
    stable = (np.array(verdicts_many(*(np.ascontiguousarray(x[:, idx].transpose(1, 0, 2)) for x in (top, mha, kv))))
              == ref).sum(axis=0)
    fresh_sets = [draw(rng, truth, n) for _ in range(fresh)]
    again = (np.array(verdicts_many(*(np.stack([f[j] for f in fresh_sets]) for j in range(3)))) == ref).sum(axis=0)
    return [(str(ref[k]), stable[k] / boot, again[k] / fresh) for k in range(K)]


def table(seeds=SEEDS, runs=RUNS, boot=BOOT, fresh=FRESH, max_effect=MAX_EFFECT, seed=SEED) -> str:
    """The calibration table: per seed count and stability bin, how many verdicts fell there (and how
    many of them were a significant one), their mean stability and mean replication."""
    lines = ["| seeds | stability | verdicts (significant) | mean stability | mean replication | "
             "replication, 10th-90th percentile |", "|---|---|---|---|---|---|"]
    for n in seeds:
        rng = np.random.default_rng([seed, n])
        res = [x for _ in range(runs) for x in run(rng, n, boot, fresh, max_effect)]
        s = np.array([x[1] for x in res])
        r = np.array([x[2] for x in res])
        sig = np.array([x[0] not in ("none", "n/a") for x in res])
        for lo, hi in zip(BINS[:-1], BINS[1:], strict=True):
            m = (s >= lo) & (s < hi)
            if not m.any():
                continue
            q10, q90 = np.quantile(r[m], [0.1, 0.9])
            label = f"[{lo:.2f}, {min(hi, 1):.2f}{']' if hi > 1 else ')'}"
            lines.append(f"| {n} | {label} | {int(m.sum())} ({int(sig[m].sum())}) | {s[m].mean():.2f} | "
                         f"{r[m].mean():.2f} | {q10:.2f}-{q90:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    ap.add_argument("--runs", type=int, default=RUNS)
    ap.add_argument("--boot", type=int, default=BOOT)
    ap.add_argument("--fresh", type=int, default=FRESH)
    ap.add_argument("--write", action="store_true", help=f"replace the table between the markers in {DOC.name}")
    a = ap.parse_args(argv)
    body = table(tuple(a.seeds), a.runs, a.boot, a.fresh)
    print(body)
    if a.write:
        text = DOC.read_text()
        if START not in text or END not in text:
            raise SystemExit(f"{DOC}: markers {START} ... {END} not found")
        DOC.write_text(re.sub(re.escape(START) + r".*?" + re.escape(END), lambda _: f"{START}\n{body}\n{END}", text,
                              flags=re.S))


if __name__ == "__main__":
    main()
