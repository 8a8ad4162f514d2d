#!/usr/bin/env bash
# SliceFine, paper scale (spec §7): GLUE tasks x 5 seeds with RoBERTa-base on GPUs.
# Needs the checkpoint and nyu-mll/glue in the HF cache (or method.glue.data_path=<save_to_disk dir>).
set -euo pipefail
CONFIG=${ACCELERATE_CONFIG:-configs/accelerate/single_gpu.yaml}
for task in rte mrpc sst2 cola qnli; do
  for seed in 0 1 2 3 4; do
    accelerate launch --config_file "$CONFIG" scripts/run.py experiment=slicefine_paper \
      method.glue.task=$task seed=$seed "$@"
  done
done
