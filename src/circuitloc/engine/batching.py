"""How the scan engine cuts its work into forward passes, and how full those passes are.

A pass runs stacked copies of one group of prompts (`Prompts.buckets`), one copy per ablation set,
resumed at the first layer any of its sets ablates. By default a group holds prompts of one length
and a pass holds sets that resume at one layer, so that no set pays for an earlier start and no
prompt for padding: exact to the bit, but on a large device many passes are a few copies of a few
dozen tokens. `fill` (the scanner's; on by default off the CPU: engine.select) pads prompts of
different lengths into one group and lets a pass take sets of later start layers once those of its
own are used up, until the token budget (within a few layers: `slack`): fewer, fuller passes, the
same numbers within float rounding (tests/unit/test_batch_fill.py). `fill_line` is what a job logs of it."""

from __future__ import annotations


def chunks(starts: list[int], copies_max: int, fill: bool = False, n_layers: int = 0):
    """(set indices, the layer they resume at) of every pass over one prompt group, `starts` being
    each set's first ablated layer. Unfilled: the sets of each start layer, earliest first, in
    passes of at most `copies_max`. Filled: every set in order of its start, a pass taking sets of
    later start layers while it has room and they start at most `slack` layers after it (an
    eighth of the layers it runs, at least one, of `n_layers`): a set pays for at most that many
    layers before its own, so a pass of a large budget does not give up the resume."""
    order = sorted(range(len(starts)), key=lambda i: (starts[i], i))
    if fill:
        run: list[int] = []
        for i in order:
            first = starts[run[0]] if run else starts[i]
            if run and (len(run) == copies_max or starts[i] - first > slack(first, n_layers)):
                yield run, first
                run = []
            run.append(i)
        if run:
            yield run, starts[run[0]]
        return
    by_start: dict[int, list[int]] = {}
    for i in order:
        by_start.setdefault(starts[i], []).append(i)
    for start, group in by_start.items():
        for c0 in range(0, len(group), copies_max):
            yield group[c0 : c0 + copies_max], start


def slack(start: int, n_layers: int) -> int:
    """How many layers after a filled pass's start its sets may start: an eighth of the layers it
    runs, at least one."""
    return max(1, (n_layers - start) // 8)


def count(scanner, copies: int, tokens: int) -> None:
    """Record one pass of `copies` stacked copies of a `tokens`-token group (padding included)."""
    scanner.passes = getattr(scanner, "passes", 0) + 1
    scanner.pass_tokens = getattr(scanner, "pass_tokens", 0) + copies * tokens


def fill_line(scanner) -> str:
    """'batch fill: 14 passes, 3,120 tokens a pass on average, 76% of the budget of 4,096 (buckets
    padded and start layers merged)': how full the job's passes were."""
    passes = getattr(scanner, "passes", 0)
    if not passes:
        return "batch fill: no ablated pass"
    per = scanner.pass_tokens / passes
    budget = scanner.max_batch_tokens
    how = "buckets padded and start layers merged" if getattr(scanner, "fill", False) else \
        "exact-length buckets, one start layer a pass"
    return (f"batch fill: {passes:,} passes, {per:,.0f} tokens a pass on average, {100 * per / budget:.0f}% of "
            f"the budget of {budget:,} ({how})")
