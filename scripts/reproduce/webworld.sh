#!/usr/bin/env bash
# WebWorld reproduction. Only the data-layer toy exists so far (see docs/methods/webworld.md).
set -euo pipefail
STAGE=${1:-toy}
shift || true
if [ "$STAGE" = toy ]; then
  # CPU toy: A11y conversion fidelity + no-op cleaning on generated data, seeds 0,1,2 (~20 s).
  HF_HUB_OFFLINE=1 icml26 experiment=webworld_toy "$@"
else
  # Paper scale (spec §5): Stage-1/Stage-2 SFT of Qwen3-8B/14B/32B on Qwen/WebWorldData, WebWorld-Bench
  # with a GPT-4o judge, agent SFT on synthesised trajectories. Not implemented yet.
  echo "webworld: paper-scale pipeline not implemented yet (see docs/methods/webworld.md)" >&2
  exit 2
fi
