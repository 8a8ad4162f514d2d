#!/usr/bin/env bash
# AutoQRA reproduction (spec §6, §7).
#   1) CPU toy "AutoQRA-tiny" (offline, minutes): joint (bits, rank) search vs fixed allocations.
#   2) Paper scale (GPU): NOT runnable from this package yet. The search, memory model, operators and the
#      HQQ + PEFT model builder (methods.autoqra.build_quantized_lora_model(..., backend="hqq")) exist, but the
#      real-task evaluator (Alpaca SFT at two fidelities + lm-eval WinoGrande) is still to be written.
#      configs/experiment/autoqra_paper.yaml records the setting; needs `pip install hqq lm-eval`.
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
