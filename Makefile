# `make demo`, `make test` and `make test-all` create .venv if missing, install (CPU torch first),
# install bubblewrap when they can (root + apt-get), then run.
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.icml26-installed
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export WANDB_MODE ?= disabled
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install test test-all lint demo clean sandbox

# bubblewrap isolates model-generated code (common/sandbox.py). As root with apt-get it is installed
# here; elsewhere the sandbox tests skip and the demo's sacopt row says why (apt-get install bubblewrap).
sandbox:
	@command -v bwrap >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
	  && echo "[sandbox] installing bubblewrap with apt-get" \
	  && (apt-get install -y -q bubblewrap >/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 \
	  && apt-get install -y -q bubblewrap >/dev/null 2>&1)) ; } \
	  || echo "bubblewrap not installed (needs root and apt-get): sandbox tests and the demo's sacopt row skip"

$(PY):
	@python3 -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(PY)
	@echo "[install] $(VENV): CPU torch, then the project with its extras (a few minutes, once)"
	@$(PY) -m pip install -qq --upgrade pip
	@$(PY) -m pip install -qq torch==2.13.0
	@$(PY) -m pip install -qq -e ".[all,dev]" -c constraints.txt
	@touch $(STAMP)

install: $(STAMP)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The quick tier (a few minutes): every method's equations, fixtures, bad-input errors, the config
# contract and one tiny end-to-end run per method. Tests marked `slow` (paper-preset runs, multi-process
# launches, toy-size runs, benches) run in `make test-all`, which is what CI runs.
test: lint sandbox
	ICML26_PROGRESS=0 $(PY) -m pytest -q -m "not slow" --durations=15

test-all: lint sandbox
	ICML26_PROGRESS=0 $(PY) -m pytest -q --durations=15

demo: install sandbox
	@$(PY) -m scripts.demo

clean:
	rm -rf $(VENV) outputs results .pytest_cache .ruff_cache
