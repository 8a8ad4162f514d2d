#!/usr/bin/env bash
# SAC-Opt paper setting (spec §5/§7): seven cleaned OR benchmarks, 5 runs, GPT-4o or an open model
# behind an OpenAI-compatible endpoint. Inference only: no training, no accelerate launch needed.
#
# Data: the cleaned benchmarks of Xiao et al. 2025 (github.com/LLM4OR/LLM4OR, static/clean_benchmarks),
# laid out as $SACOPT_DATA/<dataset>/<id>/{description.txt, answer.txt[, sample.json]}
# (the layout the official SAC-Opt repo's process_data.py writes).
set -euo pipefail
cd "$(dirname "$0")/../.."
: "${SACOPT_DATA:?set SACOPT_DATA to the folder holding NL4Opt/ IndustryOR/ EasyLP/ ComplexLP/ NLP4LP/ ReSocratic/ ComplexOR/}"
export SACOPT_DATA

BACKEND="${1:-openai}"   # openai | vllm
if [[ "$BACKEND" == "vllm" ]]; then
  MODEL="${MODEL:-Qwen/Qwen2.5-72B-Instruct}"
  # Serve an open model with tensor parallelism (4 GPUs); needs `pip install -e ".[vllm]"`.
  vllm serve "$MODEL" --tensor-parallel-size "${TP:-4}" --max-model-len 16384 --port 8000 &
  SERVER=$!
  trap 'kill $SERVER' EXIT
  until curl -sf http://127.0.0.1:8000/v1/models >/dev/null; do sleep 5; done
  EXTRA=(method.llm_base_url=http://127.0.0.1:8000/v1 "method.llm_model=$MODEL" method.llm_api_key_env=VLLM_API_KEY)
else
  : "${OPENAI_API_KEY:?set OPENAI_API_KEY for GPT-4o}"
  EXTRA=(method.llm_model=gpt-4o)
fi

# Main result: LLM judge (paper default), then the similarity-verifier ablation and the no-correction ablation.
icml26 experiment=sacopt_paper "${EXTRA[@]}" method.verifier=llm_judge "$@"
icml26 experiment=sacopt_paper "${EXTRA[@]}" method.verifier=minilm "$@"
icml26 experiment=sacopt_paper "${EXTRA[@]}" method.t_max=0 "$@"
