"""Open the rendered HTML report in headless Debian chromium and check it works.

Results: COMPAT_REPORT_RESULTS (a results/ directory of <cell>.json files) when set, else
sample result files written to tmp_path (tests/unit/sample_results.py). The report is rendered into a
temporary directory; screenshots go to reports/compat-screenshot.png (desktop, full page) and
reports/compat-screenshot-mobile.png (390 px wide).

Without /usr/bin/chromium or /usr/bin/chromedriver the tests skip, unless COMPAT_REQUIRE_BROWSER
is set (to anything but "" or "0"): then a missing browser fails.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from compat.harness.junit import cell_id
from compat.harness.report import build_report, write_reports
from compat.shared.records import to_json
from compat.shared.results import load_cell, probe_key, read_json

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))  # the sample records live beside the unit tests
from sample_results import write_sample_results  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _required() -> bool:
    return os.environ.get("COMPAT_REQUIRE_BROWSER", "") not in ("", "0")


def _chromium() -> str | None:
    for name in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if os.path.exists(name):
            return name
    return shutil.which("chromium")


def _unavailable(why: str):
    if _required():
        pytest.fail(f"COMPAT_REQUIRE_BROWSER is set but {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    results = os.environ.get("COMPAT_REPORT_RESULTS")
    if results:
        results_dir = Path(results)
        assert results_dir.is_dir(), f"COMPAT_REPORT_RESULTS={results} is not a directory"
    else:
        results_dir = base / "results"
        write_sample_results(results_dir)
    files = sorted(p for p in results_dir.glob("*.json") if not p.name.startswith("."))
    cells = [to_json(load_cell(p)) for p in files if not p.name.startswith("kimi")]
    kimi_files = [p for p in files if p.name.startswith("kimi")]
    kimi = read_json(kimi_files[0], "kimi result") if kimi_files else None
    assert cells, f"no cell result files in {results_dir}"
    report = build_report(cells, kimi=kimi)
    out = base / "reports"
    write_reports(report, out)
    return out / "compat.html", report


@pytest.fixture(scope="module")
def driver():
    browser = _chromium()
    if browser is None:
        _unavailable("chromium is not installed (apt-get install -y chromium chromium-driver)")
    if not os.path.exists(CHROMEDRIVER):
        _unavailable(f"{CHROMEDRIVER} is not installed (apt-get install -y chromium-driver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("selenium is not installed")
    profile = tempfile.mkdtemp(prefix="compat-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument("--window-size=1280,900")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield drv
    finally:
        drv.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _open(driver, html: Path, width: int = 1280, height: int = 900, hash_: str = "") -> None:
    driver.set_window_size(width, height)
    driver.get(html.as_uri() + hash_)
    driver.get_log("browser")  # drop entries from earlier pages
    driver.refresh()


def _severe(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def _css_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def test_every_cell_and_probe_is_present(driver, rendered):
    from selenium.webdriver.common.by import By

    html, report = rendered
    _open(driver, html)
    assert "vLLM × speculators" in driver.title
    for cell in report["cells"]:
        cid = cell_id(cell)
        buttons = driver.find_elements(By.CSS_SELECTOR, f"a.cellbtn[data-cell={_css_str(cid)}]")
        assert len(buttons) == 1, f"matrix has no cell {cid}"
        text = buttons[0].text
        assert cell["verdict"] in text, f"cell {cid} does not show its verdict word: {text!r}"
        articles = driver.find_elements(By.CSS_SELECTOR, f"article.cell-detail[data-cell={_css_str(cid)}]")
        assert len(articles) == 1, f"no detail for {cid}"
        for probe in cell["probes"]:
            key = probe_key(probe)
            found = articles[0].find_elements(By.CSS_SELECTOR, f"li.probe[data-probe={_css_str(key)}]")
            assert len(found) == 1, f"{cid}: probe {key} missing"
    assert _severe(driver) == []


def test_clicking_a_cell_shows_its_probes(driver, rendered):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    html, report = rendered
    for width, height in ((1280, 900), (390, 844)):
        _open(driver, html, width, height)
        cells = [c for c in report["cells"] if c["probes"]] or report["cells"]
        # Prefer a cell with a NEW or broken probe: the one people click first.
        cells.sort(key=lambda c: 0 if any(p["status"] == "broken" for p in c["probes"]) else 1)
        cell = cells[0]
        cid = cell_id(cell)
        article = driver.find_element(By.CSS_SELECTOR, f"article.cell-detail[data-cell={_css_str(cid)}]")
        assert not article.is_displayed(), "details should be closed until a cell is selected"
        button = driver.find_element(By.CSS_SELECTOR, f"a.cellbtn[data-cell={_css_str(cid)}]")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'});", button)
        button.click()
        WebDriverWait(driver, 5).until(EC.visibility_of(article))
        for probe in cell["probes"]:
            li = article.find_element(By.CSS_SELECTOR, f"li.probe[data-probe={_css_str(probe_key(probe))}]")
            assert li.is_displayed(), f"{cid}: probe {probe_key(probe)} not visible after the click"
            assert probe["status"] in li.text
        others = [
            a for a in driver.find_elements(By.CSS_SELECTOR, "article.cell-detail")
            if a.get_attribute("data-cell") != cid
        ]
        assert not any(a.is_displayed() for a in others), "only the selected cell should be open"
        page_width = driver.execute_script("return document.documentElement.scrollWidth")
        view_width = driver.execute_script("return document.documentElement.clientWidth")
        assert page_width <= view_width + 1, f"page scrolls sideways at {width}px ({page_width} > {view_width})"
        assert _severe(driver) == []


def _full_page_screenshot(driver, path: Path, width: int) -> None:
    height = driver.execute_script("return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)")
    driver.set_window_size(width, min(int(height) + 140, 12000))
    path.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(path)), f"could not write {path}"


def test_screenshot(driver, rendered):
    from selenium.webdriver.common.by import By

    html, report = rendered
    def interest(c):  # show the cell a reader would open first: NEW, then incompatible, then any breakage
        kinds = {(p.get("classification") or {}).get("kind") for p in c["probes"]}
        return (
            "new" not in kinds,
            c["verdict"] != "incompatible",
            not any(p["status"] == "broken" and not p.get("advisory") for p in c["probes"]),
        )

    ranked = sorted(report["cells"], key=interest)
    target = ranked[0] if ranked else None
    hash_ = f"#cell-{cell_id(target)}" if target else ""
    _open(driver, html, 1280, 900, hash_)
    if target:
        assert driver.find_element(By.CSS_SELECTOR,
                                   f"article.cell-detail[data-cell={_css_str(cell_id(target))}]").is_displayed()
    driver.execute_script("window.scrollTo(0, 0)")
    _full_page_screenshot(driver, REPO / "reports" / "compat-screenshot.png", 1280)
    _open(driver, html, 390, 844, hash_)
    driver.execute_script("window.scrollTo(0, 0)")
    _full_page_screenshot(driver, REPO / "reports" / "compat-screenshot-mobile.png", 390)
    assert _severe(driver) == []


# -- the support table's answer, in the first screen (issue 22; speculators#1157) -----------------

# the published table: every row's records and documents, and the same pairs run on a GPU where the
# CPU build could not serve them (the answer's last column)
SUPPORT_RUNS = [REPO / "published" / "results"]
GPU_RUNS: list = []


@pytest.fixture(scope="module")
def support_rendered(tmp_path_factory):
    """The report `nox -s report` writes from the committed support-row runs (their records and
    results/support/*.json), through the store."""
    from compat.harness.report.publish import publish
    from compat.harness.store import Store

    assert list(SUPPORT_RUNS[0].glob("support/*.json")), "no published row under published/results/support/"
    base = tmp_path_factory.mktemp("support")
    store = Store.open(base / "store.sqlite")
    try:
        published = publish(base / "reports", store, imports=SUPPORT_RUNS + GPU_RUNS)
    finally:
        store.close()
    assert not published.problems, published.problems
    assert published.report.get("support"), "the committed runs hold no support document"
    return base / "reports" / "compat.html", published.report


def test_the_first_screen_answers_which_vllm_works_with_each_speculators(driver, support_rendered):
    from selenium.webdriver.common.by import By

    html, report = support_rendered
    rows = sorted({str(c["speculators"]) for doc in report["support"] for c in doc["cells"]})
    _open(driver, html, 1280, 900)
    driver.execute_script("window.scrollTo(0, 0)")
    screen = driver.execute_script("return window.innerHeight")
    answers = driver.find_element(By.CSS_SELECTOR, "#support table.answers")
    bottom = driver.execute_script("return arguments[0].getBoundingClientRect().bottom", answers)
    path = REPO / "reports" / "compat-screenshot-support.png"
    assert driver.save_screenshot(str(path)), f"could not write {path}"  # the first screen only, kept when it fails
    assert bottom <= screen, f"the answer ends {bottom:.0f} px down, below the first screen ({screen} px)"
    for spec in rows:
        line = answers.find_element(By.XPATH, f".//tr[th/a[normalize-space()={_css_str(spec)}]]")
        cells = line.find_elements(By.TAG_NAME, "td")
        assert [c.get_attribute("class") for c in cells] == ["o-works", "o-adapters", "o-untested", "o-broken",
                                                             "elsewhere"]
        assert cells.pop().text  # what the GPU runs decided for this row's releases, or "none"
        texts = [c.text for c in cells]
        assert all(texts), f"speculators {spec}: an empty answer cell {texts}"
        assert re.search(r"\d+\.\d+\.\d+", " ".join(texts)), f"speculators {spec}: no vLLM release named: {texts}"
        if texts[3] != "none" and texts[:2] != ["none", "none"]:  # a broken range says what to install instead,
            # where the row knows a working pair (0.5.0 - 0.7.x: their runtime cells not run yet, none known)
            assert "install instead: vLLM " in texts[3], texts[3]
    assert "gpu: 0.23.0" in answers.text  # 0.23.0 x 0.8.1 and x 0.9.0: what the CPU build cannot serve
    # every row's strip shows all its releases at once, at a desktop's width and a phone's (issue 45): no sideways
    # scroll in a strip; nor in the page at a desktop's width (at a phone's the answer table, six columns, is wider)
    for width in (1280, 390):
        _open(driver, html, width, 900)
        strips = driver.find_elements(By.CSS_SELECTOR, "#support ol.strip")
        assert len(strips) == len(rows)
        for strip in strips:
            assert driver.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth + 1", strip)
            assert len(strip.find_elements(By.TAG_NAME, "li")) >= 20
        view = driver.execute_script("return document.documentElement.clientWidth")
        assert width < 1280 or driver.execute_script("return document.documentElement.scrollWidth") <= view + 1
    assert _severe(driver) == []
