#!/usr/bin/env bash
# WebWorld reproduction (docs/methods/webworld.md). Every step is a stage of the one CLI.
#   scripts/reproduce/webworld.sh toy            # CPU toy, ~8 min on 2 cores
#   scripts/reproduce/webworld.sh bench          # WebWorld-Bench of the released checkpoint (GPU + judge API)
#   scripts/reproduce/webworld.sh train          # Stage 1 + Stage 2 SFT of Qwen3-8B-Base (16 + 8 A100 in the paper)
#   scripts/reproduce/webworld.sh agent          # synthesise 8K trajectories in WebWorld, SFT Qwen3-8B on them
# Extra arguments are Hydra overrides on top of experiment=webworld_paper (e.g. model=qwen3_14b_base
# method.paper.size=14B). Bench files: WEBWORLD_BENCH=<folder with long.json, base.jsonl, ...>.
# Needs: pip install -e ".[vllm]" deepspeed on the GPU machine.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."
STAGE=${1:-toy}
shift || true
ACC=${ACC:-configs/accelerate/deepspeed_zero3.yaml}   # the paper uses ZeRO-2 for 8B/14B; ZeRO-3 fits too
OUT=${OUT:-outputs/webworld_paper}
case "$STAGE" in
  toy)
    HF_HUB_OFFLINE=1 icml26 experiment=webworld_toy "$@"
    ;;
  bench)
    # Serve the world model (OpenAI-compatible); the judge is GPT-4o (OPENAI_API_KEY).
    vllm serve Qwen/WebWorld-8B --max-model-len 32768 --port 8000 &
    VLLM_PID=$!
    trap 'kill $VLLM_PID' EXIT
    until curl -sf localhost:8000/v1/models >/dev/null; do sleep 10; done
    icml26 experiment=webworld_paper method.stage=bench model=webworld_8b \
      method.paper.bench.wm_url=http://localhost:8000/v1 "$@"
    ;;
  train)
    accelerate launch --config_file "$ACC" -m common.cli experiment=webworld_paper \
      method.stage=stage1 method.paper.output_dir="$OUT" "$@"
    # Stage 2 starts from the Stage-1 output and needs ~1K CoT chats (method.paper.stage2_data).
    accelerate launch --config_file "$ACC" -m common.cli experiment=webworld_paper \
      method.stage=stage2 model.path="$OUT/stage1" method.paper.output_dir="$OUT" "$@"
    ;;
  agent)
    vllm serve Qwen/WebWorld-8B --max-model-len 32768 --port 8000 &
    P1=$!
    vllm serve Qwen/Qwen3-32B --max-model-len 32768 --port 8001 --tensor-parallel-size 4 &
    P2=$!
    trap 'kill $P1 $P2' EXIT
    until curl -sf localhost:8000/v1/models >/dev/null && curl -sf localhost:8001/v1/models >/dev/null; do
      sleep 10
    done
    icml26 experiment=webworld_paper method.stage=synth method.paper.output_dir="$OUT" "$@"
    kill $P1 $P2
    trap - EXIT
    accelerate launch --config_file "$ACC" -m common.cli experiment=webworld_paper \
      method.stage=agent model=qwen3_8b method.paper.agent_data="$OUT/synth.jsonl" \
      method.paper.output_dir="$OUT" "$@"
    # Extrinsic evaluation (MiniWob++ / WebArena) runs in BrowserGym/AgentLab, not in this repo.
    ;;
  *)
    echo "usage: $0 toy|bench|train|agent [hydra overrides]" >&2
    exit 2
    ;;
esac
