"""Every table reads in the report's browser view: Snakemake's report shows HTML,
images and PDF inline and offers a CSV as a download only, so each table job writes an HTML page of
its table beside the CSV and the rules register that page; the landing page carries no metadata dump."""

import base64
import re
from html.parser import HTMLParser

import polars as pl
from workflow_helpers import ROOT

from circuitloc.plan import paths
from circuitloc.plan.hooks.html_report import _metadata
from circuitloc.report.tables.cost import write_cost
from circuitloc.report.pages.landing import headline_figures
from circuitloc.report.tables.localization import write_table


class _Tables(HTMLParser):
    """The page's tables as lists of rows of cell texts, and its links."""

    def __init__(self):
        super().__init__()
        self.tables, self.links, self._cell = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = ""
        elif tag == "a":
            self.links.append(dict(attrs))

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.tables[-1][-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def _parse(path) -> _Tables:
    p = _Tables()
    p.feed(path.read_text())
    return p


def test_a_table_page_holds_every_row_and_the_csv(tmp_path):
    df = pl.DataFrame({"model": ["toy_mha", "<b>x</b>"], "score": [0.123456, float("nan")],
                       "heads_to_80": [3, 5], "heads_to_80_bounded": [False, True], "extra": ["a", "b"]})
    shown = df.select("model", "score", "heads_to_80", "heads_to_80_bounded")
    csv, md = tmp_path / "t.csv", tmp_path / "t.md"
    write_table(df, csv, md, "Table 1 — ioi", shown=shown)
    page = _parse(tmp_path / "t.html")
    # the reader's form first (as the markdown shows it), every column of the CSV folded below it
    assert page.tables[0] == [["model", "score", "heads_to_80"], ["toy_mha", "0.1235", "3"], ["<b>x</b>", "", "> 5"]]
    assert page.tables[1][0] == ["model", "score", "heads_to_80", "extra"]
    assert "<b>x</b>" not in (tmp_path / "t.html").read_text()  # a cell is text, never markup
    (link,) = page.links
    assert link["download"] == "t.csv"
    assert base64.b64decode(link["href"].partition("base64,")[2]) == csv.read_bytes()


def test_a_table_without_a_reader_form_is_shown_whole(tmp_path):
    df = pl.DataFrame({"claim": ["GQA 4-8x"], "verdict": ["holds"]})
    write_table(df, tmp_path / "c.csv", tmp_path / "c.md", "claims")
    assert _parse(tmp_path / "c.html").tables == [[["claim", "verdict"], ["GQA 4-8x", "holds"]]]
    write_table(df.clear(), tmp_path / "e.csv", tmp_path / "e.md", "claims")
    assert "No rows" in (tmp_path / "e.html").read_text()


def test_the_cost_page_shows_its_three_tables(tmp_path):
    bench = tmp_path / "b.tsv"
    bench.write_text("s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
                     "3725.0\t1:02:05\t100.0\t1\t1\t1\t0\t0\t0\t12.0\n")
    csv = tmp_path / "cost.csv"
    write_cost([("scores", "toy", str(bench))], csv, tmp_path / "cost.md")
    tables = _parse(tmp_path / "cost.html").tables
    assert len(tables) == 3 and tables[0][0] == ["stage", "jobs", "wall", "wall_s", "cpu_s", "max_rss_mb"]
    assert ["scores", "1", "1:02:05", "3725.0", "12.0", "100.0"] in tables[0]
    assert ["scores", "toy", "1", "1:02:05", "3725.0", "12.0", "100.0"] in tables[2]


def test_the_rules_register_each_table_as_its_html_page():
    """No table is a download link only: every report() over results/tables/ is the HTML page, and the
    same rule writes the CSV of the same name (read by other jobs and by the tests). The rules name a
    table by its pattern in plan/paths.py (`paths.file(paths.X, "html")`), or, for a path typed out,
    by the path itself."""
    seen = 0
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        text = smk.read_text()
        for path in re.findall(r'report\(\s*f?"(results/tables/[^"]+)"', text):
            seen += 1
            assert path.endswith(".html"), f"{smk.name}: {path} is registered in the report as a download only"
            assert f'"{path[:-len(".html")]}.csv"' in text, f"{smk.name}: no CSV beside {path}"
        for stem, suffix in re.findall(r'report\(\s*paths\.file\(([^,]+), "(\w+)"', text):
            # table_outputs (rules/common.smk) names Table 1 or 2 by `name`
            if not eval(stem, {"paths": paths, "name": "table1"}).startswith(f"{paths.TABLES}/"):
                continue  # a figure
            seen += 1
            assert suffix == "html", f"{smk.name}: {stem} is registered in the report as a {suffix} download only"
            assert f'paths.file({stem}, "csv"' in text, f"{smk.name}: no CSV beside {stem}"
    assert seen >= 9  # Tables 1 and 2: one report() in rules/common.smk (table_outputs)


def test_the_report_metadata_has_no_string_to_dump():
    """Snakemake 9 renders a string metadata value with docutils' publish_parts and lists every part
    (WHOLE ... ENCODING utf-8 ... VERSION) under the first page; a number shows as itself."""
    meta = _metadata({"models": {"a": {}}, "tasks": {"ioi": {}}, "seed": 3, "device": "cpu"})
    assert meta == {"seed": 3}


def test_figure1_landing_caption_names_the_drop():
    """Figure 1 draws each unit's raw drop (design.md, Metrics), not the normalised damage."""
    (fig1, fig2, scale) = headline_figures("ioi", "zero-query", "f1.png", "f2.png", "s.png")
    assert "drop" in fig1.read and "damage when" not in fig1.read and "not normalised to damage" in fig1.read
    assert fig2.read.startswith("Damage (1 = the task is gone)") and "ranked curve" in fig2.read
