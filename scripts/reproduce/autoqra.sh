#!/usr/bin/env bash
# AutoQRA reproduction (spec §6, §7).
#   1) CPU toy "AutoQRA-tiny" (offline, minutes): joint (bits, rank) search vs fixed allocations.
#   2) Paper scale (GPU, PAPER=1): methods.autoqra.paper = HQQ-quantised LoRA, Alpaca SFT at the repo's two
#      fidelities (5% / 0.1 epoch, 20% / 0.5 epoch), WinoGrande 0-shot partial scoring, AutoQRA search.
#      Needs `pip install hqq`, the models, and local data files in their own formats:
#      ALPACA=alpaca_data.json (tatsu-lab/alpaca JSON list), WINO=winogrande dev JSONL.
set -euo pipefail
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
OUT=${OUT:-outputs/autoqra_toy}
SEEDS=${SEEDS:-0}
for seed in $SEEDS; do
  icml26 experiment=autoqra_toy seed="$seed" run_dir="$OUT/seed$seed"
done
# repo-faithful Stage 1 operators (atomic neighbours only, spec §9.1) for comparison:
icml26 experiment=autoqra_toy 'method.offspring_ops=[neighbors]' run_dir="$OUT/neighbors_only"
echo "results in $OUT/*/results.md"
if [[ "${PAPER:-0}" == "1" ]]; then
  : "${ALPACA:?set ALPACA=path/to/alpaca_data.json}" "${WINO:?set WINO=path/to/winogrande_dev.jsonl}"
  for model in Qwen/Qwen3-4B meta-llama/Llama-3.1-8B; do   # repo presets
    HF_HUB_OFFLINE=0 python -m methods.autoqra.paper --model "$model" --alpaca "$ALPACA" \
      --winogrande "$WINO" --backend hqq --Q 2 3 4 8 --R 4 8 16 --budget_bits 4 --budget_rank 8 \
      --group_size 128 --pop 20 --gens 6 --promote_k 3 --alpha 0.6 --lr 2e-4 --batch 4 --grad_accum 4 \
      --max_len 512 --out "outputs/autoqra_paper/${model//\//_}"
  done
fi
