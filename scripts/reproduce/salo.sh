#!/usr/bin/env bash
# SALO paper scale (spec §5, §7): one GPU (~40 GB for a 7-8B model in fp16 + the probe).
# Needs the hub models and data sets in HF_HOME (PKU-Alignment/PKU-SafeRLHF, walledai/XSTest,
# walledai/AdvBench) and, for GCG/AutoDAN, per-model attack CSVs with columns prompt,injection.
set -euo pipefail
cd "$(dirname "$0")/../.."
ACC="accelerate launch --config_file configs/accelerate/single_gpu.yaml scripts/run.py"
# windows from the official configs.py (end-exclusive indices into output_hidden_states)
$ACC experiment=salo_paper method.paper.model=Qwen/Qwen2.5-7B-Instruct method.window=[10,20] "$@"
$ACC experiment=salo_paper method.paper.model=meta-llama/Llama-3.1-8B-Instruct method.window=[5,15] "$@"
$ACC experiment=salo_paper method.paper.model=mistralai/Mistral-7B-Instruct-v0.3 method.window=[10,20] "$@"
# 5% operating point as well (spec §9.3)
$ACC experiment=salo_paper method.target_fpr=0.05 "$@"
# attack CSVs: add e.g. '+method.paper.attacks.csv.gcg={path:gcg_qwen.csv,attack_type:suffix}'
