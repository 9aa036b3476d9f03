# Two entry points, both idempotent: `make demo` and `make test`.
# The virtual environment is built once (.venv) and reused while pyproject.toml is unchanged:
# `make demo` installs what the demo needs (MXNet, NumPy, Matplotlib, tqdm), `make setup`
# (and so `make test`, `make lab`, `make docs`) the test, notebook and documentation tools too.
#
# MXNet 1.9.1 needs numpy<1.24, which has no wheels past Python 3.11: the first of python3.11
# and python3 that is 3.11 builds .venv (Debian 13's python3 is 3.13; it ships python3.11
# beside it). `make PYTHON=/path/to/python3.11` chooses one.
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for p in python3.11 python3; do \
  case "$$($$p --version 2>&1)" in ("Python 3.11."*) echo $$p; break;; esac; done)
endif
NO_PYTHON = $(VENV) needs Python 3.11 (MXNet 1.9.1 needs numpy<1.24: no wheels past 3.11), \
  and neither python3.11 nor python3 is 3.11 here: use conda (`conda env create -f \
  environment.yml`), the system package (`apt-get install python3.11`) or uv (`uv python \
  install 3.11`, then `make PYTHON=$$(uv python find 3.11)`)
VENV ?= .venv
PY := $(VENV)/bin/python
SHARED ?= ../shared
# Which MXNet 1.9.1 build `make setup` installs: cpu, or a CUDA one (cu110 ... cu117; see
# docs/development.md, "GPUs"). Change it with a fresh .venv: `make clean setup MXNET_BUILD=cu112`.
MXNET_BUILD ?= cpu
FASHION ?= /usr/share/datasets/fashion-mnist
# Offline datasets: a folder with mnist/, fashion-mnist/, mushroom/ and uci/, assembled from symlinks
# (see docs/data.md). An exported BBB_GLUON_DATA wins.
export BBB_GLUON_DATA ?= $(CURDIR)/.data

.PHONY: setup data demo lab test unit repo notebooks lint docs docs-check bench clean

setup: $(VENV)/.dev-installed

# A new .venv with a current pip and uv, made once: both installs below wait for it
# (order-only), so that `make -j demo setup` does not build it twice at once. Without
# setuptools, as Python 3.12's venv makes it (nothing here needs it at run time; installs
# build in an isolated environment of their own): where it is installed, MXNet's import of
# distutils goes through setuptools' shim, which imports pkg_resources and reads every
# installed package's metadata, 0.33 s of each process's start (median of 12 paired runs).
# A step that fails removes the new .venv, so that the next make starts it again.
$(PY):
	$(if $(PYTHON),,$(error $(NO_PYTHON)))
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip uninstall --quiet --yes setuptools || { rm -rf $(VENV); exit 1; }
	$(if $(filter 1,$(USE_UV)),$(PY) -m pip install --quiet --upgrade pip uv || )\
	  $(PY) -m pip install --quiet --upgrade pip || { rm -rf $(VENV); exit 1; }

# uv installs the same packages as pip in a third of the time (66 s against 20 s for
# `make setup` here: it downloads and byte-compiles in parallel); pip where uv fails. uv
# reads no pip.conf and no PIP_* variable: where those name your package index, use pip
# (`make setup USE_UV=0`). Both byte-compile: without it, where PYTHONDONTWRITEBYTECODE is
# set (as on the CI machines), every process would compile every module it imports again.
USE_UV ?= 1
# Each target sets EXTRAS, the package's extras it installs.
define INSTALL
if [ "$(USE_UV)" = 1 ] && [ -x $(VENV)/bin/uv ] && $(VENV)/bin/uv pip install --quiet --python $(PY) \
  --compile-bytecode -e '.[$(EXTRAS)]'; then :; \
else $(PY) -m pip install --quiet -e '.[$(EXTRAS)]'; fi
endef

# The compiled kernels, so that no import or first run has to build them.
define BUILD_KERNELS
$(PY) -c "import bbb_gluon.bandit.engine as e; e.kernels()" || \
  echo "the kernels could not be built here: plain MXNet operators will be used"
endef

# The package and one MXNet build: all `make demo` needs.
$(VENV)/.core-installed: EXTRAS = $(MXNET_BUILD)
$(VENV)/.core-installed: pyproject.toml | $(PY)
	$(INSTALL)
	$(PY) -m pip check
	$(BUILD_KERNELS)
	touch $@

# Everything (the test, notebook and documentation tools too) in one install: on a new
# .venv, one resolution instead of one per layer. Without rfc3987-syntax, which
# jupyter-events asks for so that jsonschema can check the "iri" format of Jupyter's event
# schemas: it builds a parser at import, 3 CPU-seconds of every process that imports
# nbformat or jsonschema (pytest with nbval, Sphinx, Jupyter's server), and jsonschema
# leaves its two "iri" formats unchecked without it.
$(VENV)/.dev-installed: EXTRAS = $(MXNET_BUILD),test,notebooks,docs
$(VENV)/.dev-installed: pyproject.toml | $(PY)
	$(INSTALL)
	$(PY) -m pip uninstall --quiet --yes rfc3987-syntax
	$(PY) -m pip check
	$(BUILD_KERNELS)
	touch $(VENV)/.core-installed $@

# Link whatever copies this machine has; missing ones are simply absent
# (data tests then skip locally, and fail in CI where BBB_GLUON_REQUIRE_DATA=1).
data:
	@if [ "$(BBB_GLUON_DATA)" = "$(CURDIR)/.data" ]; then \
	  mkdir -p .data; \
	  if [ -d $(SHARED)/data/mnist ] && [ ! -e .data/mnist ]; then ln -s $(abspath $(SHARED))/data/mnist .data/mnist; fi; \
	  if [ -d $(FASHION) ] && [ ! -e .data/fashion-mnist ]; then ln -s $(FASHION) .data/fashion-mnist; fi; \
	  if [ -d $(SHARED)/data/mushroom ] && [ ! -e .data/mushroom ]; then ln -s $(abspath $(SHARED))/data/mushroom .data/mushroom; fi; \
	  if [ -d $(SHARED)/data/uci ] && [ ! -e .data/uci ]; then ln -s $(abspath $(SHARED))/data/uci .data/uci; fi; \
	fi

demo: $(VENV)/.core-installed
	$(VENV)/bin/bbb-gluon demo --out runs/demo

# Jupyter on the notebooks, with BBB_GLUON_DATA (exported above) pointing at the data. The
# `notebooks` extra's `jupyter` brings JupyterLab from version 1.1 on; an older one gets the
# classic notebook.
lab: setup data
	@echo "BBB_GLUON_DATA=$(BBB_GLUON_DATA)"
	@if [ -x $(VENV)/bin/jupyter-lab ]; then $(VENV)/bin/jupyter lab notebooks/; \
	else $(VENV)/bin/jupyter notebook notebooks/; fi

lint: setup
	$(VENV)/bin/ruff check .

# Tests run in TEST_WORKERS processes side by side (pytest-xdist; `auto`: one per core,
# `make test TEST_WORKERS=0` runs them in this one process). Most tests use one core; the
# launches' tests use several, so two cores cut the time by about a third, not a half.
TEST_WORKERS ?= auto
XDIST = -n $(TEST_WORKERS)

# The package's tests, laid out as the package is (tests/core, tests/training, ...).
unit: setup data
	$(VENV)/bin/pytest tests --ignore=tests/repo $(XDIST) --dist worksteal --durations=15

# The repository's checks: the import arrows, docs and README against the code and the
# committed results, the environment files, the notebooks' rules, the benchmarks' --tiny runs.
repo: setup data
	$(VENV)/bin/pytest tests/repo $(XDIST) --dist worksteal --durations=10

notebooks: setup data
	@if ls notebooks/*.ipynb >/dev/null 2>&1; then \
	  CI=$${CI:-true} $(VENV)/bin/pytest --nbval-lax --nbval-cell-timeout=600 $(XDIST) \
	    --dist loadscope --durations=10 notebooks; \
	else echo "no notebooks yet"; fi

# The documentation site, docs/_build/html/ (docs/development.md, "Documentation"): the
# notebooks from their committed outputs (never executed), the API from the docstrings;
# a warning is an error. -E reads every page each time, so that a warning is never hidden
# by an earlier build's saved state.
docs: setup
	$(VENV)/bin/sphinx-build -W --keep-going -E -q -b html docs docs/_build/html

# ... opened in headless Chromium (apt-get install chromium chromium-driver): every page
# loads, every figure shows; screenshots in docs/_build/screenshots/.
docs-check: docs
	$(PY) docs/check_site.py

# The three suites above in one pytest session: one start-up instead of three, and both
# workers busy to the end. --dist loadgroup as tests/conftest.py schedules it: each
# notebook is one unit (its cells in order on one worker), every other test one of its own;
# the notebooks go first, then the tests marked slow. tests/repo/test_docs_site.py builds
# the site with the docs recipe above, beside the other tests.
test: lint data
	CI=$${CI:-true} $(VENV)/bin/pytest tests notebooks --nbval-lax --nbval-cell-timeout=600 \
	  $(XDIST) --dist loadgroup --durations=20

bench: setup data
	$(PY) benchmarks/bench_epoch.py

clean:
	rm -rf $(VENV) .data .pytest_cache .ruff_cache docs/_build
