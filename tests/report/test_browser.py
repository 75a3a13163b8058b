"""A real browser on what people look at: `autotune dashboard` on loopback and the report file.

Headless Chromium from Debian (`apt-get install chromium chromium-driver`, done by .ci/run)
driven through Selenium. The checks count what was drawn (trial rows, Plotly SVGs, scatter
points) rather than trusting a 200. Screenshots land in pytest's tmp folder for a human look.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from autotune.cli import main

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "headless Chromium is not installed (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402 - only worth importing with a browser present
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)
# Network off for the report: no name resolves, and every http(s) request goes to a proxy that
# does not exist (IP literals included); file:// needs neither.
OFFLINE = ("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost", "--proxy-server=127.0.0.1:9")
WAIT_S = 60


def chromium(profile: Path, *extra: str, width: int = 1400, height: int = 1000) -> Any:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, *extra, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


def wait_for(driver: Any, condition: Callable[[Any], Any], what: str) -> Any:
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.25).until(
        condition, message=f"timed out waiting for {what}"
    )


def body_text(driver: Any) -> str:
    return driver.find_element(By.TAG_NAME, "body").text


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def dashboard_url(small_study: tuple[str, str]) -> Iterator[str]:
    """`autotune dashboard` as a user starts it, on a free loopback port; Ctrl-C at the end."""
    url, _ = small_study
    process = subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "dashboard", "--storage", url, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        line = ""
        while not line.startswith("dashboard: "):
            line = process.stdout.readline()
            assert line, process.stderr.read() if process.stderr else "dashboard exited"
        yield line.split()[1]
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=20)
        assert process.returncode in (0, 130) and "Traceback" not in stderr, stderr
    finally:
        if process.poll() is None:
            process.kill()


@pytest.mark.slow
def test_dashboard_shows_trials_plots_and_artifacts(
    dashboard_url: str, shots: Path, tmp_path: Path
) -> None:
    assert dashboard_url.startswith("http://127.0.0.1:")
    driver = chromium(tmp_path / "profile", height=1400)
    try:
        # Study overview: Pareto front, history, importance, ... each a Plotly SVG.
        driver.get(dashboard_url)
        wait_for(
            driver,
            lambda d: (
                len(d.find_elements(By.CSS_SELECTOR, ".main-svg")) >= 6
                and "Hyperparameter Importance" in body_text(d)
            ),
            "the study page's plots",
        )
        text = body_text(driver)
        assert "small" in text and "Pareto Front" in text
        assert "throughput_output_tokens_per_s" in text  # named objectives, not "Objective 0"
        driver.save_screenshot(str(shots / "dashboard_study.png"))

        # Trial list: every trial with its state; the first trial's artifacts.
        driver.get(dashboard_url + "/trials")
        wait_for(driver, lambda d: "8 Trials" in body_text(d), "the trial list")
        entries = driver.find_elements(By.XPATH, "//*[starts-with(normalize-space(.), 'Trial ')]")
        numbers = {e.text.split()[1] for e in entries if e.text.split()[1:2]}
        assert {str(n) for n in range(8)} <= numbers
        wait_for(driver, lambda d: "sample_outputs.jsonl" in body_text(d), "trial 0's artifacts")
        text = body_text(driver)
        assert "accuracy_by_category.csv" in text
        assert "accuracy_by_category" in text and "is_reference" in text  # user attributes
        driver.save_screenshot(str(shots / "dashboard_trials.png"))

        # The .jsonl artifact opens as a table: the trial's answers next to the expected ones.
        driver.find_elements(By.CSS_SELECTOR, "[aria-label='show artifact table']")[-1].click()
        wait_for(driver, lambda d: "INVOICE 4711" in body_text(d), "the sample outputs table")
        assert "Read the text in the image." in body_text(driver)
        driver.save_screenshot(str(shots / "dashboard_sample_outputs.png"))

        # A failed trial: its reason and its log tail file.
        driver.get(dashboard_url + "/trials")  # closes the table dialog
        wait_for(driver, lambda d: "8 Trials" in body_text(d), "the trial list")
        driver.find_element(By.XPATH, "//*[normalize-space(text())='Trial 6']").click()
        wait_for(driver, lambda d: "log_tail.txt" in body_text(d), "trial 6's log tail artifact")
        assert "out of memory" in body_text(driver)
        driver.save_screenshot(str(shots / "dashboard_failed_trial.png"))
    finally:
        driver.quit()


@pytest.mark.slow
def test_report_opens_offline_with_its_plots(
    small_study: tuple[str, str], shots: Path, tmp_path: Path
) -> None:
    url, _ = small_study
    report = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", "--storage", url, "--out", str(report)])
    assert result.exit_code == 0, result.output
    driver = chromium(tmp_path / "profile", *OFFLINE)
    try:
        driver.get(report.as_uri())
        plots = ("plot-pareto", "plot-accuracy", "plot-batch", "plot-importance")
        wait_for(
            driver,
            lambda d: all(d.find_elements(By.CSS_SELECTOR, f"#{plot} .main-svg") for plot in plots),
            "every plot to render",
        )
        # Drawn markers: 6 completed trials in the Pareto plot, plus the recommended and
        # reference rings.
        points = driver.find_elements(By.CSS_SELECTOR, "#plot-pareto .scatterlayer .point")
        assert len(points) == 6 + 2
        bars = driver.find_elements(By.CSS_SELECTOR, "#plot-importance .barlayer .point")
        assert len(bars) == 3 * 2  # three parameters, two objectives
        text = body_text(driver)
        assert "Recommended: trial 2" in text
        assert "swift deploy --model Qwen/Qwen3-VL-2B-Instruct" in text
        assert "INVOICE 4711" in text
        # Nothing was fetched from the network: every resource the page loaded is the file.
        resources = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)"
        )
        assert [r for r in resources if r.startswith(("http:", "https:"))] == [], resources
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1400, min(int(height) + 100, 8000))
        driver.save_screenshot(str(shots / "report.png"))
        (shots / "report_resources.json").write_text(json.dumps(resources))
    finally:
        driver.quit()
