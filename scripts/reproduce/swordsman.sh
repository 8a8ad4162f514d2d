#!/usr/bin/env bash
# Swordsman paper-scale reproduction (arXiv 2602.04399): GPU, lm-evaluation-harness, batch 1, G = 512.
# Needs: pip install -e '.[eval]' (lm-eval>=0.4.8) and the checkpoints (hub or model.path=<folder>).
# CACHES="none dual" runs every setting with the dual KV cache off and on. Prefix/dual cache need a
# LLaDA/Dream modeling file whose forward accepts past_key_values/use_cache (+ replace_position for
# dual), e.g. Fast-dLLM's ports; with the stock hub code use CACHES="none". The hub modeling files
# predate transformers 5: if loading fails, pin transformers to 4.49 in a separate environment
# (official repo: transformers 4.49.0, lm_eval 0.4.8, accelerate 0.34.2).
# Each run evaluates Swordsman and the Fast-dLLM baseline (blocks of 32, tau 0.9) on GSM8K (5-shot),
# MATH (minerva_math, 4-shot), HumanEval (0-shot), MBPP (3-shot): method.eval.tasks.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
export HF_ALLOW_CODE_EVAL=1 HF_DATASETS_TRUST_REMOTE_CODE=true
OUT=${OUT:-outputs/swordsman_paper}
CACHES=${CACHES:-"none dual"}
LIMIT=${LIMIT:-}                      # e.g. LIMIT=50 for a smoke run
CONFIG=${ACCELERATE_CONFIG:-configs/accelerate/single_gpu.yaml}
for setting in "swordsman_paper model=llada_8b_instruct" "swordsman_paper model=llada_1_5" "swordsman_paper_dream"; do
  set -- $setting
  preset=$1; shift
  for cache in $CACHES; do
    tag="${preset}_${1:-dream}_${cache}"; tag=${tag//model=/}
    accelerate launch --config_file "$CONFIG" -m common.cli experiment="$preset" method.stage=paper "$@" \
      method.decoder.cache="$cache" ${LIMIT:+method.eval.limit=$LIMIT} run_dir="$OUT/$tag"
  done
done
echo "results (accuracy + TPS/latency/NFE per task and decoder) in $OUT/*/results.json"
