"""The documentation site, built as `make docs` builds it and opened in headless Chromium.

The site is built here, into a folder of the test's own, with the recipe of the Makefile's
`docs` target (a warning fails it), so that `make test` checks this tree's site and the
build, on one core, runs beside the other tests instead of before them. The page checks are
docs/check_site.py's (that file says what they are) and need Debian's chromium and
chromium-driver. Without Sphinx or the browser the
tests skip here, and fail in CI, where .ci/run sets BBB_GLUON_REQUIRE_DOCS=1.
"""

import importlib.util
import os
import re
import shlex
import struct
import subprocess
import sys
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


def docs_recipe():
    """The arguments of ``sphinx-build`` in the Makefile's ``docs`` recipe."""
    recipe = re.search(r"^docs: .*\n\t\$\(VENV\)/bin/sphinx-build (.+)$",
                       (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert recipe, "the Makefile has no `docs` target running sphinx-build"
    return shlex.split(recipe.group(1))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    # Into a folder of its own, so that a `make docs` beside it does not build into the same.
    if importlib.util.find_spec("sphinx") is None:
        _missing("Sphinx not installed: `make setup` installs the docs extra")
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "sphinx", *docs_recipe()[:-1], str(out)],
                           cwd=ROOT, capture_output=True, text=True, timeout=500)
    assert built.returncode == 0, f"the site did not build:\n{built.stderr[-4000:]}"
    assert (out / "index.html").is_file()
    return out


def test_the_docs_recipe_fails_on_a_warning():
    args = docs_recipe()
    assert args[-2:] == ["docs", str(check_site.SITE.relative_to(ROOT))]
    assert "-W" in args


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


@pytest.mark.slow
@pytest.mark.timeout(600)  # the site's build, on one core of a busy machine, then the pages
def test_every_page_loads_with_its_figures(site, browser):
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
