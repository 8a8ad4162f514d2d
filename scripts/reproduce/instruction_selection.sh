#!/usr/bin/env bash
# Paper-scale reproduction of targeted instruction selection (arXiv 2602.14696), spec §7.
# GPU only (one 80 GB GPU per 7B full fine-tune); hub access needed for the pool, queries and model.
# 1) representations + selection (writes subsets/<arm>_B<B>.json with pool ids), per target task;
# 2) full fine-tuning on each subset with TRL SFT, 2 epochs, lr 2e-5, batch 1 x accum 128 (paper);
# 3) evaluation: lm-eval-harness / open-instruct style evals (not wrapped here, see docs).
set -euo pipefail
MODEL=${MODEL:-meta-llama/Llama-2-7b-hf}
TARGETS=${TARGETS:-"bbh codex gsm8k tydiqa mmlu_pro"}
BUDGETS=${BUDGETS:-"500 1000 2500 5000 10000"}
OUT=${OUT:-outputs/instruction_selection_paper}

for T in $TARGETS; do
  icml26 experiment=instruction_selection_paper method.base_model="$MODEL" \
    method.query_config="$T" run_dir="$OUT/$T/select"
  for SUB in "$OUT/$T/select/subsets/"*.json; do
    ARM=$(basename "$SUB" .json)
    for SEED in 0 1 2; do
      accelerate launch --config_file configs/accelerate/single_gpu.yaml - <<PY
import json
from datasets import load_dataset
from trl import SFTConfig, SFTTrainer
ids = set(json.load(open("$SUB")))
pool = load_dataset("Harvard-DCML/tulu-v2-197K-processed", split="train")
train = pool.filter(lambda r: r["id"] in ids).select_columns(["messages"])
cfg = SFTConfig(output_dir="$OUT/$T/train/${ARM}_s$SEED", num_train_epochs=2, learning_rate=2e-5,
                per_device_train_batch_size=1, gradient_accumulation_steps=128,
                lr_scheduler_type="linear", warmup_ratio=0.03, weight_decay=0.0, bf16=True,
                max_length=2048, assistant_only_loss=True, seed=$SEED, save_strategy="no",
                report_to="none")
trainer = SFTTrainer(model="$MODEL", args=cfg, train_dataset=train)
trainer.train()
trainer.save_model()
PY
    done
  done
done
echo "subsets and checkpoints under $OUT; evaluate with lm-eval (mmlu_pro) and open-instruct evals"
