#!/usr/bin/env bash
# ThreadWeaver paper-scale reproduction (spec §7). GPU only: 8x80 GB, pip install -e ".[vllm]".
# Qwen3-8B -> stage-1 SFT (959 rewritten traces) -> self-training SFT (17,491) -> P-GRPO (350 steps).
#
# STATUS: the library pieces exist and are tested on tiny models (trie packing + parent-gather loss:
# methods.threadweaver.{TrieCollator,parent_gather_loss}; fork/join rollouts on vLLM:
# ParallelOrchestrator(VLLMEngine(...)); rewards/advantages/loss: pgrpo_reward, group_advantages,
# pgrpo_loss; data pipeline: convert_trace with common.llm.OpenAIChat). The multi-GPU drivers named
# below (methods.threadweaver.paper, TrieSFTTrainer, PGRPOTrainer on common.rl) are NOT written yet;
# this script fails fast until they are.
set -euo pipefail
cd "$(dirname "$0")/../.."
ACC=${ACC:-configs/accelerate/multi_gpu_fsdp.yaml}
OUT=${OUT:-outputs/threadweaver_paper}

if ! python -c "import methods.threadweaver.paper" 2>/dev/null; then
  echo "methods.threadweaver.paper (SFT/RL drivers) is not implemented yet; see docs/methods/threadweaver.md" >&2
  exit 2
fi
# 0. data: one Qwen3-8B trace per Polaris-53K prompt (T=0.6, top-p 0.95), 1,000 correct ones rewritten
python -m methods.threadweaver.paper sample experiment=threadweaver_paper out=$OUT/stage0
python -m methods.threadweaver.paper annotate experiment=threadweaver_paper n=1000 llm.model=gpt-5 out=$OUT/stage1_data
# 1. stage-1 SFT (8 epochs, trie packing, FlexAttention)
accelerate launch --config_file "$ACC" -m methods.threadweaver.paper sft experiment=threadweaver_paper \
  data=$OUT/stage1_data out=$OUT/sft1
# 2. self-training: orchestrated rollouts on all prompts, keep format-valid and correct, SFT 1 epoch
python -m methods.threadweaver.paper self_train experiment=threadweaver_paper ckpt=$OUT/sft1 out=$OUT/st_data
accelerate launch --config_file "$ACC" -m methods.threadweaver.paper sft experiment=threadweaver_paper \
  data=$OUT/st_data method.sft_epochs=1 init=$OUT/sft1 out=$OUT/sft2
# 3. P-GRPO (and the sequential GRPO baseline from Qwen3-8B with the same prompts and steps)
accelerate launch --config_file "$ACC" -m methods.threadweaver.paper rl experiment=threadweaver_paper \
  init=$OUT/sft2 out=$OUT/tw
accelerate launch --config_file "$ACC" -m methods.threadweaver.paper rl experiment=threadweaver_paper \
  init=Qwen/Qwen3-8B sequential=true out=$OUT/seq
# 4. eval: Avg@{32,32,8,1,4,8} on AIME24/25, AMC23, MATH500, Minerva, OlympiadBench; token latency
python -m methods.threadweaver.paper eval experiment=threadweaver_paper ckpts=[$OUT/seq,$OUT/tw] out=$OUT/eval
