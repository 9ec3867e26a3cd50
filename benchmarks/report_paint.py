"""How fast report.html shows its first screen at 1400x900 in headless Chromium, and how fast a cell's
record opens. Prints figures; asserts nothing.

    python benchmarks/report_paint.py [PAGE ...] [--runs 5]

Each page (results/report.html by default) is loaded `--runs` times from disk, each in a fresh
browser profile (no cache), and the figures are the browser's own (Performance API):
first-contentful-paint, DOMContentLoaded and the load event, in ms from navigation start. Then the
grid's first failing cell of the newest torch is clicked and the time until its record is on screen is
measured (a page that embeds every record and one that loads it from report-cells/SESSION.js alike).
Needs Debian's chromium and chromium-driver, and selenium (the dev extra).
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMINGS = """
const nav = performance.getEntriesByType('navigation')[0];
const paint = performance.getEntriesByName('first-contentful-paint')[0];
return [paint ? paint.startTime : null, nav.domContentLoadedEventEnd, nav.loadEventEnd];
"""
FAILING_CELL = "#matrix-grid td.cell.o-fail a"  # the grid's first failing cell
RECORD_SHOWN = "#details dt"  # the record's fields, in the panel beside the grid


def browser(profile: pathlib.Path, width: int = 1400, height: int = 900):
    """Headless Chromium with a viewport of 1400x900 (or `width` x `height`) and its own profile
    (tests/test_report_page.py's too)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser")
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    # the viewport itself (--window-size counts the window, not the page)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    return driver


def one_load(page: pathlib.Path) -> tuple[float, float, float, float | None]:
    """(first paint, DOMContentLoaded, load, ms from a click on a failing cell to its record shown)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    with tempfile.TemporaryDirectory(prefix="report-paint-") as profile:
        driver = browser(pathlib.Path(profile))
        try:
            driver.get(page.resolve().as_uri())
            WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.readyState") == "complete")
            paint, ready, loaded = driver.execute_script(TIMINGS)
            cells = driver.find_elements(By.CSS_SELECTOR, FAILING_CELL)
            opened = None
            if cells:
                start = time.perf_counter()
                driver.execute_script("arguments[0].scrollIntoView(); arguments[0].click();", cells[0])
                WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, RECORD_SHOWN))
                opened = (time.perf_counter() - start) * 1000
            return paint, ready, loaded, opened
        finally:
            driver.quit()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=pathlib.Path, default=[ROOT / "results" / "report.html"])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if not (shutil.which("chromium") or shutil.which("chromium-browser")) or not shutil.which("chromedriver"):
        print("report_paint: needs chromium and chromedriver (apt-get install chromium chromium-driver)",
              file=sys.stderr)
        return 2
    print(f"{'page':<40} {'bytes':>10} {'first paint':>12} {'DOM ready':>10} {'load':>8} {'record':>8}  "
          f"(ms, median of {args.runs})")
    for page in args.pages:
        if not page.is_file():
            print(f"report_paint: no page at {page}", file=sys.stderr)
            return 2
        runs = [one_load(page) for _ in range(args.runs)]
        medians = [statistics.median([r[i] for r in runs if r[i] is not None] or [float("nan")]) for i in range(4)]
        print(f"{str(page)[-40:]:<40} {page.stat().st_size:>10,} " + " ".join(
            f"{m:>{w}.0f}" for m, w in zip(medians, (12, 10, 8, 8), strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
