#!/usr/bin/env bash
# KORE reproduction.
# 1) CPU toy (spec §6), three seeds, six injection arms (~5 min per seed on a loaded 2-core box):
set -euo pipefail
export HF_HUB_OFFLINE=1
icml26 experiment=kore_toy 'method.seeds=[0,1,2]' "$@"

# 2) Paper scale (spec §5, §7): NOT wired up in this package yet. configs/experiment/kore_paper.yaml
#    records the setting (LLaVA-1.5-7B, rank 235, KORE-74K, lr 2e-4, projector lr 2e-5, 6 epochs,
#    global batch 54, DeepSpeed ZeRO-3). The library pieces it needs are in methods/kore and tested on
#    the tiny LLaVA: collect_input_covariances -> apply_kore -> (SFT on B) -> export_standard_lora.
#    `icml26 experiment=kore_paper` raises a clear error until the SFT driver exists.
