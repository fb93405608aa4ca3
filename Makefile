# Quick start: `make demo` (set-up + the main job) and `make test` (set-up + the whole suite).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.pate-installed

.PHONY: setup demo test lint bench clean

setup: $(STAMP)

# torch/torchvision are pinned to the builds that lie on this machine's disk (no download).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(PY) -m pip install -q -e '.[dev,ray]' --config-settings editable_mode=compat
	touch $(STAMP)

# The main job: Fashion-MNIST from Debian's dataset-fashion-mnist (installed here when missing and
# apt is usable), then the whole pipeline. --resume: a second `make demo` reuses the finished run.
FMNIST_DIR := /usr/share/datasets/fashion-mnist
demo: setup
	@if [ ! -e $(FMNIST_DIR)/train-images-idx3-ubyte.gz ] && [ ! -e $(FMNIST_DIR)/train-images-idx3-ubyte ]; then \
	    if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	        apt-get update -q && apt-get install -y -q dataset-fashion-mnist; \
	    else \
	        echo "Fashion-MNIST is missing: install Debian's dataset-fashion-mnist (as root), or set"; \
	        echo "[data] root / download in configs/fashion_mnist.toml"; \
	    fi; \
	fi
	$(VENV)/bin/pate run --config configs/fashion_mnist.toml --resume

# Two workers (pytest-xdist) on CI's 2 cores: 9-10 minutes instead of 13 for the whole suite.
test: setup lint
	$(PY) -m pytest -q -n 2

# ruff (lint) and mypy (strict on analysis/ and the pate core: pate/core, pate/mechanisms,
# pate/ledger), both configured in pyproject.toml; `make test` runs this first (so CI does).
lint: setup
	$(VENV)/bin/ruff check pate teachers student analysis tests benchmarks
	$(VENV)/bin/ruff format --check pate teachers student analysis tests benchmarks
	$(VENV)/bin/mypy

bench: setup
	$(PY) benchmarks/analysis_speed.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
