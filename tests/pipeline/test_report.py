"""`snakemake --report`: one self-contained HTML file with the text and image tables, every curve, the credit plot
and the contact sheets, each with its caption; opened in headless Chromium (Debian's chromium and chromedriver,
driven by selenium), every table and image renders.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
from helpers import BIN, run

from ddmrl.config import load
from ddmrl.pipeline import dag

pytestmark = pytest.mark.slow

REPORTED = [
    "text_table.html",
    "image_table.html",
    *(f"{p}{k}_curves.png" for p in ("", "image_") for k in ("reward", "kl", "loss", "clip_ratio")),
    "credit_by_reveal_step.png",
]
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def report(smoke_workspace) -> Path:
    run([BIN / "snakemake", "--report", "report.html"], smoke_workspace)
    return smoke_workspace / "report.html"


def expected_results(ws: Path) -> dict[str, str]:
    """Report path -> the first words of its caption (workflow/report/*.rst)."""
    captions = {
        "text_table.html": "Held-out accuracy",
        "image_table.html": "GenEval per tag",
        "credit_by_reveal_step.png": "Relative gradient credit",
        **{f"{p}{k}_curves.png": w for p in ("", "image_") for k, w in zip(
            ("reward", "kl", "loss", "clip_ratio"),
            ("Mean reward of each rollout batch", "k3 estimate of the KL", "The method's own loss", "Fraction of"),
            strict=True,
        )},
    }  # fmt: skip
    out = {f"data/tables/{name}": captions[name] for name in REPORTED}
    models = [p.stem for p in (ws / "data" / "tables" / dag.CONTACT_SHEETS).glob("*.png")]
    assert sorted(models) == ["base", "rebrl_geneval_mini_s0", "unigrpo_geneval_mini_s0"]
    out |= {f"data/tables/{dag.CONTACT_SHEETS}/{m}.png": "Contact sheet of one model" for m in models}
    return out


def test_report_is_one_self_contained_file(report):
    html = report.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=", html), "a script loaded from elsewhere"
    assert not re.search(r"<link[^>]+href=\"http", html), "a stylesheet loaded from elsewhere"
    assert not re.search(r"<img[^>]+src=\"http", html), "an image loaded from elsewhere"


def test_tables_and_images_render_in_chromium(report, smoke_workspace):
    """Every reported file is listed, its view shows (images decoded to real pixels, the tables' cells holding the
    numbers of the CSV tables), and its caption is there."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        pytest.skip("no chromium/chromedriver on PATH (Debian: apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tempfile.mkdtemp()}"]:
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        browser.get(report.as_uri())
        wait(lambda: browser.execute_script("return typeof app !== 'undefined'"))
        expected = expected_results(smoke_workspace)
        listed = browser.execute_script("return Object.keys(results)")
        assert set(expected) <= set(listed)
        for path, caption in expected.items():
            browser.find_element(By.XPATH, "//a[normalize-space(.)='1. Tables']").click()  # a category, or its crumb
            search = browser.find_element(By.CSS_SELECTOR, "input[placeholder='Search...']")
            search.send_keys(Keys.CONTROL, "a")  # the box keeps the last search: replace it (as typed, for React)
            search.send_keys(path + Keys.ENTER)
            row = wait(lambda p=path: listed_row(browser, p), f"{path} listed")
            row.find_element(By.CSS_SELECTOR, "a[iconname='eye']").click()
            if path.endswith(".png"):
                img = wait(lambda: browser.find_elements(By.CSS_SELECTOR, "div.p-3 > img"))[0]
                assert wait(lambda i=img: browser.execute_script("return arguments[0].complete", i)), path
                assert browser.execute_script("return arguments[0].naturalWidth", img) > 100, path
            else:
                frame = wait(lambda: browser.find_elements(By.TAG_NAME, "iframe"))[0]
                browser.switch_to.frame(frame)
                cells = [td.text for td in wait(lambda: browser.find_elements(By.TAG_NAME, "td"))]
                browser.switch_to.default_content()
                assert cells == markdown_cells(smoke_workspace / path.replace(".html", ".md")), path
            row.find_element(By.CSS_SELECTOR, "a[iconname='information-circle']").click()
            wait(lambda c=caption: c in browser.find_element(By.TAG_NAME, "nav").text)
    finally:
        browser.quit()
    assert load(smoke_workspace / "params.yaml").profile == "smoke"


def listed_row(browser, path: str):
    """The row of search results that lists ``path``, or None."""
    from selenium.webdriver.common.by import By

    return next((r for r in browser.find_elements(By.XPATH, "//tr[td]") if r.text == path), None)


def markdown_cells(path: Path) -> list[str]:
    """The body cells of the Markdown table the HTML table renders (the same frame: values with their intervals)."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("|")][2:]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
    assert rows and any(re.match(r"-?\d+(\.\d+)?", c) for r in rows for c in r)  # numbers
    return [c for r in rows for c in r]


def wait(condition, what: str = "", timeout: float = 10.0):
    """The first truthy value of ``condition()`` within ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() > end:
            assert value, f"timed out waiting for the report: {what}"
            return value
        time.sleep(0.1)
