#!/usr/bin/env bash
# MaxRL at paper scale (arXiv 2602.02710 §6.4): Qwen3-4B-Base on POLARIS-53K, MaxRL vs GRPO, then
# pass@k (k = 1..1024) on AIME25 / BeyondAIME / MATH-500 / Minerva and the test-time-scaling
# efficiency (Fig. 5). GPU only (pip install -e ".[vllm]"); the paper used 32 H200 with verl, here
# accelerate + FSDP with vLLM colocated. SMOLLM=1 runs the SmolLM2-360M / GSM8K setting (Table 5).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."
ACC=${ACC:-configs/accelerate/multi_gpu_fsdp.yaml}
OUT=${OUT:-outputs/maxrl_paper}
EXP=maxrl_paper
[[ "${SMOLLM:-0}" == "1" ]] && EXP=maxrl_paper_smollm

# ESTIMATORS="maxrl grpo rloo pkpo differential_smoothing self" runs the baselines of Tables 3-4 too
# (GRPO + entropy bonus: ESTIMATORS=grpo and the override method.trainer.entropy_coef=<c>).
for est in ${ESTIMATORS:-maxrl grpo}; do
  accelerate launch --config_file "$ACC" -m common.cli experiment=$EXP method.stage=train \
    method.trainer.advantage_estimator=$est run_dir=$OUT/$est/train "$@"
  icml26 experiment=$EXP method.stage=eval model.path=$OUT/$est/train/train/final \
    run_dir=$OUT/$est/eval "$@"
done
icml26 experiment=$EXP method.stage=compare \
  "method.compare_files=[$OUT/maxrl/eval/eval.json,$OUT/grpo/eval/eval.json]" run_dir=$OUT/compare
