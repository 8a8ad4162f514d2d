#!/usr/bin/env bash
# Paper-scale reproduction of targeted instruction selection (arXiv 2602.14696), spec §7.
# GPU only (one 80 GB GPU per 7B full fine-tune); hub access needed for the pool, queries and model.
#   1) representations (RDS+, EMBED, LESS with the HF-Trainer LoRA warm-up) + selection per target
#      task: writes $OUT/<task>/select/subsets/<arm>_B<B>.json (pool ids);
#   2) full fine-tuning on each subset (HF Trainer, Tulu format, assistant-only loss, 2 epochs,
#      lr 2e-5, batch 1 x accum 128, 3 seeds) + the query loss on the target's query set;
#   3) benchmark evaluation (BBH / GSM8K / TyDiQA generation, HumanEval pass@10, MMLU-Pro through
#      lm-eval-harness) is not wrapped here: run open-instruct / lm-eval on $OUT/<task>/train/*.
# MODEL picks the config: meta-llama/Llama-2-7b-hf (default), meta-llama/Llama-3.2-3B, Qwen/Qwen3-4B-Base.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${MODEL:-meta-llama/Llama-2-7b-hf}
TARGETS=${TARGETS:-"bbh codex gsm8k tydiqa mmlu_pro"}
SEEDS=${SEEDS:-"0 1 2"}
POOL=${POOL:-Harvard-DCML/tulu-v2-197K-processed}
QUERIES=${QUERIES:-Harvard-DCML/targeted-query-set-processed}
OUT=${OUT:-outputs/instruction_selection_paper/$(basename "$MODEL")}
case "$MODEL" in
  meta-llama/Llama-2-7b-hf) EXP=instruction_selection_paper ;;
  meta-llama/Llama-3.2-3B) EXP=instruction_selection_paper_llama32_3b ;;
  Qwen/Qwen3-4B-Base) EXP=instruction_selection_paper_qwen3_4b ;;
  *) echo "unknown MODEL $MODEL"; exit 1 ;;
esac

for T in $TARGETS; do
  python -m scripts.run experiment="$EXP" method.query_config="$T" method.pool="$POOL" \
    method.query_dataset="$QUERIES" run_dir="$OUT/$T/select"
  for SUB in "$OUT/$T/select/subsets/"*.json; do
    ARM=$(basename "$SUB" .json)
    for SEED in $SEEDS; do
      python -m methods.instruction_selection.paper finetune --model "$MODEL" --pool "$POOL" \
        --subset "$SUB" --out "$OUT/$T/train/${ARM}_s$SEED" --seed "$SEED" \
        --queries "$QUERIES" --task "$T"
    done
  done
done
echo "subsets, checkpoints and query losses (finetune.json) under $OUT"
