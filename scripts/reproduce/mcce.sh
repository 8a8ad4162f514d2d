#!/usr/bin/env bash
# MCCE (arXiv 2510.06270) at paper scale (spec §7): GPT-4o (OpenAI-compatible) + Qwen2.5-7B-Instruct,
# 5 objectives (SA, DRD2, QED, GSK3B, JNK3), budget 5000 unique molecules, population 50, 10 seeds.
#
# Needs: OPENAI_API_KEY (or an OpenAI-compatible endpoint in API_BASE_URL), GPUs for the local model
# (vLLM generation; the engine is rebuilt from the trained weights after every DPO round) and its
# full-parameter bf16 DPO rounds (policy + frozen reference), the TDC oracle files in ./oracle/
# (drd2_current.pkl, gsk3b_current.pkl, jnk3_current.pkl, shipped by the official repo / PyTDC) and
# the 100-SMILES ZINC250K initial population (repo data_goal5.json["random1"], one SMILES a line).
#
# The search is one process per seed (the seeds are independent jobs; run them on separate GPUs with
# GPUS="0 1 2 ..."). Each run checkpoints every generation under outputs/mcce/<mode>/seed<k>/ckpt
# and resumes from there if restarted.
set -euo pipefail
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
    CUDA_VISIBLE_DEVICES="${GPUS[$((i % ${#GPUS[@]}))]}" python -m scripts.run \
      experiment=mcce_paper seed="$SEED" run_dir="$OUT" \
      method.api_base_url="$API_BASE_URL" \
      method.initial_population="$INIT" \
      method.checkpoint_dir="$OUT/ckpt" \
      method.search.mode="$MODE" method.search.seed="$SEED" &
    i=$((i + 1))
    if (( i % ${#GPUS[@]} == 0 )); then wait; fi
  done
done
wait
echo "results: outputs/mcce/<mode>/seed<k>/results.json (hypervolume, top1/top10 F, AUC, validity, ...)"
