#!/usr/bin/env bash
# Singular vectors align with features (methods/sv_features) reproduction (arXiv 2602.13524).
#   bash scripts/reproduce/sv_features.sh toy      # CPU toys A-D + PNGs (~5-10 min on a loaded 2-core box)
#   bash scripts/reproduce/sv_features.sh paper    # paper toy schedules (10k steps, batch 1024)
#   bash scripts/reproduce/sv_features.sh gpt2     # SAD of all 144 GPT-2 small heads on 128 IOI prompts
#   bash scripts/reproduce/sv_features.sh pythia   # SAD of an IOI head over ~130 Pythia-160M revisions
# The real-model stages load hub ids (`gpt2`, `EleutherAI/pythia-160m` + revisions): run them on a
# machine with network access or a filled HF_HOME; CPU is enough for GPT-2, a GPU helps for Pythia.
# Extra arguments are Hydra overrides, e.g. method.real.tau=0.7, method.real.head=[8,9], method.real.fold_ln=true or model.path=<dir>.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."
stage="${1:-toy}"
shift || true
case "$stage" in
  toy)    HF_HUB_OFFLINE=1 icml26 experiment=sv_features_toy "$@" ;;
  paper)  HF_HUB_OFFLINE=1 icml26 experiment=sv_features_paper method.stage=synthetic "$@" ;;
  gpt2)
    for tau in 0.7 0.9 1.0; do  # tau not given in the retrieved text: report the sweep
      icml26 experiment=sv_features_gpt2_ioi method.real.tau=$tau "$@"
    done
    ;;
  pythia) icml26 experiment=sv_features_pythia "$@" ;;
  *) echo "usage: $0 {toy|paper|gpt2|pythia} [hydra overrides...]" >&2; exit 2 ;;
esac
