# `make train` runs the main job, `make test` the test suite; both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= configs/local.yaml

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch first (a newer or unpinned torch pulls a multi-GB CUDA build).
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

.PHONY: setup train test test-gpu test-multigpu bench clean
setup: $(BIN)/.installed

train: setup
	$(BIN)/rl-zerosync train --config $(CONFIG)

# The suite in one shuffled order (pytest-randomly, a fixed seed: every run the same order, and no
# test may depend on running after another); pass SEED=... for another order, -p no:randomly for file order.
# JOBS pytest-xdist workers (default: one per core plus one: many tests wait on the commands and Ray
# processes they start), each taking whole files (--dist loadfile: a file's module-scoped Ray and
# fixtures are built once), the files with `slow` tests first (tests/conftest.py; --no-loadscope-reorder
# keeps that order); JOBS=0 runs the suite in this process.
SEED ?= 20261202
JOBS ?= $(shell $(PY) -c "import os; print((os.cpu_count() or 1) + 1)")
test: setup
	$(BIN)/python -m pytest -q --randomly-seed=$(SEED) -n $(JOBS) --dist loadfile --no-loadscope-reorder

test-gpu: setup
	$(BIN)/python -m pytest -q -m gpu

test-multigpu: setup
	$(BIN)/python -m pytest -q -m multigpu

bench: setup
	$(BIN)/rl-zerosync bench

clean:
	rm -rf $(VENV) build *.egg-info
