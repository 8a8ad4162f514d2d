#!/usr/bin/env bash
# LLMInertia (ICML 2026) at paper scale. Needs GPUs, vLLM and the data files:
#   data/llminertia/explicit_test_1000.jsonl, explicit_xugou_test_1000.jsonl   (repo data/faithful/test)
#   data/llminertia/train/gongxian_{25,50,75,100}%_train.json (+ xugou)        (repo data/faithful/train)
#   data/llminertia/halueval/{qa,dialogue,summarization,general}_data.json     (HaluEval data/)
# Stage 1 (optional, STAGE=induce): continued pre-training on the co-occurrence corpora with the
#   official hyper-parameters (configs/experiment/llminertia_induce.yaml, DeepSpeed ZeRO-3 via ACCEL_CONFIG).
# Stage 2: three backbones x {plain, generic note, LLMInertia} on the two induction sets and the
#   four HaluEval sets, each backbone served by `vllm serve` (OpenAI-compatible).
# The three backbones: the repo's two + a larger one (our choice; the paper's third is unknown).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."

: "${OPENAI_API_KEY:=EMPTY}"
export OPENAI_API_KEY HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-0}"
PORT="${PORT:-8000}"
MODELS="${MODELS:-meta-llama/Llama-3.1-8B-Instruct Qwen/Qwen2.5-7B-Instruct Qwen/Qwen2.5-72B-Instruct}"

if [[ "${STAGE:-eval}" == "induce" ]]; then
  for model in meta-llama/Llama-3.1-8B-Instruct Qwen/Qwen2.5-7B-Instruct; do
    for corpus in data/llminertia/train/gongxian_*%_train.json data/llminertia/train/gongxian_xugou*%_train.json; do
      tag="$(basename "$corpus" .json)"
      accelerate launch --config_file "${ACCEL_CONFIG:-configs/accelerate/deepspeed_zero3.yaml}" -m common.cli \
        experiment=llminertia_induce method.stage=induce model.name="$model" method.corpus_path="$corpus" \
        run_dir="outputs/llminertia_induce/${model//\//_}/$tag"
    done
  done
fi

for model in $MODELS; do
  tp=1; [[ "$model" == *72B* ]] && tp="${TP_LARGE:-4}"
  vllm serve "$model" --port "$PORT" --max-model-len 2560 --tensor-parallel-size "$tp" \
    --gpu-memory-utilization 0.8 &
  server=$!
  until curl -sf "http://localhost:$PORT/v1/models" >/dev/null; do sleep 5; done
  icml26 experiment=llminertia_paper method.stage=paper method.engine=openai model.name="$model" \
    method.base_url="http://localhost:$PORT/v1" \
    run_dir="outputs/llminertia_paper/${model//\//_}"
  kill "$server"; wait "$server" || true
done
