#!/usr/bin/env bash
# AgentXRay (arXiv 2602.05353) at paper scale (spec §7): Red-Black MCTS workflow reconstruction on the
# AgentXRay datasets, loaded by hub id (shiowen/AgentXRay-Datasets; only the listed subsets are fetched),
# with an OpenAI-compatible model for the profile generator and every agent. N = 20 iterations,
# M = 16, L_max = 6, β = 0.5; arms red_black and no_coloring (unpruned), seeds 0-2. Token counts come
# from the API's usage field; generator (profile) tokens are reported apart from agent tokens.
# No training; the cost is LLM inference.
#
# Usage:
#   OPENAI_API_KEY=... scripts/reproduce/agentxray.sh                   # hosted API (gpt-4o-mini)
#   scripts/reproduce/agentxray.sh vllm                                 # `vllm serve` an open model (2 GPUs)
#   SMOKE=1 OPENAI_API_KEY=... scripts/reproduce/agentxray.sh           # 1 subset, 2 iterations, 1 seed
#   DATA_ROOT=/path/AgentXRay-Datasets/data scripts/reproduce/agentxray.sh   # a local copy instead of the hub
# Extra arguments go to icml26 (Hydra overrides). Output: outputs/agentxray_paper*/results.{json,md}.
set -euo pipefail
cd "$(dirname "$0")/../.."

BACKEND="openai"
if [[ "${1:-}" == "openai" || "${1:-}" == "vllm" ]]; then BACKEND="$1"; shift; fi
DATA_ROOT="${DATA_ROOT:-shiowen/AgentXRay-Datasets}"
EXTRA=("method.data_root=$DATA_ROOT")

if [[ "$BACKEND" == "vllm" ]]; then
  MODEL="${MODEL:-Qwen/Qwen3-32B}"
  vllm serve "$MODEL" --tensor-parallel-size "${TP:-2}" --port 8000 &
  SERVER=$!
  trap 'kill $SERVER' EXIT
  until curl -sf http://127.0.0.1:8000/v1/models >/dev/null; do sleep 5; done
  EXTRA+=(method.base_url=http://127.0.0.1:8000/v1 "method.llm_model=$MODEL" "method.default_model=$MODEL"
          "method.model_menu=[$MODEL]")
else
  : "${OPENAI_API_KEY:?set OPENAI_API_KEY (or run: scripts/reproduce/agentxray.sh vllm)}"
fi
if [[ -n "${SMOKE:-}" ]]; then
  EXTRA+=("method.datasets=[metagpt]" method.search.iterations=2 "method.seeds=[0]" method.train_samples=1 method.test_samples=1)
fi

# Code domains with SFE (chatdev, metagpt, gpt, gemini), then the text domain with TF-IDF (spec §9.1).
if [[ -n "${SMOKE:-}" ]]; then
  icml26 experiment=agentxray_paper "${EXTRA[@]}" run_dir=outputs/agentxray_paper_smoke "$@"
else
  icml26 experiment=agentxray_paper "${EXTRA[@]}" "method.datasets=[chatdev,metagpt,gpt,gemini]" \
    run_dir=outputs/agentxray_paper_code "$@"
  icml26 experiment=agentxray_paper "${EXTRA[@]}" "method.datasets=[eduagent]" method.similarity=tfidf \
    run_dir=outputs/agentxray_paper_text "$@"
fi
