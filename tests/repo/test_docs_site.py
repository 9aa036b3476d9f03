"""The documentation site that `make docs` builds, opened in headless Chromium.

The checks are docs/check_site.py's (that file says what they are). They need the built site
(docs/_build/html) and Debian's chromium and chromium-driver: without them the tests skip
here, and fail in CI, where .ci/run sets BBB_GLUON_REQUIRE_DOCS=1 and `make test` runs
`make docs` before pytest.
"""

import importlib.util
import os
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_site", ROOT / "docs" / "check_site.py")
check_site = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_site)


def _missing(msg):
    if os.environ.get("BBB_GLUON_REQUIRE_DOCS"):
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def browser():
    try:
        import selenium  # noqa: F401
    except ImportError:
        _missing("selenium not installed: `make docs` installs the docs extra")
    if check_site.find_browser() is None:
        _missing("chromium or chromedriver not found: apt-get install -y chromium chromium-driver")


@pytest.fixture(scope="module")
def site(browser):
    if not (check_site.SITE / "index.html").is_file():
        _missing(f"no built site at {check_site.SITE}: run `make docs`")
    return check_site.SITE


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.mark.slow
def test_every_page_loads_with_its_figures(site):
    pages = check_site.pages(site)
    notebooks = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    # Every notebook is a page, and so are the home page and the API reference.
    assert {"index.html", "api/index.html", "api/bbb_gluon.html"} <= set(pages)
    assert [p for p in pages if p.startswith("notebooks/")] == \
        [f"notebooks/{n}.html" for n in notebooks]
    assert sum(check_site.notebook_figures(n) for n in notebooks) > 0

    shots = check_site.SCREENSHOTS  # docs/_build/screenshots/, for a person to look at
    failures = check_site.check_site(site, shots, log=lambda *a: None)
    assert failures == {}

    for name in ("home", check_site.SCREENSHOT_NOTEBOOK):
        path = shots / f"{name}.png"
        assert _png_size(path) == (1280, 900)
        assert path.stat().st_size > 20_000, f"{path} looks blank"


def test_the_check_catches_a_broken_page(browser, tmp_path):
    """A missing image, a notebook page without its figures and a reStructuredText error
    are each reported: the check can fail."""
    page = ("<!DOCTYPE html><html><head><title>{title}</title></head><body><article>"
            "<h1>{title}</h1>{body}</article></body></html>")
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "index.html").write_text(page.format(
        title="Home", body='<p>text</p><img src="missing.png" alt="gone">'))
    (tmp_path / "notebooks" / f"{check_site.SCREENSHOT_NOTEBOOK}.html").write_text(page.format(
        title="Notebook", body='<div class="system-message">ERROR</div>'))
    (tmp_path / "fine.html").write_text(page.format(title="Fine", body="<p>fine</p>"))

    failures = check_site.check_site(tmp_path, None, log=lambda *a: None)

    assert set(failures) == {"index.html", f"notebooks/{check_site.SCREENSHOT_NOTEBOOK}.html"}
    assert any("images not loaded" in p for p in failures["index.html"])
    notebook = failures[f"notebooks/{check_site.SCREENSHOT_NOTEBOOK}.html"]
    assert any("reStructuredText error" in p for p in notebook)
    assert any("0 figures shown" in p for p in notebook)
