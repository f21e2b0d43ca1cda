# `make run` trains the digits classifier; `make test` runs the test suite.
# Both create (or reuse) the virtual environment .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
HOROVOD_STAMP := $(VENV)/.horovod

.PHONY: run test bench horovod serve-env annotation-tools-env clean

# editable installs of a pyproject.toml project with options for the build need pip >= 23.1
# (Python 3.8/3.9 bring older ones). The compat mode puts the checkout on sys.path, so that
# `import gluonkit` finds the package even from the folder that holds the clone (a clone
# named gluonkit is otherwise taken for an empty namespace package of that name).
$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade 'pip>=23.1'
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[cpu,test]' \
	    --config-settings editable_mode=compat
	touch $(STAMP)

# Horovod for MXNet, built from source against the installed mxnet (1 to 18 minutes on 2 cores, idle to busy):
# the variables choose MXNet and Gloo (no MPI, TensorFlow or PyTorch); no build isolation, so
# that the build sees mxnet; no cache, since pip would reuse a wheel built with other variables
$(HOROVOD_STAMP): $(STAMP)
	$(PY) -m pip install --quiet --disable-pip-version-check wheel setuptools cloudpickle psutil pyyaml packaging
	HOROVOD_WITH_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
	HOROVOD_WITHOUT_PYTORCH=1 MAKEFLAGS=-j$$(nproc) $(PY) -m pip install --quiet --disable-pip-version-check \
	    --no-cache-dir --no-build-isolation 'horovod==0.28.1'
	touch $(HOROVOD_STAMP)

horovod: $(HOROVOD_STAMP)

run: $(STAMP)
	$(PY) -m gluonkit.recipes.classify $(ARGS)

# the suite in TEST_JOBS processes (pytest-xdist), each test file in one of them; the tests
# mostly wait on the processes they start, so one per core (at most 4) fills the cores
TEST_JOBS ?= $(shell n=$$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)

test: $(STAMP)
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile $(ARGS)

# the environment gluonkit-serve runs in (onnxruntime, numpy 2, Pillow; no mxnet), as the
# tests build it: prints its Python
serve-env: $(STAMP)
	$(PY) -m benchmarks.serving_env

# the environment of the tests on annotation tools' exports (label-studio-converter, datumaro;
# numpy 2, no mxnet), as the tests build it: prints its Python
annotation-tools-env: $(STAMP)
	PYTHONPATH=. $(PY) tests/annotation_tools.py

bench: $(STAMP)
	$(PY) -m benchmarks.throughput $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
