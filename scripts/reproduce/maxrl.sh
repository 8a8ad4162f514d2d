#!/usr/bin/env bash
# MaxRL paper-scale reproduction (spec §7). GPU only: 8+ GPUs, pip install -e ".[vllm]".
# Qwen3-4B-Base on POLARIS-53K, MaxRL vs GRPO, then pass@k (k = 1..1024) and TTS efficiency.
# The paper used 32 H200 (4 nodes) with verl + Ray; here: accelerate + FSDP, vLLM colocated.
set -euo pipefail
cd "$(dirname "$0")/../.."
ACC=${ACC:-configs/accelerate/multi_gpu_fsdp.yaml}
OUT=${OUT:-outputs/maxrl_paper}

for est in maxrl grpo; do
  accelerate launch --config_file "$ACC" -m methods.maxrl.paper train \
    method.advantage_estimator=$est method.paper.output_dir=$OUT seed=79
  python -m methods.maxrl.paper eval "$OUT/$est/final" method.paper.output_dir=$OUT
done
python -m methods.maxrl.paper compare "$OUT/maxrl/final/eval.json" "$OUT/grpo/final/eval.json"

# SmolLM2-360M-Instruct on GSM8K (paper Table 5): 256 prompts x 128 rollouts, lr 1e-5, 1500 steps,
# max response 2048, reward 0 on truncation, test on GSM8K-Platinum with n = 1024.
if [[ "${SMOLLM:-0}" == "1" ]]; then
  S="method.num_generations=128 method.paper.model=HuggingFaceTB/SmolLM2-360M-Instruct \
     method.paper.train_set=gsm8k method.paper.eval_sets=[gsm8k_platinum] method.paper.lr=1e-5 \
     method.paper.max_steps=1500 method.paper.max_prompt_length=512 \
     method.paper.max_completion_length=2048 method.paper.zero_reward_on_truncation=true \
     method.paper.output_dir=$OUT/smollm"
  for est in maxrl grpo; do
    accelerate launch --config_file "$ACC" -m methods.maxrl.paper train method.advantage_estimator=$est $S
    python -m methods.maxrl.paper eval "$OUT/smollm/$est/final" $S
  done
  python -m methods.maxrl.paper compare "$OUT/smollm/maxrl/final/eval.json" "$OUT/smollm/grpo/final/eval.json"
fi
