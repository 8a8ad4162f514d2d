#!/usr/bin/env bash
# The prepared GPU check (issue: past one CPU): every paper stage for one or two steps in bfloat16 on
# tiny local models, vLLM engine paths where vllm imports; one line per method; no network needed.
# Needs this project installed with its test extras (make install, or pip install -e ".[all,dev]").
# Usage: bash scripts/gpu_smoke.sh [--only maxrl apo ...] [--device cpu]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
exec timeout 480 "$PY" -m scripts.gpu_smoke "$@"
