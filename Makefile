# Quick start: `make demo` (set-up + the main job) and `make test` (set-up + the whole suite).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.pate-installed

.PHONY: setup demo test bench clean

setup: $(STAMP)

# torch/torchvision are pinned to the builds that lie on this machine's disk (no download).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e '.[dev]' --config-settings editable_mode=compat
	touch $(STAMP)

demo: setup
	$(VENV)/bin/pate analyze --votes ../shared/bench/votes_1000_250teachers.npy \
	    --mechanism confident-gnmax --threshold 200 --sigma1 150 --sigma2 40 --delta 1e-5

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) benchmarks/analysis_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
