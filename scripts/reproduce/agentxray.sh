#!/usr/bin/env bash
# AgentXRay (arXiv 2602.05353) at paper scale: Red-Black MCTS workflow reconstruction on the five paper
# domains of benchmark=agentxray (shiowen/AgentXRay-Datasets by hub id; only the selected subsets are
# fetched), with an OpenAI-compatible model for the profile generator and every agent. N = 20, M = 16,
# L_max = 6, beta = 0.5 (official defaults); arms red_black and no_coloring, seeds 0-2; SFE on the code
# domains, TF-IDF cosine on eduagent. Token counts come from the API's usage field; generator (profile)
# tokens are reported apart from agent tokens. No training; the cost is LLM inference.
#
# Usage:
#   OPENAI_API_KEY=... scripts/reproduce/agentxray.sh                   # hosted API (gpt-4o-mini)
#   scripts/reproduce/agentxray.sh vllm                                 # `vllm serve` an open model (2 GPUs)
#   SMOKE=1 OPENAI_API_KEY=... scripts/reproduce/agentxray.sh           # 1 subset, 2 iterations, 1 seed
#   DATA=/path/AgentXRay-Datasets/data scripts/reproduce/agentxray.sh   # local copies instead of the hub
# Extra arguments go to icml26 (Hydra overrides). Output: outputs/agentxray_paper*/results.{json,md}.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."

BACKEND="openai"
if [[ "${1:-}" == "openai" || "${1:-}" == "vllm" ]]; then BACKEND="$1"; shift; fi
EXTRA=()
if [[ -n "${DATA:-}" ]]; then
  for s in chatdev metagpt eduagent gpt gemini; do EXTRA+=("benchmark.sets.$s.path=$DATA/$s"); done
fi

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
  EXTRA+=("method.sets=[metagpt]" method.search.iterations=2 "method.seeds=[0]" method.train_samples=1
          method.test_samples=1 run_dir=outputs/agentxray_paper_smoke)
else
  EXTRA+=(run_dir=outputs/agentxray_paper)
fi

icml26 experiment=agentxray_paper method.stage=paper "${EXTRA[@]}" "$@"
