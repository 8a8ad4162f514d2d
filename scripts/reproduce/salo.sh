#!/usr/bin/env bash
# SALO reproduction (official code: Exbilar/SALO). Every step is a stage of the one CLI.
#   bash scripts/reproduce/salo.sh toy              # CPU toy, offline, ~5-35 min on 2 cores
#   bash scripts/reproduce/salo.sh paper [args...]  # GPU: Qwen2.5-7B / Llama-3.1-8B / Mistral-7B instruct
# The paper stage needs one GPU (~40 GB for a 7-8B model in fp16 + the probe) and, in HF_HOME or as local
# files, the sets of configs/benchmark/salo_safety.yaml (PKU-SafeRLHF, toxic-chat toxicchat0124, XSTest,
# AdvBench). Every set takes a local file in its own format, e.g.
#   benchmark.sets.xstest.path=xstest_prompts.csv benchmark.sets.advbench.path=harmful_behaviors.csv
# Per-model attack files: the official CSVs (git clone https://github.com/Exbilar/SALO; datasets/):
#   method.paper.official_gcg_path=SALO/datasets/qwen-7B-gcg.csv          (suffix, prompt + injection)
#   method.paper.official_autodan_path=SALO/datasets/qwen-7B-AutoDAN.csv  (prefill, as the official code)
# JailbreakBench artifacts and AutoDAN result files with an explicit placement:
#   '+method.paper.jbb.gcg_jbb=GCG/white_box/<model>.json'
#   '+method.paper.autodan.autodan_user={path: autodan.json, placement: user}'
# or GCG regenerated on the model: method.paper.gcg_generate.n_prompts=520
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."
stage="${1:-toy}"
shift || true
case "$stage" in
  toy)
    icml26 experiment=salo_toy "$@"
    ;;
  paper)
    # windows from the official configs.py (end-exclusive indices into output_hidden_states)
    for m in qwen llama mistral; do
      icml26 experiment=salo_paper_$m "$@"
      icml26 experiment=salo_paper_$m method.target_fpr=0.05 "$@"   # second operating point
    done
    ;;
  *)
    echo "usage: $0 {toy|paper} [hydra overrides...]" >&2
    exit 2
    ;;
esac
