#!/usr/bin/env bash
# SAC-Opt paper setting (icml26 experiment=sacopt_paper, stage `paper`, benchmark=or_clean7): the seven cleaned OR benchmarks, 5 runs (mean ± std), GPT-4o or
# an open model behind an OpenAI-compatible endpoint. Inference only: no training, no GPU for GPT-4o.
#
# Data: the cleaned benchmarks of Xiao et al. 2025, github.com/LLM4OR/LLM4OR, folder
# static/clean_benchmarks, read through SACOPT_DATA by configs/benchmark/or_clean7.yaml (NL4Opt/, IndustryOR.jsonl, Mamo/Mamo_{easy,complex}_lp_clean.jsonl, NL4LP/,
# ReSocratic.jsonl, ComplexOR/), read as published by methods/sacopt/data.py. The official SAC-Opt
# repo's processed layout <dataset>/<id>/{description.txt, answer.txt} works too.
#
# Usage:
#   OPENAI_API_KEY=... scripts/reproduce/sacopt.sh                 # GPT-4o, all 7 benchmarks, 5 seeds
#   scripts/reproduce/sacopt.sh vllm                               # open model via `vllm serve` (4 GPUs)
#   SMOKE=1 scripts/reproduce/sacopt.sh ...                        # 2 problems per benchmark, 1 seed
#   SACOPT_DATA=/path/to/clean_benchmarks scripts/reproduce/sacopt.sh   # use an existing copy
# Extra arguments are passed to every icml26 call (Hydra overrides, e.g. method.workers=16).
# Output: outputs/sacopt_paper_<arm>/{results.json, results.md, paper_table.md, results_<ds>_seed<k>.jsonl}
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."

BACKEND="openai"
if [[ "${1:-}" == "openai" || "${1:-}" == "vllm" ]]; then BACKEND="$1"; shift; fi

if [[ -z "${SACOPT_DATA:-}" ]]; then
  if [[ ! -d data/LLM4OR ]]; then
    git clone --depth 1 https://github.com/LLM4OR/LLM4OR.git data/LLM4OR
  fi
  SACOPT_DATA="$PWD/data/LLM4OR/static/clean_benchmarks"
fi
export SACOPT_DATA

if [[ "$BACKEND" == "vllm" ]]; then
  MODEL="${MODEL:-Qwen/Qwen2.5-72B-Instruct}"
  # Serve an open model with tensor parallelism; needs `pip install -e ".[vllm]"`.
  vllm serve "$MODEL" --tensor-parallel-size "${TP:-4}" --max-model-len 16384 --port 8000 &
  SERVER=$!
  trap 'kill $SERVER' EXIT
  until curl -sf http://127.0.0.1:8000/v1/models >/dev/null; do sleep 5; done
  EXTRA=(method.llm_base_url=http://127.0.0.1:8000/v1 "method.llm_model=$MODEL" method.llm_api_key_env=VLLM_API_KEY)
else
  : "${OPENAI_API_KEY:?set OPENAI_API_KEY for GPT-4o (or run: scripts/reproduce/sacopt.sh vllm)}"
  EXTRA=(method.llm_model=gpt-4o)
fi
if [[ -n "${SMOKE:-}" ]]; then EXTRA+=(method.max_problems=2 "method.seeds=[0]"); fi

# Main result (LLM judge, the paper default), then the similarity-verifier and no-correction ablations.
icml26 experiment=sacopt_paper "${EXTRA[@]}" method.verifier=llm_judge run_dir=outputs/sacopt_paper_judge "$@"
icml26 experiment=sacopt_paper "${EXTRA[@]}" method.verifier=minilm run_dir=outputs/sacopt_paper_minilm "$@"
icml26 experiment=sacopt_paper "${EXTRA[@]}" method.t_max=0 run_dir=outputs/sacopt_paper_no_correction "$@"
for arm in judge minilm no_correction; do cat "outputs/sacopt_paper_$arm/paper_table.md"; done
