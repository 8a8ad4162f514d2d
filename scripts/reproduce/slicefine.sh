#!/usr/bin/env bash
# SliceFine, paper scale (spec §7) on GPUs.
#   glue (default): GLUE tasks x 5 seeds with RoBERTa-base. Needs the checkpoint and nyu-mll/glue in
#                   the HF cache (or method.glue.data_path=<save_to_disk dir>).
#   vtab:           the seven VTAB-1K image tasks x 3 seeds with ViT-B/16 (in21k). Needs the VTAB-1K
#                   folders (NOAH/VPT layout) under data/vtab-1k or method.vision.data_root=<dir>.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONFIG=${ACCELERATE_CONFIG:-configs/accelerate/single_gpu.yaml}
stage=${1:-glue}
case "$stage" in
  glue)
    for task in rte mrpc sst2 cola qnli; do
      for seed in 0 1 2 3 4; do
        accelerate launch --config_file "$CONFIG" scripts/run.py experiment=slicefine_paper \
          method.glue.task=$task seed=$seed "${@:2}"
      done
    done
    ;;
  vtab)
    for task in caltech101 oxford_flowers102 oxford_iiit_pet patch_camelyon eurosat \
                diabetic_retinopathy kitti; do
      for seed in 0 1 2; do
        accelerate launch --config_file "$CONFIG" scripts/run.py experiment=slicefine_paper_vtab \
          method.vision.task=$task seed=$seed run_dir=outputs/slicefine/vtab/$task/$seed "${@:2}"
      done
    done
    ;;
  *)
    echo "usage: $0 [glue|vtab] [hydra overrides...]" >&2
    exit 2
    ;;
esac
