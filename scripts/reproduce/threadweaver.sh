#!/usr/bin/env bash
# ThreadWeaver at paper scale (arXiv 2512.07843 §6, App. B). GPU only: 8x80 GB, pip install -e ".[vllm]".
# Qwen3-8B -> stage-1 trie SFT (959 rewritten traces, 8 epochs) -> self-training SFT (1 epoch)
# -> P-GRPO (350 steps) and the sequential-GRPO baseline -> eval on six math benchmarks
# (accuracy Avg@k, token latency = critical path, speedup vs the sequential baseline, Table 1).
#
# Inputs (prepared beforehand; nothing is fetched at run time):
#   $DATA/sequential.jsonl    {problem, response, answer} stage-0 traces of Qwen3-8B (correct ones);
#                             stage 1 below rewrites them with an OpenAI-compatible LLM (GPT-5:
#                             OPENAI_API_KEY in the environment, or LLM_URL=<vllm serve .../v1>)
#   RL prompts: method.rl_data (Polaris-53K by hub id from the cache, or RL_DATA=<local file>)
#   Benchmarks: benchmark=math6 by hub id from the cache, or benchmark.sets.<set>.path=<file>
# Extra Hydra overrides are passed to every stage ("$@"), e.g. model.path=<local Qwen3-8B>.
#
# Not scripted here: stage 0 (sampling Qwen3-8B sequential traces on Polaris-53K).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."
DATA=${DATA:-data/threadweaver}
OUT=${OUT:-outputs/threadweaver_paper}
ACC=${ACC:-configs/accelerate/multi_gpu_fsdp.yaml}
EXP=experiment=threadweaver_paper
RL_DATA=()
[[ -n "${RL_DATA_PATH:-}" ]] && RL_DATA=("method.rl_data.path=$RL_DATA_PATH")
train() { accelerate launch --config_file "$ACC" -m common.cli $EXP "$@"; }

LLM=()
[[ -n "${LLM_URL:-}" ]] && LLM=("method.synth.llm_base_url=$LLM_URL")
# 0. stage-1 data: 1,000 sequential traces -> parallel ones by the LLM (§4, App. C/E; 959 kept)
icml26 $EXP method.stage=synth method.synth.source.path="$DATA/sequential.jsonl" "${LLM[@]}" \
  run_dir="$OUT/synth" "$@"
# 1. stage-1 SFT: 8 epochs, trie packing + parent-gather loss, FlexAttention (App. B)
train method.stage=sft method.sft_data.path="$OUT/synth/synth/stage1.jsonl" run_dir="$OUT/sft1" "$@"
# 2. stage-2 data: the stage-1 model's own valid, correct rollouts on the RL prompts (§4; 17,491)
icml26 $EXP method.stage=self_train model.path="$OUT/sft1/model" method.eval.engine=vllm \
  "${RL_DATA[@]}" run_dir="$OUT/self_train" "$@"
# 2b. self-training SFT: 1 epoch from the stage-1 checkpoint (App. C)
train method.stage=sft method.sft_data.path="$OUT/self_train/self_train/self_train.jsonl" \
  model.path="$OUT/sft1/model" +method.sft_trainer.num_train_epochs=1 run_dir="$OUT/sft2" "$@"
INIT=$OUT/sft2/model
# 3. P-GRPO from the SFT model (vLLM colocated); sequential GRPO baseline from Qwen3-8B
train method.stage=rl model.path="$INIT" +method.rl_trainer.use_vllm=true \
  +method.rl_trainer.vllm_mode=colocate "${RL_DATA[@]}" run_dir="$OUT/tw" "$@"
train method.stage=rl +method.rl_trainer.parallel_rollouts=false +method.rl_trainer.use_vllm=true \
  +method.rl_trainer.vllm_mode=colocate "${RL_DATA[@]}" run_dir="$OUT/seq" "$@"
# 4. eval: Avg@{32,32,8,1,4,8}, temperature 1.0, 40k tokens over all branches; Table 1 speedups
icml26 $EXP method.stage=eval model.path="$OUT/seq/model" method.eval.parallel=false \
  run_dir="$OUT/eval_seq" "$@"
icml26 $EXP method.stage=eval model.path="$OUT/tw/model" \
  method.eval.baseline_records="$OUT/eval_seq/records.json" run_dir="$OUT/eval_tw" "$@"
cat "$OUT/eval_tw/results.md"
