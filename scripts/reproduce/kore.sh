#!/usr/bin/env bash
# KORE reproduction (arXiv 2510.19316). Usage: scripts/reproduce/kore.sh [toy|paper|qwen|evoke] [overrides...]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
STAGE=${1:-toy}
shift || true
CONFIG=${ACCELERATE_CONFIG:-configs/accelerate/deepspeed_zero3.yaml}
case "$STAGE" in
  toy)
    # CPU toy: three seeds, six injection arms (~4-7 min per seed on a 2-core box).
    HF_HUB_OFFLINE=1 icml26 experiment=kore_toy 'method.toy.seeds=[0,1,2]' "$@" ;;
  paper)
    # LLaVA-1.5-7B, rank 235, KORE-74K, lr 2e-4 (B) / 2e-5 (projector), 6 epochs, cosine, warm-up 0.03,
    # bf16, DeepSpeed ZeRO-3 on 4 GPUs. Needs KORE74K_JSON + KORE74K_IMAGES (HF kailinjiang/KORE-74K)
    # and KORE_CALIB_JSON (256 LLaVA-OneVision calibration records, LLaVA conversation format).
    # The KORE initialisation needs the gathered weights: it runs before ZeRO-3 partitions the model.
    # LLaVA-13B: add model=llava_1_5_13b. Ablations: method.paper.eigvecs=largest,
    # method.paper.init=lora_null_v1, method.paper.freeze_A=false.
    accelerate launch --config_file "$CONFIG" -m common.cli experiment=kore_paper method.stage=paper "$@" ;;
  qwen)
    # Qwen2.5-VL-7B-Instruct (rank 274, warm-up 0.1, chat-template prompts).
    accelerate launch --config_file "$CONFIG" -m common.cli experiment=kore_paper_qwen method.stage=paper "$@" ;;
  evoke)
    # EVOKE knowledge adaptation (CEM, F1, K.A; greedy). Pass method.evoke.adapter_dir=<run_dir>/kore.
    # Retention (K.R) via VLMEvalKit on the paper's 12 benchmarks is an external harness (not wired).
    icml26 experiment=kore_evoke method.stage=evoke "$@" ;;
  *) echo "unknown stage $STAGE (toy|paper|qwen|evoke)"; exit 1 ;;
esac
