#!/usr/bin/env bash
# Geo-RL at paper scale (our reconstruction: the paper's own setting is unknown; see
# docs/methods/georl.md). Needs: 8 GPUs, `pip install -e .[vllm]`, and offline copies (or network) of
# Qwen/Qwen2.5-VL-7B-Instruct, openai/clip-vit-large-patch14 and the google/docci images.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."

NPROC=${NPROC:-8}
ACCEL_CFG=${ACCEL_CFG:-configs/accelerate/deepspeed_zero3.yaml}

# 1) the CPU toy first (minutes): the coverage/hallucination table of docs/methods/georl.md
icml26 experiment=georl_toy "$@"

# 2) paper-scale Geo-RL training (GRPO + DPP LOO advantages, CLIP grounding, vLLM colocate)
accelerate launch --config_file "$ACCEL_CFG" --num_processes "$NPROC" -m common.cli \
  experiment=georl_paper "$@"

# 3) Ablations: normalised advantages; no quality factor; gamma sweep (GeoRLGRPOConfig fields).
for extra in "method.trainer.advantage_mode=normalized" "method.trainer.gamma=0" \
  "method.trainer.gamma=1" "method.trainer.gamma=4"; do
  accelerate launch --config_file "$ACCEL_CFG" --num_processes "$NPROC" -m common.cli \
    experiment=georl_paper "$extra" "$@"
done
