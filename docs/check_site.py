"""Open the built documentation site in headless Chromium and check what a reader would see.

    .venv/bin/python docs/check_site.py [--site docs/_build/html] [--screenshots DIR]

(``make docs-check`` runs it after ``make docs``; tests/repo/test_docs_site.py runs the same
checks under pytest.) The site is served from a local ``http.server`` on 127.0.0.1, and
every page of it (home, guides, API reference, notebooks) is loaded in Debian's Chromium
through Debian's chromedriver, named by path so that Selenium never downloads a driver.
Each page must:

- load with a title and show no reStructuredText error (``system-message``, ``problematic``);
- request nothing outside the site (no CDN: the site works offline), with no failed load
  in the browser's console;
- have every ``<img>`` loaded (``complete`` and ``naturalWidth > 0``); a notebook page
  shows exactly as many figures as its committed outputs hold;
- have its math typeset by the bundled MathJax (no ``mjx-merror``).

Screenshots of the home page, of one notebook page (06_toy_problems, scrolled to its
first figure) and of the API page go to ``docs/_build/screenshots/`` for a person to look at.
"""

import argparse
import functools
import http.server
import json
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "docs" / "_build" / "html"
SCREENSHOTS = ROOT / "docs" / "_build" / "screenshots"
NOTEBOOKS = ROOT / "notebooks"
SCREENSHOT_NOTEBOOK = "06_toy_problems"
CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome")
CHROMEDRIVER = ("/usr/bin/chromedriver",)
# Pages Sphinx makes that are not content: not opened.
SKIP = {"genindex.html", "search.html", "py-modindex.html"}


def find_browser():
    """(chromium, chromedriver) paths, or None when either is missing."""
    browser = next((p for p in CHROMIUM if Path(p).is_file()), None)
    driver = next((p for p in CHROMEDRIVER if Path(p).is_file()), None)
    if browser is None or driver is None:
        return None
    return browser, driver


def notebook_figures(name):
    """How many figures (image outputs) the committed notebook ``name`` holds."""
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    return sum(1 for cell in nb["cells"] if cell["cell_type"] == "code"
               for out in cell.get("outputs", [])
               if any(k.startswith("image/") for k in out.get("data", {})))


def pages(site):
    """Every HTML page of the site, relative to it, home page first."""
    found = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")
                   if "_static" not in p.parts and "_sources" not in p.parts)
    found = [p for p in found if p not in SKIP]
    found.remove("index.html")
    return ["index.html"] + found


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(site):
    """A threaded http.server for ``site`` on a free port of 127.0.0.1: (server, base URL)."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def start_browser(browser, driver, width=1280, height=900):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars",
                "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver path: Selenium Manager (which would download one) is never run.
    drv = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    # The page's own size (the window's less the browser's frame), so screenshots are WxH.
    drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                        {"width": width, "height": height, "deviceScaleFactor": 1,
                         "mobile": False})
    return drv


# Run in the page: waits for the document (its heading, up to 10 s: on a busy machine the
# first page of a fresh browser was once read before it had one), the images and MathJax,
# then reports what it sees.
_INSPECT = """
const done = arguments[arguments.length - 1];
let imgs = [];
const loaded = new Promise(r => {
    const t0 = Date.now();
    (function poll() {
        if ((document.readyState === 'complete' && document.querySelector('article h1'))
            || Date.now() - t0 > 10000) { r(); } else { setTimeout(poll, 50); }
    })();
});
loaded.then(() => {
imgs = Array.from(document.images);
const settle = Promise.all(imgs.map(img => img.complete ? null : new Promise(r => {
    img.addEventListener('load', r); img.addEventListener('error', r); })));
const math = (window.MathJax && MathJax.startup && MathJax.startup.promise)
    ? MathJax.startup.promise : Promise.resolve();
return Promise.all([settle, math]);
}).then(() => done({
    title: document.title,
    h1: (document.querySelector('article h1') || {}).textContent || '',
    errors: document.querySelectorAll('.system-message, .problematic').length,
    images: imgs.map(img => ({src: img.currentSrc || img.src, ok: img.complete
                                                                  && img.naturalWidth > 0})),
    figures: document.querySelectorAll('.cell_output img').length,
    math: document.querySelectorAll('.math').length,
    typeset: document.querySelectorAll('mjx-container').length,
    mathErrors: document.querySelectorAll('mjx-merror').length,
    resources: performance.getEntriesByType('resource').map(e => e.name),
}));
"""


def check_page(drv, base, page):
    """The problems of one page (an empty list when it is fine) and what it measured."""
    drv.get(base + page)
    info = drv.execute_async_script(_INSPECT)
    problems = []
    if not info["title"].strip() or not info["h1"].strip():
        problems.append("no title or no heading")
    if info["errors"]:
        problems.append(f"{info['errors']} reStructuredText error(s) shown in the page")
    broken = [i["src"] for i in info["images"] if not i["ok"]]
    if broken:
        problems.append(f"images not loaded: {broken}")
    outside = sorted({r for r in info["resources"] if not r.startswith(base)})
    if outside:
        problems.append(f"requests outside the site (would need the internet): {outside}")
    if info["math"] and (info["typeset"] == 0 or info["mathErrors"]):
        problems.append(f"math not typeset: {info['math']} formulas, {info['typeset']} "
                        f"typeset, {info['mathErrors']} MathJax errors")
    # (A browser asks for /favicon.ico by itself; the site has no icon.)
    console = [e["message"] for e in drv.get_log("browser")
               if e["level"] == "SEVERE" and "/favicon.ico " not in e["message"]]
    if console:
        problems.append(f"browser console errors: {console}")
    if page.startswith("notebooks/"):
        expected = notebook_figures(Path(page).stem)
        if info["figures"] != expected:
            problems.append(f"{info['figures']} figures shown, the committed notebook has "
                            f"{expected}")
    return problems, info


def screenshot(drv, base, page, path, scroll_to=None):
    drv.get(base + page)
    drv.execute_async_script(_INSPECT)  # images and math ready
    if scroll_to:
        # 'instant': the theme asks for smooth scrolling, which a screenshot would catch halfway.
        drv.execute_script("const e = document.querySelector(arguments[0]);"
                           "e.scrollIntoView({block: 'start', behavior: 'instant'});"
                           "window.scrollBy({top: -120, behavior: 'instant'});", scroll_to)
        time.sleep(0.2)
    path.parent.mkdir(parents=True, exist_ok=True)
    drv.save_screenshot(str(path))


def check_site(site=SITE, screenshots=SCREENSHOTS, log=print):
    """Check every page; returns {page: [problems]} for the pages with problems.

    Raises FileNotFoundError when the site or the browser is missing.
    """
    site = Path(site)
    if not (site / "index.html").is_file():
        raise FileNotFoundError(f"no built site at {site}: run `make docs`")
    found = find_browser()
    if found is None:
        raise FileNotFoundError("chromium or chromedriver not found: "
                                "apt-get install -y chromium chromium-driver")
    server, base = serve(site)
    drv = start_browser(*found)
    failures = {}
    try:
        log(f"{found[0]} ({drv.capabilities.get('browserVersion', '?')}), site {site}")
        for page in pages(site):
            problems, info = check_page(drv, base, page)
            log(f"  {'FAIL' if problems else 'ok  '} {page}: {len(info['images'])} images, "
                f"{info['typeset']} formulas typeset")
            if problems:
                failures[page] = problems
                for p in problems:
                    log(f"       {p}")
        if screenshots is not None:
            screenshots = Path(screenshots)
            if screenshots.exists():
                shutil.rmtree(screenshots)
            screenshot(drv, base, "index.html", screenshots / "home.png")
            screenshot(drv, base, f"notebooks/{SCREENSHOT_NOTEBOOK}.html",
                       screenshots / f"{SCREENSHOT_NOTEBOOK}.png", scroll_to=".cell_output img")
            screenshot(drv, base, "api/bbb_gluon.html", screenshots / "api.png")
            log(f"screenshots in {screenshots}")
    finally:
        drv.quit()
        server.shutdown()
        server.server_close()
    return failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=SITE)
    parser.add_argument("--screenshots", type=Path, default=SCREENSHOTS)
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        failures = check_site(args.site, args.screenshots)
    except FileNotFoundError as e:
        print(f"check_site: {e}", file=sys.stderr)
        return 2
    n = len(pages(args.site))
    print(f"check_site: {n - len(failures)} pages ok, {len(failures)} with problems "
          f"({time.monotonic() - start:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
