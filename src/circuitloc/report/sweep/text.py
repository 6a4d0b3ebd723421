"""The sweep's sentences, written from its overview table rather than typed: the README's sweep
paragraph and docs/sweep.md's table of primary verdicts, each between its markers, under a note
naming the run (which commit, from a fresh clone, on which machine).

    python -m circuitloc.report.sweep.text RESULTS_DIR README.md docs/sweep.md --note "Measured on ..."

Counts are of comparisons, not tests (a verdict reads two tests); significance, not direction, is
what a count of "differences" counts; every percentage is quoted with its clean baseline.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import polars as pl

from circuitloc.atomic import write_text
from circuitloc.errors import ArtifactError
from circuitloc.report.sweep.verdicts import verdict_class, verdict_key

SECTIONS = {"README": "sweep_summary", "docs": "sweep_primary"}
WORDS = {"yes": "yes (fewer KV heads more concentrated on both measures)",
         "no": "no (less concentrated on both measures)", "none": "no clear difference", "n/a": "no verdict"}
"""Verdicts without a measure and direction to name; `words` writes partial and mixed ones."""


def words(verdict: str | None) -> str:
    """A verdict in words with its measure and direction (`verdict_key`): a 'partial' on the top head
    saying less concentrated is not one on heads-to saying more."""
    cls, key = verdict_class(verdict), verdict_key(verdict)
    if cls == "partial":  # 'partial (top head, less)'
        measure, way = key.removeprefix("partial (").removesuffix(")").split(", ")
        return f"partial ({measure} significant: fewer-KV {way} concentrated)"
    if cls == "mixed":  # 'mixed (top head more, heads-to less)'
        return f"mixed (both significant: {key.removeprefix('mixed (').removesuffix(')')} concentrated for fewer-KV)"
    return WORDS[cls]


def primary(ov: pl.DataFrame) -> pl.DataFrame:
    """The overview's rows whose verdict is read from two primary tests."""
    return ov.filter(pl.col("verdict_family") == "primary")


def _p(v) -> str:
    return "–" if v is None or v != v else f"{v:.2g}"


def _stab(v) -> str:
    return "–" if v is None or v != v else f"{v:.2f}"


def _mde(r: dict) -> str:
    """A comparison's minimum detectable effect (report.sweep.mde): the top head's in sd of the pairs'
    differences (and in points), the heads-to's as untied pairs that must point one way."""
    sd, pct, k, m = (r.get(c) for c in ("mde_top_head_sd", "mde_top_head_pct", "mde_heads_to_concordant",
                                        "heads_to_untied_pairs"))
    top = "–" if sd is None or sd != sd else f"{sd:.2g} sd" + ("" if pct is None or pct != pct else f" ({pct:.0f})")
    if m is None:
        return f"{top}; –"
    return f"{top}; " + (f"{k} of {m} untied" if k is not None else f"unreachable ({m} untied)")


def _measure(rows: list) -> str:
    """The heads-to measure the verdicts read, e.g. 'greedy heads-to-80%' (the run's threshold)."""
    cols = sorted({r.get("verdict_heads_to") or "" for r in rows} - {""})
    words = [("greedy " if c.endswith("_greedy") else "") + "heads-to-"
             + c.removeprefix("heads_to_").removesuffix("_greedy").replace("_", ".") + "%" for c in cols]
    return " / ".join(words) or "heads-to"


def table(ov: pl.DataFrame) -> str:
    """docs/sweep.md's table: one primary comparison a row, each percentage beside its clean metric."""
    rows = []
    for r in primary(ov).iter_rows(named=True):
        h = r.get("verdict_heads_to") or ""  # the run's heads-to measure (its threshold is in the name)
        rows.append(
            f"| {r['task']} | {r['size']} (KV {r['kv_heads']} vs {r['vs_kv_heads']}) | {r['clean_metric']} "
            f"{r['mha_clean']:.3g} / {r['clean']:.3g} | {r['mha_top_head_pct']:.0f} → {r['top_head_pct']:.0f} | "
            f"{r['top_head_pct_diff']:+.0f} [{r['top_head_pct_diff_lo']:.0f}, {r['top_head_pct_diff_hi']:.0f}] | "
            f"{_p(r['top_head_pct_p'])} / {_p(r['top_head_pct_p_all'])} | {r.get(h + '_wins')} / "
            f"{r.get(h + '_losses')} ({r['n_pairs']}) | {_p(r.get(h + '_frac_p'))} / {_p(r.get(h + '_frac_p_all'))} | "
            f"{words(r['verdict_all'])} | {_stab(r.get('verdict_all_stability'))} | {_mde(r)} | "
            f"{r.get('holds_under') or ''} |")
    head = ("| task | size | clean metric: MHA / fewer-KV | top head, % of (clean − floor): MHA → fewer-KV | difference [95% CI] "
            f"| p raw / Holm | {_measure(list(primary(ov).iter_rows(named=True)))}: fewer-KV needs fewer / more (pairs) "
            "| p raw / Holm | verdict | share of seed resamples giving it | minimum detectable effect (80% power): "
            "top head; heads-to | same verdict under |\n|" + "---|" * 12)
    return "\n".join([head, *rows])


def paragraph(ov: pl.DataFrame, alpha: float = 0.05) -> str:
    """The README's sweep paragraph: the primary verdicts counted as comparisons, the unstable ones
    named, and CPR's significant differences counted by sign."""
    rows = list(primary(ov).iter_rows(named=True))
    if not rows:
        raise ArtifactError("sweep overview: no primary comparison (verdict_family primary); nothing to quote")
    n_tests = int(ov["n_tests_primary_all"][0])
    classes = [verdict_class(r["verdict_all"]) for r in rows]
    named = [f"{r['task']} at {r['size']}: {words(r['verdict_all'])}" + (f", in {r['verdict_all_stability']:.0%} of "
             "seed resamples" if r.get("verdict_all_stability") is not None else "")
             for r, c in zip(rows, classes, strict=True) if c not in ("none", "n/a")]
    yes = classes.count("yes")
    reach = [r for r in rows if r.get("yes_reachable")]
    cpr = [r for r in rows if r.get("cpr_p_all") is not None and r["cpr_p_all"] < alpha]
    lower = sum(1 for r in cpr if (r.get("cpr_diff") or 0) < 0)
    text = (f"Of its {len(rows)} primary comparisons (each verdict reads two tests, the top head score and "
            f"{_measure(rows)} under zero ablation of query heads: {n_tests} tests, Holm-corrected together), {yes} "
            f"of {len(rows)} say \"fewer KV heads more concentrated: yes\". "
            + ("The others with a verdict: " + "; ".join(named) + ". " if named else "")
            + (f"A yes was reachable in {len(reach)} of {len(rows)} (the heads-to test's smallest p, with its "
               "untied pairs, below the Holm threshold a lone difference faces). " if "yes_reachable" in ov.columns
               else "")
            + f"The share of the task the top heads alone keep (CPR) differs significantly (exploratory "
              f"correction) in {len(cpr)} of {len(rows)} comparisons ({lower} lower, {len(cpr) - lower} higher for "
              "the fewer-KV toy).")
    return text


def fill(doc: str, name: str, body: str, note: str) -> str:
    """`doc` with `body` under `note` between the markers of `name`."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in doc or end not in doc:
        raise ArtifactError(f"markers {begin} ... {end} not found")
    block = f"{begin}\n{note.strip()}\n\n{body.strip()}\n{end}"
    return re.sub(re.escape(begin) + r".*?" + re.escape(end), lambda _: block, doc, flags=re.S)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("readme", type=Path)
    ap.add_argument("sweep_doc", type=Path)
    ap.add_argument("--note", required=True, help="which commit (from a fresh clone), machine and command made it")
    a = ap.parse_args(argv)
    path = a.results / "tables" / "sweep_overview.csv"
    if not path.is_file():
        raise ArtifactError(f"{path}: missing; run the sweep first (config/sweep_capacity.yaml)")
    ov = pl.read_csv(path, infer_schema_length=None)
    write_text(fill(a.readme.read_text(), SECTIONS["README"], paragraph(ov), a.note), a.readme)
    write_text(fill(a.sweep_doc.read_text(), SECTIONS["docs"], table(ov), a.note), a.sweep_doc)


if __name__ == "__main__":
    main()
