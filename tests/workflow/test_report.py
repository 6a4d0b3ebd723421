"""The HTML report: built by the default run (results/report.html) and by `snakemake --report`,
it holds every table and figure, each with its caption, the file itself embedded."""

import base64
import json
import re
from html import escape as html_escape

import pytest
from workflow_helpers import smk

pytestmark = pytest.mark.workflow

CAPTIONS = {"table1": "Table 1", "table2": "Table 2", "fig1_heatmap": "Figure 1", "fig2_curves": "Figure 2",
            "scale": "Scale figure", "stability": "Stability", "robustness": "Robustness", "specificity": "Specificity",
            "cost": "Cost table", "claims": "The paper's claims"}
PER_ABLATION = ("table1", "table2", "fig1_heatmap", "fig2_curves")
TASKS = ("ioi", "induction", "facts", "facts_shared")


def _results(html):
    """The report's `var results = {...}`: path -> name, caption, labels, data_uri, ..."""
    text = html.read_text()
    m = re.search(r"^\s*var results = (?=\{)", text, flags=re.M)
    assert m, f"{html}: no results in the report"
    results, _ = json.JSONDecoder().raw_decode(text, m.end())
    return results, text


def _unresolvable_rows(html) -> list[str]:
    """Rows of the report's result lists that Snakemake's report (abstract_results.js getData, as of
    Snakemake 9) cannot resolve: a label after the first that has exactly two values, each on half a
    subcategory's items, becomes a toggle (the only one, or none where two labels qualify), and each
    row of the other labels must then have an item under both values; one without blanks the page
    (`Cannot read properties of undefined (reading 'mime_type')`). The browser's own check:
    test_report_browser.py."""
    results, text = _results(html)
    m = re.search(r"^\s*var categories = (?=\{)", text, flags=re.M)
    assert m, f"{html}: no categories in the report"
    categories, _ = json.JSONDecoder().raw_decode(text, m.end())
    problems = []
    for category, subs in categories.items():
        for sub, paths in subs.items():
            items = [results[p] for p in paths]
            labels = list(dict.fromkeys(k for item in items for k in item["labels"]))
            toggles = []
            for label in labels[1:]:
                values = [item["labels"][label] for item in items if label in item["labels"]]
                if len(set(values)) == 2 and all(values.count(v) * 2 == len(items) for v in set(values)):
                    toggles.append(label)
            if len(toggles) != 1:
                continue
            (toggle,) = toggles
            rows = {}
            for path, item in zip(paths, items):
                key = tuple(item["labels"].get(k, "") for k in labels if k != toggle)
                rows.setdefault(key, set()).add(item["labels"].get(toggle))
            both = {item["labels"][toggle] for item in items}
            problems += [f"{category} / {sub}: row {key} has no item for {toggle} = {sorted(both - have)}"
                         for key, have in rows.items() if have != both]
    return problems


def _expected(run):
    """Every table (its HTML page, beside its CSV) and figure the run made."""
    files = sorted(run.glob("results/tables/*.html")) + sorted(run.glob("results/figures/*.png"))
    assert {f.stem for f in run.glob("results/tables/*.csv")} == {f.stem for f in run.glob("results/tables/*.html")}
    names = {f.stem for f in files}
    # the tiny config: every task under every ablation (kv only for tiny_gqa, mean only for tiny_gqa)
    for task in TASKS:
        for abl in ("zero-query", "mean-query", "resample-query", "zero-kv", "mean-kv", "resample-kv"):
            for kind in PER_ABLATION:
                assert f"{kind}_{task}_{abl}" in names, f"{kind}_{task}_{abl}"
    assert {"scale_zero-query", "robustness", "specificity", "cost", "claims"} <= names
    assert {f"stability_{t}" for t in TASKS if t != "facts_shared"} <= names
    return files


def _check_report(html, run):
    assert html.is_file() and html.stat().st_size > 10_000, html
    results, text = _results(html)
    files = _expected(run)
    for f in files:
        key = str(f.relative_to(run))
        assert key in results, f"{key} is not in {html.name}"
        entry = results[key]
        kind = re.match(r"(table1|table2|fig1_heatmap|fig2_curves|scale|stability|robustness|specificity|cost|claims)", f.name).group(1)
        caption = entry.get("caption", "")
        assert CAPTIONS[kind] in caption, (key, caption[:200])
        assert "{{" not in caption and "}}" not in caption, (key, caption[:200])
        assert "problematic" not in caption and "System Message" not in caption, (key, caption)  # rst errors
        if kind in PER_ABLATION:
            task, abl = entry["labels"]["task"], entry["labels"]["ablation"]
            assert f"_{task}_{abl}." in key, (key, entry["labels"])
            # the caption names the task (one job per task writes every ablation's tables and figures:
            # the ablation is in the file's name and label, and in a figure's title)
            assert f"({task})" in caption, (key, caption[:200])
        # the file itself is in the report, byte for byte
        header, _, payload = entry["data_uri"].partition("base64,")
        assert header.startswith("data:"), key
        assert base64.b64decode(payload) == f.read_bytes(), f"{key}: the embedded copy differs from the file"
        if f.suffix == ".html":
            assert entry["mime_type"] == "text/html", key  # shown in the browser, not offered as a download
            _check_table_page(f)
    # nothing else is reported, and the workflow description is there
    assert set(results) == {str(f.relative_to(run)) for f in files}, sorted(set(results) ^ {str(f.relative_to(run)) for f in files})
    assert "circuitloc" in text and "heads-to-80%" in text
    # every item opens: no label the report turns into a toggle without an item for each value
    assert not _unresolvable_rows(html), _unresolvable_rows(html)


def _check_table_page(page):
    """A table's page holds the table as HTML: every row of its CSV (a row's first cell), the page's
    last table row for row, and the CSV itself byte for byte as its download link."""
    import polars as pl

    text = page.read_text()
    csv = page.with_suffix(".csv")
    df = pl.read_csv(csv, infer_schema_length=0)
    assert "<table>" in text or df.height == 0, page.name
    if page.stem != "cost":  # the cost page shows three views of its rows
        last = text[text.rindex("<table>"):] if df.height else ""
        assert last.count("<tr>") == df.height + 1, (page.name, last.count("<tr>"), df.height)
    for first in df[df.columns[0]]:
        assert f"<td>{html_escape(first or '')}</td>" in text, (page.name, first)
    link = re.search(r'href="data:text/csv;base64,([^"]+)" download="([^"]+)"', text)
    assert link and link.group(2) == csv.name and base64.b64decode(link.group(1)) == csv.read_bytes(), page.name


def _first_page(html) -> str:
    """The text the report opens on (Snakemake's `workflow_desc`)."""
    text = html.read_text()
    m = re.search(r"var workflow_desc = ", text)
    assert m, f"{html}: no workflow description"
    desc, _ = json.JSONDecoder().raw_decode(text, m.end())
    return desc


def _check_first_page(html, run):
    """The report opens on the answer: the claims table (every claim, with its verdict), then Table 1
    of IOI under the paper's ablation (every model) and the headline figures embedded, before the
    workflow's description."""
    import polars as pl

    desc = _first_page(html)
    claims = pl.read_csv(run / "results" / "tables" / "claims.csv")
    assert desc.index("The answer") < desc.index("About this workflow"), desc[:300]
    for claim in claims["claim"]:
        assert claim.split()[0] in desc
    assert sum(desc.count(f"<td>{v}</td>") for v in set(claims["verdict"])) >= claims.height
    table1 = pl.read_csv(run / "results" / "tables" / "table1_ioi_zero-query.csv")
    head = desc[desc.index("Table 1: ioi, zero-query ablation"):desc.index("About this workflow")]
    for model in table1["model"]:
        assert f"<td>{model}</td>" in head, model
    assert head.count('src="data:image/png;base64,') == 3, "Figures 1 and 2 and the scale figure"


def test_default_run_builds_the_report(tiny_run):
    html = tiny_run / "results" / "report.html"
    _check_report(html, tiny_run)
    _check_first_page(html, tiny_run)
    # it opens on that page, not on the workflow graph (the run's report has metadata)
    # (the report's own metadata, not the like-named variable of a bundled library); and the page ends
    # on the workflow's description: no docutils parts (WHOLE ... VERSION) of a metadata string under it
    m = re.search(r'<script id="metadata">\s*var metadata = ', html.read_text())
    assert m, "no metadata: the report opens on the rule graph"
    meta, _ = json.JSONDecoder().raw_decode(html.read_text(), m.end())
    assert meta == {"seed": 0}, meta
    assert "Models: tiny_mha, tiny_gqa. Tasks: ioi, induction, facts. Device: cpu; seed 0." in _first_page(html)
    assert (tiny_run / "results" / "logs" / "report.log").read_text().rstrip().endswith("Report created.")
    # the run's last console line, after Snakemake's own closing lines, says where the report is
    last = (tiny_run / "run.console").read_text().rstrip().splitlines()[-1]
    assert last == f"circuitloc: the report is {html.resolve()} (it opens on the run's answer)", last


def test_snakemake_report_command(tiny_run):
    out = tiny_run / "by_hand.html"
    smk("--report", str(out), "--configfile", ".test/config.yaml", cwd=tiny_run, timeout=600)
    _check_report(out, tiny_run)
    _check_first_page(out, tiny_run)
