# `make test` and `make demo` create .venv if missing, install (CPU torch first), then run.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.icml26-installed
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export WANDB_MODE ?= disabled
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install test lint demo clean sandbox

# bubblewrap isolates model-generated code (common/sandbox.py). As root with apt-get it is
# installed here; elsewhere the sandbox tests skip and print why (install it: apt-get install bubblewrap).
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 \
	  && apt-get install -y -q bubblewrap >/dev/null 2>&1)) ; } || echo "bubblewrap not installed: sandbox tests will skip"

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[all,dev]" -c constraints.txt
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint sandbox
	ICML26_PROGRESS=0 $(PY) -m pytest -q --durations=15

demo: install
	$(PY) -m scripts.demo

clean:
	rm -rf $(VENV) outputs results .pytest_cache .ruff_cache
