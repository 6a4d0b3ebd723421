"""An ablation kind defined outside circuitloc, through the kind interface and the vocabulary only:
the test suite's proof that adding a kind needs no edit of the engine, the rules or the tables.
'pooled': an ablated head outputs its mean over every position of the whole task set, whatever
the prompt's alignment (mean ablation with no aligned groups)."""

from __future__ import annotations

from circuitloc.plan.vocabulary.vocab import KindSpec

KIND = KindSpec("pooled", f"{__name__}:pooled_mean")


def pooled_mean(ctx):
    """(replacement, share aligned): one [H, Dh] mean per layer, so no prompt's replacement is aligned."""
    # imported here: the Snakefile imports this module for the kind's name, and the plan loads no torch
    from circuitloc.engine.replacement import mean_replacement

    return mean_replacement(ctx.scanner, ctx.prompts), 0.0
