#!/usr/bin/env bash
# Weasel at paper scale (arXiv 2605.20291). Not run here: needs GPUs, AgentTrek in AgentLab format,
# and for evaluation AgentLab/BrowserGym with self-hosted WebArena / WorkArena.
#   EXP=weasel_paper (Qwen2.5-7B-Instruct) | weasel_paper_qwen3_8b
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."
EXP=${EXP:-weasel_paper}
DATA=${DATA:-data/agenttrek_agentlab.json}  # chat records [system, user, assistant]
OUT=${OUT:-outputs/weasel/$EXP}
ACCEL=${ACCEL:-configs/accelerate/single_gpu.yaml}
SUBSET="$OUT/weasel_agenttrek_train_10k.json"
mkdir -p "$OUT"

# 1) Prune + BERTScore (roberta-large) + greedy selection + cap at 10K (one GPU helps the scorer).
icml26 experiment="$EXP" method.stage=select method.data_path="$DATA" \
  method.output_path="$SUBSET" run_dir="$OUT/select"

# 2) LoRA SFT with TRL + PEFT and the paper recipe in the preset's trainer node (r 8, alpha 8,
#    dropout 0, all-linear, cosine, warmup 0.1, bf16; lr / epochs / global batch per model). On
#    several GPUs divide method.trainer.gradient_accumulation_steps by the GPU count.
accelerate launch --config_file "$ACCEL" -m common.cli experiment="$EXP" method.stage=sft \
  method.output_path="$SUBSET" run_dir="$OUT/train"

# 3) Merge the LoRA adapter ($OUT/train/sft), serve it with vLLM and evaluate it with AgentLab's
#    GenericAgent on BrowserGym (miniwob, webarena, workarena_l1, workarena_l2); not wrapped here:
#    peft's AutoPeftModelForCausalLM.from_pretrained("$OUT/train/sft").merge_and_unload(), then
#    vllm serve <merged> --max-model-len 32768.
echo "adapter: $OUT/train/sft"
