"""Uncertainty over prompts (paired bootstrap) and agreement between two sets of unit scores."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr


def bootstrap_weights(n: int, n_boot: int, seed: int) -> np.ndarray:
    """[n_boot, n]: how often each prompt is drawn in each resample, divided by n, so that
    weights @ values is the resample's mean."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    counts = np.zeros((n_boot, n))
    np.add.at(counts, (np.arange(n_boot)[:, None], idx), 1)
    return counts / n


def drop_intervals(clean, ablated, higher_is_better: bool, n_boot: int, seed: int, ci: float = 0.95) -> dict:
    """Percentile intervals of each unit's drop, resampling prompts (the same draw for the clean and
    every ablated run: paired), and how often each unit is the top unit across resamples.
    clean: [N] per-prompt clean metric; ablated: [U, N] per-prompt metric with unit u ablated."""
    clean, ablated = np.asarray(clean, float), np.atleast_2d(np.asarray(ablated, float))
    per_prompt = clean[None, :] - ablated
    if not higher_is_better:
        per_prompt = -per_prompt
    boots = bootstrap_weights(clean.shape[0], n_boot, seed) @ per_prompt.T  # [B, U]
    alpha = (1 - ci) / 2
    top = np.bincount(boots.argmax(axis=1), minlength=ablated.shape[0]) / n_boot
    return {"lo": np.quantile(boots, alpha, axis=0), "hi": np.quantile(boots, 1 - alpha, axis=0), "top_freq": top}


def agreement(a, b, labels, k: int = 5) -> dict:
    """Do two conditions pick the same units? Top unit equal, Spearman of the scores, top-k overlap."""
    a, b, labels = np.asarray(a, float), np.asarray(b, float), np.asarray(labels)
    top_a, top_b = labels[np.argmax(a)], labels[np.argmax(b)]
    k = min(k, len(labels))
    set_a, set_b = set(labels[np.argsort(-a, kind="stable")[:k]]), set(labels[np.argsort(-b, kind="stable")[:k]])
    rho = spearmanr(a, b).statistic if np.std(a) > 0 and np.std(b) > 0 else np.nan
    return {"top_a": str(top_a), "top_b": str(top_b), "same_top": bool(top_a == top_b), "spearman": float(rho),
            f"top{k}_overlap": len(set_a & set_b) / k}
