#!/usr/bin/env bash
# EpiCache paper-scale reproduction (spec §7). GPU, network for hub checkpoints and data.
# Usage: bash scripts/reproduce/epicache.sh [model] [benchmark]
set -euo pipefail
MODEL=${1:-Qwen/Qwen3-4B}
BENCH=${2:-realtalk}
DATA=data/epicache
mkdir -p "$DATA"
unset HF_HUB_OFFLINE

# 1. Benchmarks (official sources).
[ -f "$DATA/locomo10.json" ] || curl -L -o "$DATA/locomo10.json" \
  https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json
[ -d "$DATA/realtalk" ] || git clone --depth 1 https://github.com/danny911kr/REALTALK "$DATA/REALTALK_repo" \
  && mkdir -p "$DATA/realtalk" && cp "$DATA"/REALTALK_repo/data/*.json "$DATA/realtalk/" 2>/dev/null || true
# LongMemEval histories follow the official repo's builder (custom 50-conversation sets, spec §3.8);
# place its JSON ({"conversations": [...]}) or the converted SCBench-style JSONL at $DATA/longmemeval.json.

# 2. One-off layer sensitivity profile (official: BookSum sample 0, 16K tokens, block 4096, sink 128).
SENS="$DATA/sensitivity_$(basename "$MODEL" | tr 'A-Z' 'a-z').json"
if [ ! -f "$SENS" ]; then
  python - <<'PY'
from datasets import load_dataset
from pathlib import Path
ds = load_dataset("kmfoda/booksum", split="test")
Path("data/epicache/booksum0.txt").write_text(ds[0]["chapter"])
PY
  python -m methods.epicache.profile --model "$MODEL" --text-file "$DATA/booksum0.txt" --out "$SENS"
fi

case "$BENCH" in
  locomo) DPATH="$DATA/locomo10.json" ;;
  realtalk) DPATH="$DATA/realtalk" ;;
  longmemeval) DPATH="$DATA/longmemeval.json" ;;
esac

# 3. Budget sweep (Hydra multirun); each conversation is independent, so shard over GPUs with
#    several processes (CUDA_VISIBLE_DEVICES=i ... method.n_eval) if more than one GPU is available.
icml26 -m experiment=epicache_paper method.model_name="$MODEL" method.benchmark="$BENCH" \
  method.data_path="$DPATH" method.sensitivity_path="$SENS" method.budget=2048,4096,6144,8192

# Efficiency setting of the paper (LLaMA-3.2-3B, LongMemEval histories, budget 8K):
#   icml26 experiment=epicache_paper_llama method.sensitivity_path=...

# 4. Ablations (v4 table): E in {2, 8}, α in {0, 8}, n_medoid = 1 (paper text), MiniLM embedder.
icml26 -m experiment=epicache_paper method.model_name="$MODEL" method.benchmark="$BENCH" \
  method.data_path="$DPATH" method.sensitivity_path="$SENS" method.n_episodes=2,8
icml26 -m experiment=epicache_paper method.model_name="$MODEL" method.benchmark="$BENCH" \
  method.data_path="$DPATH" method.sensitivity_path="$SENS" method.alpha=0.0,8.0
icml26 experiment=epicache_paper method.model_name="$MODEL" method.benchmark="$BENCH" \
  method.data_path="$DPATH" method.n_medoid=1 method.embedder=null
