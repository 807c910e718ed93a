# nbcast — the two commands: `make demo` and `make test`. Both set up everything.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PY_STAMP := $(VENV)/.installed-python
LAKE := notebooks/examples/lake/orders.parquet
export RAY_USAGE_STATS_ENABLED := 0
# The demo's and the tests' Ray clusters live on loopback only: no token auth.
export RAY_AUTH_MODE := disabled
# The suite runs in pytest-xdist workers: more than the 2 cores, since most tests
# wait on kernels, servers, browsers and the database rather than compute. A test file
# stays in one worker (--dist loadfile), so its module fixtures (live servers, delivered
# reports) start once. (--dist loadgroup would also gather the Ray tests of three files,
# but xdist 3.8 marks groups by rewriting item._nodeid, which pytest 9 no longer reads.)
TEST_WORKERS ?= 3
PYTEST_ARGS ?=

.PHONY: demo docs-images test test-fast api-types lint typecheck install lake clean bench chromium bubblewrap promtool labextension

# The JupyterLab extension (labextension/, TypeScript) is built with jlpm — the yarn
# that jupyterlab ships, from the PyPI package jupyter-builder — into nbcast/labextension,
# which the wheel ships as a prebuilt extension. It is rebuilt only when its sources
# change (the stamp), and the venv's installed copy refreshed, so a change of the
# TypeScript costs one build, not a reinstall. Needs Node.js >= 20.19 and the npm
# registry (or jlpm's cache); a user installing the wheel needs neither.
LABEXT := labextension
LABEXT_STAMP := $(VENV)/.labextension
LABEXT_SHARE := $(VENV)/share/jupyter/labextensions/nbcast
LABEXT_SRC := $(shell find $(LABEXT)/src $(LABEXT)/style $(LABEXT)/schema -type f 2>/dev/null) \
  $(addprefix $(LABEXT)/,package.json yarn.lock tsconfig.json .yarnrc.yml)
JLPM := cd $(LABEXT) && PATH="$(CURDIR)/$(BIN):$$PATH" $(CURDIR)/$(BIN)/jlpm

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip uv

# Install the project with its dev extra. Bytecode is compiled at install time
# because this machine sets PYTHONDONTWRITEBYTECODE, which otherwise makes every
# process re-compile its imports (seconds for ray/sqlalchemy/jupyter). The package
# rfc3987-syntax is removed: jsonschema only uses it when present, and importing it
# builds a grammar that costs ~3 s in every papermill run, Ray worker and pytest start.
$(LABEXT_STAMP): $(LABEXT_SRC) | $(BIN)/python
	$(BIN)/uv pip install --quiet --python $(BIN)/python 'jupyter-builder>=1.3,<2'
	$(JLPM) install --immutable
	$(JLPM) build:prod
	if [ -d $(LABEXT_SHARE) ]; then rm -rf $(LABEXT_SHARE) && cp -r nbcast/labextension $(LABEXT_SHARE) && cp install.json $(LABEXT_SHARE)/; fi
	touch $@

labextension: $(LABEXT_STAMP)

# The Python side alone (what `make lint`, `make typecheck` and `make test-fast` need:
# no Node.js, no TypeScript build). SKIP_JUPYTER_BUILDER: the extension is built by its
# own stamp above, never by the install hook.
$(PY_STAMP): pyproject.toml tests/plugin/pyproject.toml | $(BIN)/python
	SKIP_JUPYTER_BUILDER=1 $(BIN)/uv pip install --python $(BIN)/python -e '.[dev]'
	# The tests' plug-in goes beside the environment, never into it: only pytest puts it
	# on the path (tests/conftest.py), so the demo and a user's nbcast never offer it.
	$(BIN)/uv pip uninstall --python $(BIN)/python nbcast-testplugin 2>/dev/null || true
	rm -rf $(VENV)/test-plugins
	$(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps --target $(VENV)/test-plugins ./tests/plugin
	$(BIN)/uv pip uninstall --python $(BIN)/python rfc3987-syntax 2>/dev/null || true
	$(BIN)/python -m compileall -q -j 0 nbcast "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null 2>&1 || true
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (nbcast)" >/dev/null
	touch $@

# Everything: the Python side and the built extension, copied where jupyter finds it.
$(STAMP): $(PY_STAMP) $(LABEXT_STAMP)
	rm -rf $(LABEXT_SHARE) && mkdir -p $(dir $(LABEXT_SHARE))
	cp -r nbcast/labextension $(LABEXT_SHARE) && cp install.json $(LABEXT_SHARE)/
	touch $@

install: $(STAMP) $(LABEXT_STAMP)

$(LAKE): notebooks/examples/lake/generate.py | $(STAMP)
	$(BIN)/python notebooks/examples/lake/generate.py

lake: $(LAKE)

demo: install lake chromium bubblewrap
	$(BIN)/python scripts/demo.py

# The demo, also refreshing the README's page images in docs/images.
docs-images: install lake
	NBCAST_DEMO_DOCS=1 $(BIN)/python scripts/demo.py

# The browser tests drive Debian's chromium through Playwright (Playwright cannot
# download its own browser here). Installed when missing; needs root or sudo.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium >/dev/null; }

# Every report's kernel runs in a bubblewrap sandbox (nbcast.sandbox); the tests'
# probes need it. Installed when missing; needs root or sudo.
bubblewrap:
	@command -v bwrap >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq bubblewrap >/dev/null; }

# promtool (Debian's prometheus package; its server is not started) checks the metrics
# exposition and the alert rules in deploy/prometheus.
promtool:
	@command -v promtool >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

test: install lake chromium bubblewrap promtool
	$(JLPM) test
	$(BIN)/ruff check nbcast tests benchmarks scripts notebooks
	$(BIN)/ruff format --check nbcast tests benchmarks scripts
	$(BIN)/mypy
	$(BIN)/python -m pytest -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS) tests
	cd notebooks/examples && ../../$(BIN)/python -m pytest -p no:cacheprovider --nbval-lax -q .

# The Lab extension's API types, from the REST API's OpenAPI components.
api-types: $(PY_STAMP)
	$(BIN)/python -m nbcast.server_extension.typescript labextension/src/generated/api_types.ts

lint: $(PY_STAMP)
	$(BIN)/ruff check nbcast tests benchmarks scripts notebooks
	$(BIN)/ruff format --check nbcast tests benchmarks scripts

typecheck: $(PY_STAMP)
	$(BIN)/mypy

# The development loop: every test that needs no PostgreSQL, Ray, Chromium, kernel or
# service process, and is not slow (markers: pyproject.toml; tests/conftest.py marks the
# PostgreSQL and Ray users from their fixtures). No Node.js needed.
FAST := not postgres and not ray and not chromium and not kernels and not slow
test-fast: $(PY_STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -q -n $(TEST_WORKERS) -m "$(FAST)" $(PYTEST_ARGS) tests

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache nbcast/labextension $(LABEXT)/lib
