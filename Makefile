# Two entry points: `make demo` and `make test`. Both create or reuse .venv in the repo root.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PIP    := $(VENV)/bin/pip
PY     := $(VENV)/bin/python
# torch is pinned: PyPI's 2.13.0 build (it runs on the CPU without a GPU; pip's cache keeps it for later venvs).
TORCH  := torch==2.13.0

.PHONY: demo lab labextension check test test-fast bench clean-venv controlplane

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The JupyterLab panel (labextension/, TypeScript) is built with npm and @jupyterlab/builder into
# gpujobs/lab/labextension, which the install copies to share/jupyter/labextensions/gpujobs;
# rebuilt when its sources change. The builder reads the core package list of the venv's JupyterLab.
LABEXT     := gpujobs/lab/labextension/package.json
LABEXT_SRC := labextension/package.json labextension/package-lock.json labextension/tsconfig.json \
              $(wildcard labextension/src/*.ts labextension/style/*.css)

$(LABEXT): $(LABEXT_SRC) | $(VENV)/bin/python
	$(PIP) install -q "jupyterlab>=4,<5"
	cd labextension && npm ci --no-audit --no-fund --loglevel=error && npx tsc
	cd labextension && node node_modules/@jupyterlab/builder/lib/build-labextension.js \
	  --core-path "$$($(abspath $(PY)) -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')" .
	touch $@

$(VENV)/.demo: $(VENV)/bin/python pyproject.toml $(LABEXT)
	$(PIP) install -q -e ".[notebook,metrics]" "$(TORCH)"
	touch $@

$(VENV)/.dev: $(VENV)/bin/python pyproject.toml $(LABEXT)
	bash scripts/setup-system.sh
	$(PIP) install -q -e ".[dev]"
	touch $@ $(VENV)/.demo

demo: $(VENV)/.demo
	$(PY) examples/quickstart.py

labextension: $(LABEXT)

# JupyterLab (127.0.0.1) on the notebook quickstart, with the widgets, %%gpujob and the GPU jobs panel
# (as root, e.g. in a container, Jupyter refuses to start without --allow-root)
lab: $(VENV)/.demo
	$(VENV)/bin/jupyter lab examples/notebook_quickstart.ipynb $(if $(filter 0,$(shell id -u)),--allow-root)

# lint, type and layer check first (configured in pyproject.toml: [tool.ruff], [tool.mypy],
# [tool.importlinter]), then the tests
check: $(VENV)/.dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# the real control plane the realcp tests start (etcd, kube-apiserver, kcm, scheduler, Kueue), built
# from upstream Go modules into ~/.cache/gpujobs-controlplane/<stamp>/bin; seconds when already built
controlplane:
	bash tools/controlplane/build.sh

# The suite runs on TEST_WORKERS pytest-xdist workers. Most of it waits on real processes (ranks,
# Ray, the simulated and the real control plane), one core busy on average: two workers on two
# cores take about 15 min instead of 24. Tests that share a session fixture (the real control
# plane, the wheel, Chromium) stay on one worker (tests/conftest.py). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -rs -n $(TEST_WORKERS) --dist loadgroup

test: check controlplane
	$(PYTEST) --durations=15 $(PYTEST_ARGS)

test-fast: check
	$(PYTEST) -m "not slow" $(PYTEST_ARGS)

bench: $(VENV)/.dev
	$(PY) benchmarks/local_launch.py

clean-venv:
	rm -rf $(VENV)
