#!/usr/bin/env bash
# Paper-scale reproduction of targeted instruction selection (arXiv 2602.14696).
# GPU only (one 80 GB GPU per 7B full fine-tune); hub access needed for the pool, queries and model.
#   1) method.stage=select: representations (RDS+, EMBED, LESS with the HF-Trainer LoRA warm-up)
#      and selection per target task -> $OUT/<task>/select/subsets/<arm>_B<B>.json (pool ids);
#   2) method.stage=finetune: full fine-tuning on each subset (Tulu format, assistant-only loss,
#      2 epochs, lr 2e-5, batch 1 x accum 128; the preset's `finetune` node), 3 seeds, + the query
#      loss on the target's query set;
#   3) benchmark evaluation (BBH / GSM8K / TyDiQA generation, HumanEval pass@10, MMLU-Pro through
#      lm-eval-harness) is not wrapped here: run open-instruct / lm-eval on $OUT/<task>/train/*/model.
# EXP picks the model: instruction_selection_paper (Llama-2-7B), instruction_selection_paper_llama32_3b,
# instruction_selection_paper_qwen3_4b.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."
EXP=${EXP:-instruction_selection_paper}
TARGETS=${TARGETS:-"bbh codex gsm8k tydiqa mmlu_pro"}
SEEDS=${SEEDS:-"0 1 2"}
OUT=${OUT:-outputs/$EXP}

for T in $TARGETS; do
  icml26 experiment="$EXP" method.stage=select method.queries.config="$T" run_dir="$OUT/$T/select"
  for SUB in "$OUT/$T/select/subsets/"*.json; do
    ARM=$(basename "$SUB" .json)
    for SEED in $SEEDS; do
      icml26 experiment="$EXP" method.stage=finetune method.queries.config="$T" \
        method.subset_file="$SUB" seed="$SEED" run_dir="$OUT/$T/train/${ARM}_s$SEED"
    done
  done
done
echo "subsets, checkpoints and query losses (results.json) under $OUT"
