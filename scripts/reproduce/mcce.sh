#!/usr/bin/env bash
# MCCE (arXiv 2510.06270) at paper scale (paper setting): GPT-4o (OpenAI-compatible) + Qwen2.5-7B-Instruct,
# 5 objectives (SA, DRD2, QED, GSK3B, JNK3), budget 5000 unique molecules, population 50, 10 seeds.
#
# Needs: OPENAI_API_KEY (or an OpenAI-compatible endpoint in API_BASE_URL), GPUs for the local model
# (model=qwen2_5_7b_instruct, model.path=<folder> for a local copy; vLLM generation, the engine is
# rebuilt from the trained weights after every training round) and its
# full-parameter bf16 DPO rounds (policy + frozen reference), the TDC oracle files in ./oracle/
# (drd2_current.pkl, gsk3b_current.pkl, jnk3_current.pkl, shipped by the official repo / TDC) and
# the 100-SMILES ZINC250K initial population (repo data_goal5.json["random1"], one SMILES a line).
#
# The search is one process per seed (the seeds are independent jobs; run them on separate GPUs with
# GPUS="0 1 2 ..."). Each run checkpoints every generation under outputs/mcce/<mode>/seed<k>/ckpt
# and resumes from there if restarted. The round's TRL settings are the dpo/sft/grpo trainer nodes
# (e.g. method.dpo.learning_rate=1e-6, fields of methods.mcce.train.MCCEDPOConfig).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."

: "${OPENAI_API_KEY:?set OPENAI_API_KEY (or API_BASE_URL for an OpenAI-compatible server)}"
API_BASE_URL="${API_BASE_URL:-null}"
INIT="${INIT:-data/zinc250k_random1.smi}"
SEEDS="${SEEDS:-0 1 2 3 4 5 6 7 8 9}"
MODES="${MODES:-coevolve_dpo single_api single_local coevolve_frozen coevolve_sft coevolve_rl}"
GPUS=(${GPUS:-0})

for f in oracle/drd2_current.pkl oracle/gsk3b_current.pkl oracle/jnk3_current.pkl "$INIT"; do
  [[ -f "$f" ]] || { echo "missing $f (see docs/methods/mcce.md)"; exit 1; }
done

i=0
for MODE in $MODES; do
  for SEED in $SEEDS; do
    OUT="outputs/mcce/$MODE/seed$SEED"
    CUDA_VISIBLE_DEVICES="${GPUS[$((i % ${#GPUS[@]}))]}" icml26 \
      experiment=mcce_paper method.stage=paper seed="$SEED" run_dir="$OUT" \
      method.api_base_url="$API_BASE_URL" \
      method.init_file="$INIT" \
      method.checkpoint_dir="$OUT/ckpt" \
      method.search.mode="$MODE" &
    i=$((i + 1))
    if (( i % ${#GPUS[@]} == 0 )); then wait; fi
  done
done
wait
echo "results: outputs/mcce/<mode>/seed<k>/results.json (hypervolume, top1/top10 F, AUC, validity, ...)"
