"""report.html in a real headless Chromium (Debian's chromium and chromium-driver, driven by
selenium): what a reader sees at 1400x900, and what clicking does. .ci/run installs both and sets
HARNESS_REQUIRE_BROWSER, so there the test fails rather than skips when they are missing."""

import os
import shutil
import urllib.parse

import pytest

from harness.report import render
from tests.test_report import CK, CK_GPU, NEST, OLD, PARAM, REGION, TE, TE_GPU, matrix, write_session  # noqa: F401  (matrix: fixture)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
MISSING = CHROMIUM is None or CHROMEDRIVER is None
if MISSING and os.environ.get("HARNESS_REQUIRE_BROWSER"):
    raise RuntimeError("HARNESS_REQUIRE_BROWSER is set but chromium or chromedriver is missing "
                       "(apt-get install chromium chromium-driver)")
pytestmark = pytest.mark.skipif(MISSING, reason="no chromium + chromedriver (apt-get install chromium chromium-driver)")


@pytest.fixture
def browser(tmp_path):
    # the browser benchmarks/report_paint.py times the page in: headless Chromium, a 1400x900 viewport
    from benchmarks.report_paint import browser as chromium

    driver = chromium(tmp_path / "profile")
    yield driver
    driver.quit()


@pytest.fixture
def narrow_browser(tmp_path):
    """The same browser with a viewport of 800x900: a laptop's half screen."""
    from benchmarks.report_paint import browser as chromium

    driver = chromium(tmp_path / "narrow-profile", width=800)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def committed_page(tmp_path_factory):
    """The committed table's page (29 sessions, 13 of them the Lightning axis), rendered once."""
    from harness.core import paths

    out = tmp_path_factory.mktemp("committed")
    data = render.build([paths.ROOT / "results"])
    render.write(data, out)
    return data, out / "report.html"


@pytest.fixture
def page(matrix, tmp_path):  # noqa: F811
    """The fixture matrix plus enough sessions and cases for the grid to be as wide as a real one."""
    for minor in range(7, 16):  # complete sessions: every case the others have
        write_session(matrix, f"cpu_torch2{minor}", f"2.{minor}.0", {
            CK: "pass", TE: "pass", OLD: "pass", PARAM: "limitation", CK_GPU: "skip", TE_GPU: "skip",
            REGION: {"outcome": "skip", "message": "missing: torch.compiler.region"},
            NEST: {"outcome": "fail", "message": f"Tensor-likes are not close! Mismatched elements: {minor} / 16"}})
    render.write(render.build([matrix]), tmp_path / "out")
    return tmp_path / "out" / "report.html"


def visible(driver, element) -> bool:
    """Inside the viewport, whole: nothing to scroll to see it."""
    return driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return r.width > 0 && r.left >= 0 && r.top >= 0 && r.right <= innerWidth && r.bottom <= innerHeight;", element)


def clipped_headers(driver) -> list[str]:
    """The grid's column headers whose text does not fit their cell (cut where it overflows)."""
    return driver.execute_script(
        "return [...document.querySelectorAll('#matrix-grid th.session')]"
        ".filter(th => th.scrollHeight > th.clientHeight + 1 || th.scrollWidth > th.clientWidth + 1)"
        ".map(th => th.textContent)")


def strip_on_first_screen(driver) -> bool:
    """The bug strip whole in the first screen, each version's header and mark whole in its column."""
    from selenium.webdriver.common.by import By

    cut = driver.execute_script(
        "return [...document.querySelectorAll('#bug-strip thead th:not(.bug), #bug-strip td')]"
        ".filter(c => c.scrollWidth > c.clientWidth).length")
    tables = driver.find_elements(By.CSS_SELECTOR, "#bug-strip table")
    return bool(tables) and all(visible(driver, table) for table in tables) and not cut


def state(driver) -> dict:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(driver.current_url).fragment))


def test_first_screen_shows_the_failing_group_and_the_newest_column(browser, page, tmp_path):
    from selenium.webdriver.common.by import By

    browser.get(page.as_uri())
    browser.save_screenshot(str(tmp_path / "first-screen.png"))  # for a person to look at
    keep = os.environ.get("HARNESS_SCREENSHOT_DIR")
    if keep:
        shutil.copy(tmp_path / "first-screen.png", keep)
    assert browser.execute_script("return [innerWidth, innerHeight]") == [1400, 900]
    assert browser.execute_script("return document.documentElement.scrollWidth") <= 1400  # no sideways scrolling
    assert not clipped_headers(browser)
    group = browser.find_element(By.CSS_SELECTOR, "#failing .group")
    assert visible(browser, group), group.rect
    assert "nox -s repro -- '" + NEST + "' --session cpu_torch215" in group.text
    assert "nox -s bisect -- '" + NEST + "'" in group.text
    assert "NEW: not reported upstream" in group.text  # its upstream status, on the card itself
    # a passing exit status is no headline: the Sessions section says it, the first screen does not
    assert not browser.find_elements(By.ID, "verdict-line")
    assert "Exit status 0" in browser.find_element(By.ID, "exit-status").get_attribute("textContent")
    # the four questions on the first screen: what is broken and not reported, what changed, since when
    answers = browser.find_element(By.ID, "answers")
    assert visible(browser, answers) and "Broken on the newest torch and not reported upstream: 2 bugs" in answers.text
    assert "Between neighbouring torch versions:" in answers.text
    # the grid is one click away, its newest column in view
    browser.find_element(By.CSS_SELECTOR, 'nav a[href="#matrix"]').click()
    newest = browser.find_element(By.CSS_SELECTOR, '#matrix-grid th.session[data-session="cpu_torch215"]')
    assert "newest" in newest.get_attribute("class") and visible(browser, newest), newest.rect
    # the header stays in place while the grid scrolls under it
    browser.execute_script("window.scrollTo(0, document.getElementById('matrix-grid').offsetTop + 200)")
    assert browser.execute_script("return document.querySelector('#matrix-grid thead th.session')"
                                  ".getBoundingClientRect().top") == pytest.approx(0, abs=2)


def test_filters_and_the_selected_cell_live_in_the_url(browser, page):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(page.as_uri())
    rows = lambda: [r.get_attribute("title") for r in browser.find_elements(By.CSS_SELECTOR, "#matrix-grid td.name")]  # noqa: E731
    everything = rows()
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("crash")
    assert rows() == [CK_GPU] and state(browser) == {"outcome": "crash"}
    cell = browser.find_element(By.CSS_SELECTOR, '#matrix-grid a[data-session="cuda12_torch26"]')
    cell.click()
    assert state(browser) == {"outcome": "crash", "cell": f"{CK_GPU}@cuda12_torch26"}
    details = browser.find_element(By.ID, "details")
    assert details.is_displayed() and "worker died" in details.text and "nox -s repro" in details.text
    grid = browser.find_element(By.ID, "matrix-grid")
    assert details.rect["x"] >= grid.rect["x"] + grid.rect["width"], (details.rect, grid.rect)  # beside, not over
    # the URL opens the page as it was left: the filter set, the cell selected, its record shown
    link = browser.current_url
    browser.get("about:blank")
    browser.get(link)
    assert Select(browser.find_element(By.ID, "f-outcome")).first_selected_option.get_attribute("value") == "crash"
    assert rows() == [CK_GPU]
    selected = browser.find_elements(By.CSS_SELECTOR, "#matrix-grid td.selected a")
    assert [(a.get_attribute("data-case"), a.get_attribute("data-session")) for a in selected] == [
        (CK_GPU, "cuda12_torch26")]
    assert browser.find_element(By.ID, "details").is_displayed()
    browser.find_element(By.CSS_SELECTOR, "#details .close").click()
    assert not browser.find_element(By.ID, "details").is_displayed() and state(browser) == {"outcome": "crash"}
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("")
    assert rows() == everything
    # the outcome filter looks at the newest torch's column unless told which: OLD failed on 2.5 only
    Select(browser.find_element(By.ID, "f-outcome")).select_by_value("fail")
    assert rows() == [NEST]
    Select(browser.find_element(By.ID, "f-in")).select_by_value("any")
    assert set(rows()) == {NEST, OLD}
    Select(browser.find_element(By.ID, "f-in")).select_by_value("cpu_torch25")
    assert rows() == [OLD] and state(browser) == {"outcome": "fail", "in": "cpu_torch25"}
    # a link that holds filters only opens on the grid
    link = browser.current_url
    browser.get("about:blank")
    browser.get(link)
    heading = browser.find_element(By.ID, "matrix")
    assert browser.execute_script("return arguments[0].getBoundingClientRect().top", heading) == pytest.approx(0, abs=2)


def test_a_case_link_in_a_failing_group_opens_its_cell(browser, page):
    from selenium.webdriver.common.by import By

    browser.get(page.as_uri())
    browser.find_element(By.CSS_SELECTOR, "#failing .group details summary").click()
    browser.find_element(By.CSS_SELECTOR, f'#failing .group a[data-case="{NEST}"]').click()
    assert state(browser)["cell"] == f"{NEST}@cpu_torch215"
    selected = browser.find_element(By.CSS_SELECTOR, "#matrix-grid td.selected a")
    assert selected.get_attribute("data-case") == NEST and visible(browser, selected)
    assert "Tensor-likes are not close!" in browser.find_element(By.ID, "details").text
    # a folded section opens when the navigation links to it
    browser.find_element(By.CSS_SELECTOR, 'nav a[href="#known"]').click()
    assert browser.find_element(By.CSS_SELECTOR, "#known > details").get_attribute("open") is not None


def test_the_committed_table_fits_the_screen_and_shows_the_lightning_axis_on_request(browser, committed_page):
    # The real table (29 sessions, 13 of them the Lightning axis), not a fixture: the page must not
    # scroll sideways at 1400 px; the axis's columns come with the sessions filter, and with a link
    # to one of their cells.
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    data, page = committed_page
    axis = [s["name"] for s in data["sessions"] if s["lightning_of"]]
    assert axis, "the committed table has Lightning-axis sessions"
    page = page.as_uri()
    browser.get(page)

    def columns():
        return [th.get_attribute("data-session")
                for th in browser.find_elements(By.CSS_SELECTOR, "#matrix-grid th.session")]
    assert not set(columns()) & set(axis) and len(columns()) == len(data["sessions"]) - len(axis)
    assert browser.execute_script("return document.documentElement.scrollWidth") <= 1400
    assert strip_on_first_screen(browser)
    Select(browser.find_element(By.ID, "f-sessions")).select_by_value("lightning")
    assert set(axis) <= set(columns()) and "sessions=lightning" in browser.current_url
    case = next(c["case"] for c in data["cases"] if not c["cells"][axis[0]].get("absent"))
    browser.get(page + "#" + urllib.parse.urlencode({"cell": f"{case}@{axis[0]}"}))
    browser.refresh()
    assert axis[0] in columns()
    # a cell of the newest column, opened: its record beside the grid, the cell itself in view
    newest = data["newest"][0]["session"]
    failing = next(c["case"] for c in data["cases"] if c["cells"][newest]["outcome"] == "fail")
    browser.get(page + "#" + urllib.parse.urlencode({"cell": f"{failing}@{newest}"}))
    browser.refresh()
    details = browser.find_element(By.ID, "details")
    WebDriverWait(browser, 10).until(lambda _: "failing examples" in details.text or "message" in details.text)
    assert data["cases"][[c["case"] for c in data["cases"]].index(failing)]["cells"][newest]["exc_type"] in details.text
    cell = browser.find_element(By.CSS_SELECTOR, "#matrix-grid td.selected")
    assert (visible(browser, cell)
            and cell.rect["x"] + cell.rect["width"] <= details.rect["x"]), (cell.rect, details.rect)
    assert browser.execute_script("return document.documentElement.scrollWidth") <= 1400


def test_at_800_px_the_page_does_not_scroll_sideways_and_the_newest_column_is_in_view(narrow_browser, committed_page):
    # At 800 px the grid is wider than the page: it scrolls inside its own box, scrolled so that the
    # newest torch's column is in view, while the page itself never scrolls sideways.
    from selenium.webdriver.common.by import By

    data, page = committed_page
    narrow_browser.get(page.as_uri())
    assert narrow_browser.execute_script("return [innerWidth, innerHeight]") == [800, 900]
    assert narrow_browser.execute_script("return document.documentElement.scrollWidth") <= 800
    assert not clipped_headers(narrow_browser)  # "2.5.1 py310_pyg" whole, not "2.5.1 py310_"
    assert strip_on_first_screen(narrow_browser)
    narrow_browser.find_element(By.CSS_SELECTOR, 'nav a[href="#matrix"]').click()
    newest = data["newest"][0]["session"]
    column = narrow_browser.find_element(By.CSS_SELECTOR, f'#matrix-grid th.session[data-session="{newest}"]')
    assert visible(narrow_browser, column), column.rect
    name = narrow_browser.find_element(By.CSS_SELECTOR, "#matrix-grid td.name")
    assert visible(narrow_browser, name), name.rect  # the case names stay at the left while the grid scrolls
    assert narrow_browser.execute_script("return document.documentElement.scrollWidth") <= 800
