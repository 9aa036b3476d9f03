"""Sphinx configuration: the documentation site that ``make docs`` builds.

The site is the README (home page), the guide pages in docs/, the notebooks rendered from
their committed outputs (never executed: they need MNIST and hours of CPU) and an API
reference generated from the docstrings. It must build offline and with no warnings
(``sphinx-build -W --keep-going``); docs/check_site.py then opens it in headless Chromium.
"""


import bbb_gluon

project = "bbb_gluon"
author = "the bbb_gluon authors"
copyright = "the bbb_gluon authors, Apache-2.0"
release = version = bbb_gluon.__version__

extensions = [
    "myst_nb",               # Markdown pages (MyST) and notebooks (.ipynb)
    "sphinx.ext.autodoc",    # the API reference, from the docstrings
    "sphinx.ext.napoleon",   # the docstrings are NumPy style (Parameters, Returns ...)
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",  # MathJax 3 copied into _static/: no CDN, math renders offline
]

root_doc = "index"
exclude_patterns = ["_build"]

# --- notebooks: rendered from their committed outputs, never executed.
nb_execution_mode = "off"
nb_merge_streams = True      # a cell's stdout (or stderr) chunks as one block, not dozens

# --- Markdown (MyST): $...$ and $$...$$ math in the notebooks' text.
myst_enable_extensions = ["dollarmath"]

# --- API reference.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# Defaults as the source writes them (``F=nd``), not their repr (a module with a file path).
autodoc_preserve_defaults = True
autodoc_default_options = {"members": True, "show-inheritance": True}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
# A dataclass's "Attributes" section becomes :ivar: fields of the class, so that autodoc's
# own entries for the dataclass fields are not a second description of the same names.
napoleon_use_ivar = True
# Type specs as napoleon reads them: a quoted string ('default "posterior_"') becomes a
# literal, not reStructuredText (where ``posterior_`` would be a link to nowhere).
napoleon_preprocess_types = True

# Docstrings write the absolute value of a mean as |μ| ("ranked by |μ|/σ"), which
# reStructuredText reads as a substitution: define it as itself, so it reads as written.
rst_prolog = r"""
.. |μ| replace:: \|μ\|
"""

# --- HTML: Furo (system fonts, no CDN), everything served from the build folder.
html_theme = "furo"
html_title = f"bbb_gluon {release}"
html_show_sourcelink = False


def _readme_link(app, docname, source):
    """docs/*.md link to ``../README.md`` (right on GitHub); on the site the README is the
    home page (index.md includes it), so point those links there."""
    if docname != "index":
        source[0] = source[0].replace("](../README.md)", "](index.md)")


def setup(app):
    app.connect("source-read", _readme_link)
