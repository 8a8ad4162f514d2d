#!/usr/bin/env bash
# EpiCache paper-scale reproduction (arXiv 2509.17396; official apple/ml-epicache). One GPU; network for
# hub checkpoints and data. Every step is a stage of the one CLI:
#   icml26 experiment=epicache_paper method.stage=profile   # layer sensitivity, once per model
#   icml26 experiment=epicache_paper method.stage=eval      # EpiCache on benchmark=realtalk|locomo|longmemeval
# Usage: bash scripts/reproduce/epicache.sh [preset] [benchmark]   (preset: epicache_paper | epicache_paper_llama)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."
PRESET=${1:-epicache_paper}
BENCH=${2:-realtalk}
DATA=data/epicache
mkdir -p "$DATA"
unset HF_HUB_OFFLINE

# 1. Benchmarks (official sources; configs/benchmark/{locomo,realtalk,longmemeval}.yaml read these paths).
[ -f "$DATA/locomo10.json" ] || curl -L -o "$DATA/locomo10.json" \
  https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json
if [ ! -d "$DATA/realtalk" ]; then
  git clone --depth 1 https://github.com/danny911kr/REALTALK "$DATA/REALTALK_repo"
  mkdir -p "$DATA/realtalk" && cp "$DATA"/REALTALK_repo/data/*.json "$DATA/realtalk/"
fi
# LongMemEval histories: build them with the official data/longmemeval/create_custom_dataset.py and place
# the JSON ({"conversations": [...]}) or the converted SCBench-style JSONL at $DATA/longmemeval.json.

# 2. One-off layer sensitivity profile (official: BookSum sample 0, 16K tokens, block 4096, sink 128,
#    windowed cosine over 100 keys); written to the preset's method.sensitivity_path.
icml26 experiment="$PRESET" method.stage=profile

# 3. Main table and budget sweep (Hydra multirun). Each conversation is independent: for several GPUs
#    run one process per GPU with CUDA_VISIBLE_DEVICES=i and a different benchmark or budget.
icml26 -m experiment="$PRESET" method.stage=eval benchmark="$BENCH" method.budget=2048,4096,6144,8192

# 4. Baselines of the table (official block-prefill scorers, same loop and budget).
icml26 -m experiment="$PRESET" method.stage=eval benchmark="$BENCH" \
  method.scorer=kvzip,snapkv,keydiff,infinipot,streaming

# 5. Ablations (v4 table): E in {2, 8}, alpha in {0, 8}, n_medoid = 1 (paper text), MiniLM embedder,
#    our plain scoring-prompt format.
icml26 -m experiment="$PRESET" method.stage=eval benchmark="$BENCH" method.n_episodes=2,8
icml26 -m experiment="$PRESET" method.stage=eval benchmark="$BENCH" method.alpha=0.0,8.0
icml26 experiment="$PRESET" method.stage=eval benchmark="$BENCH" method.n_medoid=1 method.embedder=null
icml26 experiment="$PRESET" method.stage=eval benchmark="$BENCH" method.prompt_format=plain
