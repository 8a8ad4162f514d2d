#!/usr/bin/env bash
# SliceFine, paper scale on GPUs (every value reconstructed; see docs/methods/slicefine.md).
#   glue (default): RTE, MRPC, SST-2, CoLA, QNLI x 5 seeds with RoBERTa-base (model=roberta_base,
#                   benchmark=glue). Needs the checkpoint and nyu-mll/glue in the HF cache (or
#                   benchmark.sets.<task>.path=<save_to_disk dir>).
#   vtab:           the seven VTAB-1K image tasks x 3 seeds with ViT-B/16 in21k (model=vit_b16_in21k,
#                   benchmark=vtab1k). Needs the VTAB-1K folders (NOAH/VPT layout) under
#                   data/vtab-1k or benchmark.sets.<task>.path=<dir>.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."
CONFIG=${ACCELERATE_CONFIG:-configs/accelerate/single_gpu.yaml}
stage=${1:-glue}
case "$stage" in
  glue)
    for seed in 0 1 2 3 4; do
      accelerate launch --config_file "$CONFIG" -m common.cli experiment=slicefine_paper \
        seed=$seed run_dir=outputs/slicefine/glue/$seed "${@:2}"
    done
    ;;
  vtab)
    for seed in 0 1 2; do
      accelerate launch --config_file "$CONFIG" -m common.cli experiment=slicefine_paper_vtab \
        seed=$seed run_dir=outputs/slicefine/vtab/$seed "${@:2}"
    done
    ;;
  *)
    echo "usage: $0 [glue|vtab] [hydra overrides...]" >&2
    exit 2
    ;;
esac
