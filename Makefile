# Set-up and everyday commands. `make test` and `make train` work on a fresh clone:
# they create the virtual environment, install the pinned torch, build the engine, then run.
#
# GPU users choose their own torch build, e.g. `make TORCH="torch==2.13.0 --index-url URL" install`.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
ARGS ?=
# Debian's Chromium, which the browser tests (tests/test_web_browser.py) drive through Playwright.
CHROMIUM ?= /usr/bin/chromium

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ENGINE_SRC := amazons/_engine.pyx amazons/_engine.pxd amazons/_engine_board.h amazons/_native.pyx $(wildcard amazons/native/*) setup.py
ENGINE_SO := amazons/.engine-built

.PHONY: install build browser test test-fast lint train bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	$(BIN)/pip install $(TORCH)
	$(BIN)/pip install "setuptools>=68" wheel "Cython>=3.0" "numpy>=1.24"
	$(BIN)/pip install --no-build-isolation -e ".[test,bench,envs,web,ray]"
	touch $@

$(ENGINE_SO): $(STAMP) $(ENGINE_SRC)
	$(BIN)/python setup.py -q build_ext --inplace
	$(BIN)/python -c "import amazons.mcts as m; print(f'search kernels compiled in {m.warm_up():.1f} s')"
	touch $@

build: $(ENGINE_SO)

# Installed from the distribution's packages when missing (as root, or through sudo).
$(CHROMIUM):
	@echo "$(CHROMIUM) is missing: installing Debian's chromium for the browser tests"
	if [ "$$(id -u)" = 0 ]; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	else sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; fi

browser: $(CHROMIUM)

# The suite runs in two parts: first every test not marked `serial` on $(TEST_WORKERS) pytest-xdist
# workers, each worker taking whole files (module fixtures stay shared), in the order of collection
# (tests/conftest.py puts the longest files first; xdist's own order, by number of tests, would
# leave a long file of few tests for last, alone on one worker); then the `serial` tests alone
# (they time a reply or a stop on the wall clock, which a neighbouring test's load would stretch,
# or run the cpu preset, whose niceness-10 self-play would give way to a neighbouring worker). MARK narrows both parts, e.g. MARK="not slow". Every test has a ceiling
# (pyproject.toml's `timeout`, 4 times it for the tests marked slow: a hung test fails with its
# stack), and each session fails if a process it started still runs at its end (tests/harness.py).
TEST_WORKERS ?= 2
MARK ?=
PYTEST := AMAZONS_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -q --durations=15
AND_MARK := $(if $(MARK), and ($(MARK)))

test: build browser
	$(BIN)/ruff check .
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial$(AND_MARK)" $(ARGS)
	$(PYTEST) -m "serial$(AND_MARK)" $(ARGS) || [ $$? -eq 5 ]

test-fast:
	$(MAKE) test MARK="not slow"

lint: $(STAMP)
	$(BIN)/ruff check .

train: build
	$(BIN)/python -m amazons.train $(ARGS)

bench: build
	$(BIN)/python benchmarks/run.py $(ARGS)

# Besides the builds: setup.py's copies of _engine.pyx/.pxd for the other board sizes, and their C.
clean:
	rm -rf build amazons/*.so amazons/_engine.c amazons/_native.cpp $(ENGINE_SO) *.egg-info
	rm -f $(foreach n,6 7 9 10,amazons/_engine$(n).pyx amazons/_engine$(n).pxd amazons/_engine$(n).c)
