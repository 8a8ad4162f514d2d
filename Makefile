# `make test` and `make demo` create .venv if missing, install (CPU torch first), then run.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.icml26-installed
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export WANDB_MODE ?= disabled
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install test lint demo clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]" -c constraints.txt
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint
	ICML26_PROGRESS=0 $(PY) -m pytest -q --durations=15

demo: install
	$(PY) -m scripts.demo

clean:
	rm -rf $(VENV) outputs results .pytest_cache .ruff_cache
