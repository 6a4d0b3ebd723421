"""The tiny run's report.html opened in a real headless browser (Debian's chromium through Selenium
and chromedriver), as a reader opens it: the menu's Workflow, Statistics and About, then every
category, every subcategory and every item (its view button, and its info button), each toggle
value where Snakemake's report shows a toggle. Fails on any console error, uncaught exception or
blank page: a report item whose labels Snakemake's report cannot resolve blanks the whole page.

Installs Debian's chromium and chromium-driver with apt-get when they are missing (root only);
skipped, with the reason, where Selenium or a browser cannot be had."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time

import pytest
from workflow_helpers import smk

pytestmark = pytest.mark.workflow

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver",)
# every error the page raises or logs, kept on the page itself (read after each click)
RECORD_ERRORS = """
window.__errors = [];
window.addEventListener('error', e => window.__errors.push('uncaught: ' + (e.message || e)));
window.addEventListener('unhandledrejection', e => window.__errors.push('unhandled rejection: ' + e.reason));
const _error = console.error;
console.error = function (...args) { window.__errors.push('console.error: ' + args.join(' ')); _error.apply(console, args); };
"""
WAIT_S = 20  # seconds for the page to render after a click (it renders in milliseconds)


def _which(names):
    return next((shutil.which(n) for n in names if shutil.which(n)), None)


def _ensure_browser():
    """(browser, driver) binaries, installed with apt-get (Debian: chromium, chromium-driver) where
    missing and this is root; a skip with the reason where they cannot be had."""
    browser, driver = _which(BROWSERS), _which(DRIVERS)
    if browser and driver:
        return browser, driver
    missing = "a Chromium browser" if not browser else "chromedriver"
    if not shutil.which("apt-get"):
        pytest.skip(f"{missing} is not installed and there is no apt-get to install it")
    if os.geteuid() != 0:
        pytest.skip(f"{missing} is not installed; installing it (apt-get install chromium chromium-driver) needs root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd, timeout in ((["apt-get", "update"], 300),
                         (["apt-get", "install", "-y", "--no-install-recommends", "chromium", "chromium-driver"], 900)):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if p.returncode != 0:
            pytest.skip(f"{missing} is not installed and `{' '.join(cmd)}` failed: {(p.stderr or p.stdout)[-500:]}")
    browser, driver = _which(BROWSERS), _which(DRIVERS)
    assert browser and driver, "apt-get installed chromium and chromium-driver, but they are still missing"
    return browser, driver


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium under Selenium, every page error recorded (window.__errors)."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the `test` extra)")
    from selenium.webdriver.chrome.service import Service

    binary, driver_binary = _ensure_browser()
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1600,1000", "--allow-file-access-from-files"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_binary), options=opts)
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_ERRORS})
        yield driver
    finally:
        driver.quit()


class Reader:
    """Clicks through one report as a reader does, checking after every click that the page holds
    its app and raised no error. What it finds and clicks, it finds and clicks in one script each
    (one round trip to the browser, not one per element read)."""

    def __init__(self, driver, html):
        self.d, self.html, self.step = driver, html, "opening the report"

    def check(self, step):
        """The page after `step`: no error, and the app is there (a render error unmounts it all)."""
        self.step = step
        page, app = self.d.execute_script(
            "const e = window.__errors || []; window.__errors = [];"
            "return [e, document.querySelector('#app nav') !== null]")
        logged = [f"{e['level']}: {e['message']}" for e in self.d.get_log("browser") if e["level"] == "SEVERE"]
        errors = page + logged
        assert not errors, f"{self.html.name}: after {step}: " + " | ".join(errors)[:3000]
        assert app, f"{self.html.name}: the page is blank after {step}"

    def click(self, find, step, *args):
        """Click the element the JavaScript expression `find` gives (`args`: its arguments[...]);
        whether there was one."""
        found = self.d.execute_script(
            f"const el = ({find}); if (!el) return false;"
            "el.scrollIntoView({block: 'center'}); el.click(); return true;", *args)
        if found:
            self.check(step)
        return found

    def links(self, css="nav a") -> list[str]:
        """The texts of the shown links under #app `css`."""
        return self.d.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]))"
            ".filter(a => a.getClientRects().length).map(a => a.innerText.trim())", f"#app {css}")

    def link(self, text, step):
        """Click the shown navbar link whose text is `text`."""
        if not self.click("Array.from(document.querySelectorAll('#app nav a'))"
                          ".find(a => a.getClientRects().length && a.innerText.trim() === arguments[0])", step, text):
            raise AssertionError(f"{self.html.name}: no link {text!r} to click ({step}); links: {self.links()}")

    def home(self):
        """Back to the menu (the breadcrumbs' first link, the home icon)."""
        assert self.click("document.querySelector('#app nav nav ol li a')", f"the home breadcrumb after {self.step}"), \
            f"{self.html.name}: no breadcrumbs after {self.step}"

    def shown(self) -> str | None:
        """What the content pane shows: the data URI of its image or frame."""
        return self.d.execute_script(
            "const el = document.querySelector('#app img[src^=\"data:\"]:not(nav img), #app iframe');"
            "return el ? el.getAttribute('src') : null")

    def wait(self, cond, what):
        end = time.monotonic() + WAIT_S
        while time.monotonic() < end:
            value = cond()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"{self.html.name}: {what} did not happen within {WAIT_S} s ({self.step})")

    def rows(self) -> list[tuple[str, int]]:
        """Each row of the subcategory's table: its label (the cells but the last) and how many
        buttons its last cell holds."""
        return self.d.execute_script(
            "return Array.from(document.querySelectorAll('#app nav table tbody tr')).map(tr => {"
            "const td = Array.from(tr.querySelectorAll('td'));"
            "return [td.slice(0, -1).map(c => c.innerText.trim()).join(' | '),"
            "        tr.querySelectorAll('td:last-child a').length]; })")

    def toggle_states(self) -> list[str | None]:
        """Every value of the subcategory's toggle (Snakemake shows at most one), or one None."""
        labels = self.d.execute_script(
            "return Array.from(document.querySelectorAll('#app nav fieldset label')).map(l => l.innerText.trim())")
        return labels or [None]

    def open_subcategory_items(self, where, expected: dict, back) -> set[str]:
        """Click every row's view and info buttons under every toggle value of the subcategory on
        screen (`back()` returns to it from an item's info); the data URIs it showed."""
        seen = set()
        button = "document.querySelectorAll('#app nav table tbody tr')[arguments[0]]" \
                 ".querySelectorAll('td:last-child a')[arguments[1]]"

        def select(t):  # the subcategory's view starts on its toggle's first value again
            toggle = self.toggle_states()[t]
            if toggle is not None:
                assert self.click("document.querySelectorAll('#app nav fieldset label')[arguments[0]]",
                                  f"toggle {toggle!r} in {where}", t)

        for t in range(len(self.toggle_states())):
            select(t)
            for i in range(len(self.rows())):
                label, buttons = self.rows()[i]
                assert buttons == 2, f"{where}, row {label!r}: {buttons} buttons"
                assert self.click(button, f"the view button of {label!r} in {where}", i, 0)
                uri = self.wait(lambda: self.shown() if self.shown() in expected.values() else None,
                                f"showing {label!r}")
                seen.add(uri)
                if uri.startswith("data:text/html"):
                    self._check_frame(label)
                crumbs = len(self.links("nav nav ol li a"))
                assert self.click(button, f"the info button of {label!r} in {where}", i, 1)
                # the info view: the item's own breadcrumb added
                self.wait(lambda: len(self.links("nav nav ol li a")) > crumbs, "the info view")
                back()
                self.wait(lambda: self.rows(), f"the rows of {where} again")
                select(t)
        return seen

    def _check_frame(self, label):
        frame = self.d.find_element("css selector", "#app iframe")
        self.d.switch_to.frame(frame)
        try:
            text = self.wait(lambda: self.d.execute_script("return document.body && document.body.innerText.trim()"),
                             f"the page of {label!r} to show text")
        finally:
            self.d.switch_to.default_content()
        assert len(text) > 20, (label, text)


def open_every_page(driver, html, opens_on="The answer") -> int:
    """Open `html` and click through all of it; the number of items shown."""
    r = Reader(driver, html)
    driver.get_log("browser")  # drop what an earlier page logged
    driver.get(html.resolve().as_uri())
    r.wait(lambda: driver.execute_script("return document.querySelector('#app nav') !== null"), "the report to render")
    r.check("opening the report")
    first = driver.execute_script("return document.querySelector('#app').innerText")
    assert opens_on in first, f"{html.name} does not open on {opens_on!r}: {first[:300]!r}"
    for item in ("Workflow", "Statistics", "About"):
        r.link(item, f"the menu's {item}")
        r.home()
    categories = driver.execute_script("return categories")
    results = driver.execute_script("return Object.fromEntries(Object.entries(results).map(([k, v]) => [k, v.data_uri]))")
    assert categories and results, f"{html.name}: no results"
    shown = set()
    for category in sorted(categories):
        subs = categories[category]
        # one category: the menu names it "Results"
        r.link(category if len(categories) > 1 else "Results", f"category {category!r}")
        for sub in sorted(subs):
            where = f"{category} / {sub}"
            if len(subs) > 1:
                r.link(sub, f"subcategory {where!r}")
            expected = {p: results[p] for p in subs[sub]}
            crumb = sub if len(subs) > 1 else category  # the breadcrumb back from an item's info
            seen = r.open_subcategory_items(where, expected, lambda: r.link(crumb, f"back to {where!r}"))
            assert seen == set(expected.values()), \
                f"{where}: the items {sorted(p for p, u in expected.items() if u not in seen)} cannot be opened"
            shown |= seen
            if len(subs) > 1:
                r.link(category, f"back to category {category!r}")  # the breadcrumb
        r.home()
    assert shown == set(results.values())
    return len(shown)


def test_report_opens_every_page_in_a_browser(tiny_run, browser):
    html = tiny_run / "results" / "report.html"
    n = open_every_page(browser, html)
    assert n >= 100, n  # the tiny run reports every table and figure (tests/workflow/test_report.py)


# A workflow of two report items in one subcategory, labelled as the stability table and figure were
# (ablation `all` beside `zero-query`: Snakemake's report makes that label a toggle and finds no item
# for either row under the other value), and as they are now.
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
SNAKEFILE = """
rule all:
    input: "t.html", "f.png"

rule make:
    output:
        t=report("t.html", category="ioi", subcategory="beyond the paper", labels={table}),
        f=report("f.png", category="ioi", subcategory="beyond the paper", labels={figure}),
    run:
        open(output.t, "w").write("<html><body><p>a stability table of this report</p></body></html>")
        open(output.f, "wb").write({png!r})
"""
LABELS = {
    "as they were": ({"output": "Stability table", "task": "ioi", "ablation": "all"},
                     {"output": "Stability figure", "task": "ioi", "ablation": "zero-query"}),
    "as they are": ({"output": "Stability table (every ablation)", "task": "ioi"},
                    {"output": "Stability figure (zero-query)", "task": "ioi"}),
}


def _two_item_report(work, labels):
    table, figure = LABELS[labels]
    work.mkdir()
    (work / "Snakefile").write_text(SNAKEFILE.format(table=table, figure=figure, png=PNG))
    smk("--cores", "1", "--report", "report.html", "--report-after-run", cwd=work, timeout=300)  # run, then report
    return work / "report.html"


def test_the_browser_check_fails_on_labels_the_report_cannot_toggle(tmp_path, browser):
    """The check itself: the labels the stability items had blank the page (the TypeError readers
    saw); the labels they have now open both items."""
    with pytest.raises(AssertionError, match=r"mime_type|blank"):
        open_every_page(browser, _two_item_report(tmp_path / "was", "as they were"), opens_on="Snakemake")
    assert open_every_page(browser, _two_item_report(tmp_path / "is", "as they are"), opens_on="Snakemake") == 2
