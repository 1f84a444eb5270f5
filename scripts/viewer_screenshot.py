"""Pictures of a ``grove view`` report in headless Chromium (Debian's ``chromium`` and ``chromium-driver``, driven by
selenium); ``tests/test_view.py`` opens its reports with the same functions.

    python scripts/viewer_screenshot.py RUN_DIR/view/index.html OUT.png --section trajectories --click 0 \\
        --colour advantage --hover ".open .tok"

``--section`` pictures one section (overview, samples, trajectories, objectives, compare) instead of the whole
page, ``--click N`` expands the N-th trajectory first, ``--colour MODE`` colours the tokens (logprob, entropy,
advantage, loss_mask, kept), ``--view groups`` shows the sample groups side by side, ``--hover SELECTOR`` puts the
pointer over an element in the section (its tooltip shown). The picture is 1400 pixels wide and at most
``--height`` (2600) tall.
"""

from __future__ import annotations

import argparse
import base64
import shutil
import sys
from pathlib import Path

WIDTH = 1400


class NoBrowser(RuntimeError):
    """Chromium, chromedriver or selenium is missing, or the browser did not start."""


def start_chromium():
    """A headless Chromium that keeps the page's console messages (``driver.get_log("browser")``)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        raise NoBrowser("selenium is not installed (pip install -e '.[dev]')") from None
    binary = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)
    driver = shutil.which("chromedriver")
    if binary is None or driver is None:
        raise NoBrowser("Chromium or chromedriver not found (Debian: apt-get install chromium chromium-driver; make test does)")
    options = Options()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", f"--window-size={WIDTH},1000"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(service=Service(driver), options=options)
    except Exception as exc:  # a browser that is there but will not start
        raise NoBrowser(f"Chromium did not start: {type(exc).__name__}: {str(exc).splitlines()[0]}") from exc


def open_report(driver, index: Path, timeout_s: float = 15) -> None:
    """Open the report and wait until every section has drawn (``window.GROVE_READY``)."""
    driver.get(Path(index).resolve().as_uri())
    ready = driver.execute_async_script(
        "const done = arguments[arguments.length - 1], start = Date.now(), limit = arguments[0];"
        "(function wait() { if (window.GROVE_READY) window.GROVE_READY.then(() => done('ready'), (e) => done(String(e)));"
        " else if (Date.now() - start > limit) done('timeout'); else setTimeout(wait, 50); })();",
        timeout_s * 1000,
    )
    if ready != "ready":
        raise RuntimeError(f"the report at {index} did not finish drawing: {ready}")


def javascript_errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def choose(driver, selector: str, value: str) -> None:
    """Set a <select> of the page and tell the page it changed."""
    driver.execute_script(
        "const s = document.querySelector(arguments[0]); s.value = arguments[1]; s.dispatchEvent(new Event('change'));",
        selector, value,
    )


def capture(driver, path: Path, selector: str | None = None, hover: str | None = None, height: int = 2600) -> Path:
    """The page, or the element ``selector`` (at most ``height`` pixels of it), as a PNG at ``path``, with the pointer
    over the first ``hover`` element (its tooltip shown)."""
    top, bottom = driver.execute_script(
        "document.querySelector('.topbar').style.position = arguments[0] ? 'static' : '';"  # no bar amid a section
        "const r = arguments[0] ? document.querySelector(arguments[0]).getBoundingClientRect() : null;"
        "return r ? [r.top + window.scrollY - 16, r.bottom + window.scrollY + 16]"
        " : [0, document.documentElement.scrollHeight];",
        selector,
    )
    driver.execute_script("window.scrollTo(0, arguments[0]); document.getElementById('tooltip').hidden = true;", top)
    if hover:  # the tooltip is placed in the window: hover after scrolling
        driver.execute_script(
            "const t = document.querySelector(arguments[0]), r = t.getBoundingClientRect();"
            "t.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: r.left + r.width / 2,"
            " clientY: r.top + r.height / 2}));",
            hover,
        )
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "captureBeyondViewport": True,
        "clip": {"x": 0, "y": top, "width": WIDTH, "height": min(height, bottom - top), "scale": 1},
    })
    Path(path).write_bytes(base64.b64decode(shot["data"]))
    return Path(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("index", type=Path, help="a report's index.html (grove view RUN_DIR)")
    parser.add_argument("out", type=Path, help="the PNG to write")
    parser.add_argument("--section", help="picture this section only (its id)")
    parser.add_argument("--click", type=int, action="append", default=[], help="expand the N-th trajectory first")
    parser.add_argument("--colour", help="colour the tokens by this (when the run has token details)")
    parser.add_argument("--view", help="the sample browser's view: list or groups")
    parser.add_argument("--hover", help="a CSS selector inside the section to put the pointer over")
    parser.add_argument("--height", type=int, default=2600, help="the picture's greatest height in pixels")
    args = parser.parse_args(argv)
    try:
        driver = start_chromium()
    except NoBrowser as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        open_report(driver, args.index)
        scope = f"#{args.section}" if args.section else ""
        if args.view:
            choose(driver, f"{scope} select[aria-label=view]", args.view)
        if args.colour:
            choose(driver, f"{scope} .colour-select", args.colour)
        for n in args.click:
            driver.execute_script("document.querySelectorAll('.traj-summary')[arguments[0]].click();", n)
        capture(driver, args.out, scope or None, f"{scope} {args.hover}" if args.hover else None, args.height)
        errors = javascript_errors(driver)
        for error in errors:
            print(f"javascript error: {error}", file=sys.stderr)
        print(args.out)
        return 1 if errors else 0
    finally:
        driver.quit()


if __name__ == "__main__":
    sys.exit(main())
