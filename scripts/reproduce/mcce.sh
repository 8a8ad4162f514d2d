#!/usr/bin/env bash
# MCCE (arXiv 2510.06270) at paper scale (spec §7): GPT-4o (OpenAI-compatible) + Qwen2.5-7B-Instruct,
# 5 objectives (SA, DRD2, QED, GSK3B, JNK3), budget 5000 unique molecules, population 50, 10 seeds.
# Needs: OPENAI_API_KEY (or an OpenAI-compatible endpoint via API_BASE_URL), 1-8 GPUs for the local
# model and its full-parameter DPO rounds, the TDC oracle files in ./oracle/ (drd2_current.pkl,
# gsk3b_current.pkl, jnk3_current.pkl) and the 100-SMILES ZINC250K initial population.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${OPENAI_API_KEY:?set OPENAI_API_KEY (or point API_BASE_URL at an OpenAI-compatible server)}"
API_BASE_URL="${API_BASE_URL:-null}"
INIT="${INIT:-data/zinc250k_random1.smi}"
SEEDS="${SEEDS:-0,1,2,3,4,5,6,7,8,9}"
MODE="${MODE:-coevolve_dpo}"  # or single_api | single_local | coevolve_frozen | coevolve_sft

for f in oracle/drd2_current.pkl oracle/gsk3b_current.pkl oracle/jnk3_current.pkl "$INIT"; do
  [[ -f "$f" ]] || { echo "missing $f (see docs/methods/mcce.md)"; exit 1; }
done

# The DPO rounds run in-process (policy and reference on the visible GPUs, bf16, gradient
# checkpointing). For multi-GPU full-parameter DPO launch through accelerate with ZeRO-3:
accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml scripts/run.py \
  experiment=mcce_paper \
  method.api_base_url="$API_BASE_URL" \
  method.initial_population="$INIT" \
  method.search.mode="$MODE" \
  seed="$SEEDS" --multirun
