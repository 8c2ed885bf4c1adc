# Set-up and everyday commands. `make test` and `make train` work on a fresh clone:
# they create the virtual environment, install the pinned torch, build the engine, then run.
#
# GPU users choose their own torch build, e.g. `make TORCH="torch==2.13.0 --index-url URL" install`.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
ARGS ?=

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ENGINE_SRC := amazons/_engine.pyx amazons/_engine.pxd setup.py
ENGINE_SO := amazons/.engine-built

.PHONY: install build test test-fast lint train bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install $(TORCH)
	$(BIN)/pip install "setuptools>=68" wheel "Cython>=3.0" "numpy>=1.24"
	$(BIN)/pip install --no-build-isolation -e ".[test,bench,ray]"
	touch $@

$(ENGINE_SO): $(STAMP) $(ENGINE_SRC)
	$(BIN)/python setup.py -q build_ext --inplace
	$(BIN)/python -c "import amazons.mcts as m; print(f'search kernels compiled in {m.warm_up():.1f} s')"
	touch $@

build: $(ENGINE_SO)

test: build
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q $(ARGS)

test-fast: build
	$(BIN)/python -m pytest -q -m "not slow" $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

train: build
	$(BIN)/python -m amazons.train $(ARGS)

bench: build
	$(BIN)/python benchmarks/run.py $(ARGS)

clean:
	rm -rf build amazons/*.so amazons/_engine.c $(ENGINE_SO) *.egg-info
