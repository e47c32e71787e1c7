# The two set-up commands of the README. Both work on a fresh machine with Python >= 3.11.
#   make run    install into .venv and run the main job (a simulation on the embedded digits)
#   make check  install into .venv and run lint, type check, the docs site's strict build and the whole
#               test suite (CI runs this)
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: install install-dev clean-stamps run check lint typecheck docs docs-serve test test-slow dist bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# torch is pinned to the CPU wheel first; the package's own requirement is the range torch>=2.2,<3.
TORCH ?= torch==2.13.0
# Flower is pinned for the tests to a release whose dependencies the package index serves; the
# package's own requirement is the range flwr>=1.20,<2 (it brings Ray, which the ray extra also uses).
FLOWER ?= flwr[simulation]==1.41.0

# Each install leaves a stamp file in the venv and runs again only when pyproject.toml or this Makefile (its
# pins) is newer than the stamp: `make docs`, `make test`... reinstall nothing on a venv that is current.
# A pin given on the command line (make TORCH=...) needs `make clean-stamps` first.
INSTALLED := $(VENV)/.installed
INSTALLED_DEV := $(VENV)/.installed-dev

$(INSTALLED): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[all]'
	touch $@

$(INSTALLED_DEV): pyproject.toml Makefile | $(BIN)/python
	$(BIN)/pip install --quiet $(TORCH) '$(FLOWER)'
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

install: $(INSTALLED)

install-dev: $(INSTALLED_DEV)

clean-stamps:
	rm -f $(INSTALLED) $(INSTALLED_DEV)

run: install
	$(BIN)/fedsample run --out runs/default --overwrite

lint: install-dev
	$(BIN)/ruff check src tests benchmarks experiments examples docs/_griffe notebooks
	$(BIN)/ruff format --check src tests benchmarks experiments examples docs/_griffe notebooks

typecheck: install-dev
	$(BIN)/mypy

# The docs site (mkdocs.yml) into site/, strictly: a broken link or anchor, a docstring that does not parse
# or a cross-reference to nothing fails the build. Not --quiet: it hides the warnings that strict mode counts.
# NO_MKDOCS_2_WARNING silences a theme banner.
docs: install-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --clean --site-dir site

docs-serve: install-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict

# The tests run in parallel (pytest-xdist), one worker per logical CPU; TEST_WORKERS=0 runs them in this
# process. The default distribution (load): xdist's loadgroup/loadscope schedulers cost the controller time
# quadratic in the number of tests (seconds of CPU at 13,000).
TEST_WORKERS ?= logical
test: install-dev
	$(BIN)/pytest -q -n $(TEST_WORKERS)

# The four parts at once, once the tools are installed: the type check and the docs build take one core each
# for about a minute, which the tests (on every core) would otherwise wait for. Each part's output is printed
# whole when it ends (`make test` shows the tests' progress as they run).
check: install-dev
	$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck docs test

# The source distribution and the wheel, in dist/ (tests/test_wheel.py installs the wheel and runs it).
dist: install-dev
	rm -rf dist
	$(BIN)/python -m build --outdir dist

test-slow: install-dev
	$(BIN)/pytest -q -m slow -n $(TEST_WORKERS)

bench: install
	$(BIN)/python benchmarks/bench_samplers.py
	$(BIN)/python benchmarks/bench_engine.py
	$(BIN)/python benchmarks/bench_osmd.py
	$(BIN)/python benchmarks/bench_similarity.py

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
