"""Reports opened in a real browser: Debian's headless Chromium, driven by Playwright.

``make test`` installs Chromium as it installs Java (``make chromium``). :func:`render` opens
one report file offline (any request that leaves the file is refused and counted), waits for
it to load, and returns what a reader would have seen: every chart (``<img>``, ``<svg>``,
``<canvas>``) and whether it drew, every JavaScript console error and uncaught exception, and
a full-page screenshot saved where the test asked.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")

# Every chart in the page and whether it drew: an image that decoded to a non-empty bitmap, a
# vector chart or canvas with a non-zero box.
CHARTS_JS = """
() => {
  const seen = [];
  for (const img of document.images) {
    seen.push({kind: "img", label: img.alt || img.title || "",
               ok: img.complete && img.naturalWidth > 0 && img.naturalHeight > 0});
  }
  for (const el of document.querySelectorAll("svg.main-svg, canvas, .chart svg")) {
    const box = el.getBoundingClientRect();
    const owner = el.closest(".plotly-graph-div") || el;
    seen.push({kind: el.tagName.toLowerCase(), label: owner.id || "",
               ok: box.width > 0 && box.height > 0});
  }
  return seen;
}
"""


# Open every <details> (the report sizes the Plotly charts inside on "toggle").
OPEN_ALL_JS = """
() => { for (const d of document.querySelectorAll("details")) { d.open = true; } }
"""


@dataclass
class Rendered:
    title: str
    charts: list[dict[str, object]]
    errors: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    text: str = ""

    @property
    def broken(self) -> list[dict[str, object]]:
        return [chart for chart in self.charts if not chart["ok"]]


def chromium() -> str:
    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError(
        "no Chromium on PATH: the report tests render in a real browser; "
        "`make test` installs it (Debian: apt-get install chromium)"
    )


def render(report: Path, screenshot: Path, *, width: int = 1280) -> Rendered:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    external: list[str] = []
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))

            def refuse(route: object) -> None:
                external.append(route.request.url)  # type: ignore[attr-defined]
                route.abort()  # type: ignore[attr-defined]

            page.route("http*://**", refuse)  # the report must open offline
            # a hang guard, not a bound on anything: the demo's report (~6 MB, ~30 Plotly
            # charts) missed Playwright's default 30 s to "load" on this 2-core machine beside
            # three test workers and a benchmark
            page.set_default_timeout(180_000)
            page.goto(report.resolve().as_uri(), wait_until="load")
            page.wait_for_load_state("networkidle")
            page.evaluate(OPEN_ALL_JS)  # as a reader who opens every collapsed section
            page.wait_for_timeout(300)
            charts = page.evaluate(CHARTS_JS)
            title = page.title()
            text = page.inner_text("body")
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return Rendered(title=title, charts=charts, errors=errors, external=external, text=text)


def assert_renders(report: Path, screenshot: Path, *, min_charts: int) -> Rendered:
    """The report loads offline with no JavaScript error and every chart drew."""
    shown = render(report, screenshot)
    assert not shown.errors, f"{report}: console errors {shown.errors}"
    assert not shown.external, f"{report}: requests leaving the file {shown.external}"
    assert len(shown.charts) >= min_charts, f"{report}: {len(shown.charts)} charts"
    assert not shown.broken, f"{report}: charts that did not draw {shown.broken}"
    assert screenshot.stat().st_size > 10_000, screenshot
    return shown
