#!/usr/bin/env bash
# KORE reproduction.
set -euo pipefail
STAGE=${1:-toy}
shift || true
if [ "$STAGE" = toy ]; then
  # CPU toy (spec §6): three seeds, six injection arms (~4-7 min per seed on a 2-core box).
  HF_HUB_OFFLINE=1 icml26 experiment=kore_toy 'method.seeds=[0,1,2]' "$@"
else
  # Paper scale (spec §5, §7): LLaVA-1.5-7B, rank 235, KORE-74K, lr 2e-4 (B) / 2e-5 (projector),
  # 6 epochs, cosine, warmup 0.03, bf16, DeepSpeed ZeRO-3 on 4 GPUs.
  # Needs: KORE74K_JSON + KORE74K_IMAGES (HF dataset kailinjiang/KORE-74K, unzipped) and
  # KORE_CALIB_JSON (256 LLaVA-OneVision calibration records, LLaVA conversation format).
  # The KORE initialisation (covariances + SVD) needs gathered weights: it runs before ZeRO-3
  # partitions the model, on every process (deterministic), so memory must hold the full model.
  CONFIG=${ACCELERATE_CONFIG:-configs/accelerate/deepspeed_zero3.yaml}
  accelerate launch --config_file "$CONFIG" scripts/run.py experiment=kore_paper "$@"
  # LLaVA-13B: method.paper.model=llava-hf/llava-1.5-13b-hf (global batch 32).
  # Qwen2.5-VL-7B (rank 274, warmup 0.1, chat-template prompts):
  #   accelerate launch --config_file "$CONFIG" scripts/run.py experiment=kore_paper_qwen run_dir=runs/kore_qwen
  # EVOKE knowledge adaptation (CEM, F1, K.A; greedy, vicuna_v1 for LLaVA, chat for Qwen2.5-VL):
  #   icml26 experiment=kore_evoke method.evoke.adapter_dir=<run_dir>/kore \
  #     method.evoke.question_file=$EVOKE_QUESTIONS method.evoke.image_root=$EVOKE_IMAGES
  # Retention (K.R) via VLMEvalKit on the 12 benchmarks of spec §5 (external harness, not wired).
fi
