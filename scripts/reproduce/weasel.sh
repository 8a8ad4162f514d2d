#!/usr/bin/env bash
# Weasel at paper scale (spec §7). Not run here: needs GPUs, AgentTrek in AgentLab format,
# and for evaluation AgentLab/BrowserGym with self-hosted WebArena / WorkArena.
set -euo pipefail
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}   # also google/gemma-3-4b-it, Qwen/Qwen3-8B
DATA=${DATA:-data/agenttrek_agentlab.json}  # chat records [system, user, assistant]
OUT=${OUT:-outputs/weasel}
mkdir -p "$OUT"

# 1) Prune + score + greedy-select + cap at 10K (one GPU helps the roberta-large scorer).
icml26 experiment=weasel_paper method.data_path="$DATA" \
  method.output_path="$OUT/weasel_agenttrek_train_10k.json" run_dir="$OUT/select"

# 2) Convert chat records to prompt/completion JSONL (prompt = system + user, completion = assistant).
python - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
rows = json.load(open(f"{out}/weasel_agenttrek_train_10k.json"))
with open(f"{out}/train.jsonl", "w") as f:
    for r in rows:
        m = r["messages"]
        f.write(json.dumps({"prompt": m[:-1], "completion": m[-1:]}) + "\n")
PY

# 3) LoRA SFT with TRL (spec §3.8: r=8, alpha=8, dropout 0, all-linear; Qwen2.5: lr 2e-5, 4 epochs,
#    global batch 8; Gemma3: 2e-5, 2 ep, 16; Qwen3: 1e-6, 2 ep, 8). 8 GPUs, ZeRO-3 config from configs/.
accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml -m trl.cli sft \
  --model_name_or_path "$MODEL" --dataset_name json --dataset_train_split train \
  --dataset_config "$OUT/train.jsonl" \
  --use_peft --lora_r 8 --lora_alpha 8 --lora_dropout 0.0 --lora_target_modules all-linear \
  --learning_rate 2e-5 --num_train_epochs 4 --per_device_train_batch_size 1 \
  --gradient_accumulation_steps 1 --lr_scheduler_type cosine --warmup_ratio 0.1 --bf16 \
  --max_length 12288 --completion_only_loss true --output_dir "$OUT/sft"

# 4) Merge LoRA, serve with vLLM, evaluate with AgentLab GenericAgent on BrowserGym benchmarks.
python - "$OUT" "$MODEL" <<'PY'
import sys
from peft import AutoPeftModelForCausalLM
from transformers import AutoTokenizer
out, base = sys.argv[1], sys.argv[2]
m = AutoPeftModelForCausalLM.from_pretrained(f"{out}/sft").merge_and_unload()
m.save_pretrained(f"{out}/merged"); AutoTokenizer.from_pretrained(base).save_pretrained(f"{out}/merged")
PY
echo "Serve: vllm serve $OUT/merged --port 8000 --max-model-len 32768"
echo "Evaluate with AgentLab (GenericAgent, benchmarks miniwob / webarena / workarena_l1 / workarena_l2)."
