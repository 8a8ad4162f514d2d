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

# 2) LoRA SFT with TRL + PEFT and the paper recipe of $MODEL (methods/weasel/sft.py, spec §3.8:
#    r=8, alpha=8, dropout 0, all-linear, cosine, warmup 0.1, bf16; Qwen2.5-7B: lr 2e-5, 4 ep,
#    global batch 8; Gemma3-4B: 2e-5, 2 ep, 16; Qwen3-8B: 1e-6, 2 ep, 8). The data stay AgentLab chat
#    records; prompt = system + user, completion = assistant (completion-only loss).
accelerate launch ${ACCEL_CONFIG:+--config_file "$ACCEL_CONFIG"} -m methods.weasel.sft \
  "$MODEL" "$OUT/weasel_agenttrek_train_10k.json" "$OUT/sft"

# 3) Merge LoRA, serve with vLLM, evaluate with AgentLab GenericAgent on BrowserGym benchmarks.
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
