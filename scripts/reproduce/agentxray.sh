#!/usr/bin/env bash
# AgentXRay (arXiv 2602.05353) at paper scale (spec §7): Red-Black MCTS workflow reconstruction on the
# AgentXRay datasets (HF shiowen/AgentXRay-Datasets) with an OpenAI-compatible model, N = 20
# iterations, M = 16, L_max = 6, β = 0.5, plus the unpruned (coloring=false) ablation.
# Needs: OPENAI_API_KEY and optionally OPENAI_BASE_URL (a hosted API, or `vllm serve Qwen/Qwen3-32B
# --tensor-parallel-size 2` on the GPU machine). No training; the cost is LLM inference.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${OPENAI_API_KEY:?set OPENAI_API_KEY (any value for a local vLLM server)}"
BASE_URL="${OPENAI_BASE_URL:-null}"
MODEL="${MODEL:-gpt-4o-mini}"
DATA_ROOT="${DATA_ROOT:-data/AgentXRay-Datasets/data}"
DATASETS="${DATASETS:-chatdev,metagpt,eduagent,gpt,gemini}"
SEEDS="${SEEDS:-0,1,2}"  # spec §9.3: run count per table not recovered; 3 seeds

if [[ ! -d "$DATA_ROOT" ]]; then
  # needs network; on an offline machine copy the snapshot here instead
  huggingface-cli download shiowen/AgentXRay-Datasets --repo-type dataset \
    --local-dir data/AgentXRay-Datasets
fi

for coloring in true false; do
  python scripts/run.py --multirun experiment=agentxray_paper \
    method.data_root="$DATA_ROOT" method.dataset="$DATASETS" \
    method.llm_model="$MODEL" method.default_model="$MODEL" method.base_url="$BASE_URL" \
    "method.model_menu=[$MODEL]" method.search.coloring="$coloring" \
    method.search.seed="$SEEDS"
done
# Text domain (eduagent): add method.similarity=tfidf (spec §9.1).
