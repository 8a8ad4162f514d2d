#!/usr/bin/env bash
# LLMInertia (ICML 2026) at paper scale (spec §7), inference part only: the induction test set
# answered by Llama-3.1-8B-Instruct / Qwen2.5-7B-Instruct served by vLLM, three arms
# (plain prompt, generic note, LLMInertia adaptive notes).
# Not covered yet: the induction runs (continued_pretrain on the co-occurrence corpora at
# 25/50/75/100 %, checkpoints every 10 steps) and the four context-rich datasets (spec §3.3).
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${OPENAI_API_KEY:=EMPTY}"
export OPENAI_API_KEY
MODEL="${MODEL:-meta-llama/Llama-3.1-8B-Instruct}"
PORT="${PORT:-8000}"
DATA="${DATA:-null}"   # repo data/faithful/test/explicit_test_1000.json (JSONL with "input"), or generated

vllm serve "$MODEL" --port "$PORT" --max-model-len 2560 --tensor-parallel-size "${TP:-1}" &
SERVER=$!
trap 'kill $SERVER' EXIT
until curl -sf "http://localhost:$PORT/v1/models" >/dev/null; do sleep 5; done

for family in medical synthetic; do
  python scripts/run.py experiment=llminertia_paper method.model="$MODEL" \
    method.base_url="http://localhost:$PORT/v1" method.data_path="$DATA" \
    method.family="$family" method.prompt_set="$family" \
    run_dir="outputs/llminertia_paper/${MODEL//\//_}_$family"
done
