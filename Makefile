# `make run` trains the digits classifier; `make test` runs the test suite.
# Both create (or reuse) the virtual environment .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test bench serve-env clean

# editable installs of a pyproject.toml project need pip >= 21.3 (Python 3.8/3.9 bring older ones)
$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade 'pip>=21.3'
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[cpu,test]'
	touch $(STAMP)

run: $(STAMP)
	$(PY) -m gluonkit.recipes.classify $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(ARGS)

# the environment gluonkit-serve runs in (onnxruntime, numpy 2, Pillow; no mxnet), as the
# tests build it: prints its Python
serve-env: $(STAMP)
	$(PY) -m benchmarks.serving_env

bench: $(STAMP)
	$(PY) -m benchmarks.throughput $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
