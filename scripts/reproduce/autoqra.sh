#!/usr/bin/env bash
# AutoQRA reproduction.
#   1) CPU toy "AutoQRA-tiny" (offline, minutes): joint (bits, rank) search vs fixed allocations.
#   2) Paper scale (GPU, PAPER=1): the official real-task mode, HQQ-quantised LoRA, Alpaca SFT at the
#      two fidelities (5% / 0.1 epoch, 20% / 0.5 epoch), WinoGrande 0-shot partial scoring, on Qwen3-4B
#      and Llama-3.1-8B. Needs `pip install hqq` and the checkpoints / data cached (or local copies:
#      ALPACA=alpaca_data.json, WINO=winogrande dev JSONL).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
OUT=${OUT:-outputs/autoqra_toy}
SEEDS=${SEEDS:-0}
for seed in $SEEDS; do
  icml26 experiment=autoqra_toy seed="$seed" run_dir="$OUT/seed$seed"
done
# the official Stage 1 offspring (atomic neighbours only) for comparison:
icml26 experiment=autoqra_toy 'method.offspring_ops=[neighbors]' run_dir="$OUT/neighbors_only"
echo "results in $OUT/*/results.md"
if [[ "${PAPER:-0}" == "1" ]]; then
  DATA=()
  if [[ -n "${ALPACA:-}" ]]; then DATA+=("method.paper.sft_data.path=$ALPACA"); fi
  if [[ -n "${WINO:-}" ]]; then DATA+=("benchmark.sets.winogrande.path=$WINO"); fi
  for model in qwen3_4b llama3_1_8b; do   # the official presets
    icml26 experiment=autoqra_paper model="$model" "${DATA[@]}" run_dir="outputs/autoqra_paper/$model" "$@"
  done
fi
