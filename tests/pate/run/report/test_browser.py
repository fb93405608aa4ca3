"""The HTML report of a finished run, opened in a real browser (Debian's chromium, headless,
driven by selenium through /usr/bin/chromedriver: Selenium Manager never downloads anything).
It renders, logs no console error, every image loads, every link resolves without the network,
and it prints to PDF. Skipped only where no chromium/chromedriver is installed (.ci/run installs
them when it can)."""

from __future__ import annotations

import base64
import pathlib
import shutil
from urllib.parse import unquote, urlsplit

import pytest

import pate

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

pytestmark = pytest.mark.skipif(
    not (pathlib.Path(CHROMIUM).is_file() and pathlib.Path(CHROMEDRIVER).is_file()),
    reason="no chromium/chromedriver installed (Debian: apt-get install chromium chromium-driver)",
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module", params=["confident-gnmax", "class-means"])
def report_html(request, tmp_path_factory) -> pathlib.Path:
    """report.html of a small finished run of ``pate.fit`` on digits (seconds), each mechanism
    with a ledger of its own."""
    from sklearn.linear_model import LogisticRegression

    folder = tmp_path_factory.mktemp(request.param)
    teacher = {"teacher": LogisticRegression(max_iter=1000)}
    result = pate.fit(
        "digits",
        mechanism=request.param,
        **(teacher if request.param != "class-means" else {}),
        student=LogisticRegression(max_iter=1000),
        target_eps=8.0,
        run_dir=folder / "run",
        ledger=folder / "ledger.sqlite3",
    )
    return pathlib.Path(result.run_dir) / "report.html"


@pytest.fixture(scope="module")
def opened(browser, report_html):
    browser.get_log("browser")  # drop what an earlier page logged
    browser.get(report_html.resolve().as_uri())
    return browser, report_html


def test_it_renders_its_title_and_headings(opened):
    driver, _ = opened
    heading = driver.find_element("css selector", "h1")
    assert heading.is_displayed() and heading.text.strip()
    title, shown = driver.title.strip(), heading.text.strip()
    assert title and (title in shown or shown in title), (title, shown)
    sections = driver.find_elements("css selector", "h2")
    assert len(sections) >= 3
    hidden = [h.text for h in sections if not (h.is_displayed() and h.size["height"] > 0)]
    assert hidden == []


def test_no_console_errors(opened):
    driver, _ = opened
    severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == []


def test_every_image_loads(opened):
    driver, _ = opened
    images = driver.execute_script(
        "return Array.from(document.images, i => [i.getAttribute('src').slice(0, 60), "
        "i.complete, i.naturalWidth])"
    )
    assert images, "the report shows its plots"
    broken = [src for src, complete, width in images if not (complete and width > 0)]
    assert broken == []


def test_every_link_resolves_without_the_network(opened):
    driver, path = opened
    references = driver.execute_script(
        "return Array.from(document.querySelectorAll('[href], [src]'), "
        "e => e.getAttribute('href') ?? e.getAttribute('src'))"
    )
    anchors = set(
        driver.execute_script("return Array.from(document.querySelectorAll('[id]'), e => e.id)")
    )
    unresolved = []
    for reference in references:
        parts = urlsplit(reference)
        if parts.scheme == "data":
            continue
        if parts.scheme or parts.netloc:  # http(s), file://, mailto: ... leave the report
            unresolved.append(reference)
        elif not parts.path:
            if unquote(parts.fragment) not in anchors:
                unresolved.append(reference)
        elif not (path.parent / unquote(parts.path)).exists():
            unresolved.append(reference)
    assert unresolved == []
    fetched = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert [name for name in fetched if not name.startswith(("data:", "file:"))] == []


def test_it_prints_to_pdf(opened):
    driver, _ = opened
    pdf = base64.b64decode(driver.print_page())
    assert pdf.startswith(b"%PDF-") and len(pdf) > 10_000
