#!/usr/bin/env bash
# ThreadWeaver paper-scale reproduction (spec §7). GPU only: 8x80 GB, pip install -e ".[vllm]".
# Qwen3-8B -> stage-1 trie SFT (959 rewritten traces) -> self-training SFT -> P-GRPO (350 steps)
# -> eval on six math benchmarks (accuracy Avg@k, token latency = critical path, speedup vs seq. GRPO).
#
# Inputs (download beforehand; nothing is fetched at run time):
#   $DATA/stage1.jsonl        {problem, response} parallel traces (data pipeline output:
#                             methods.threadweaver.convert_trace with common.llm.OpenAIChat, GPT-5)
#   $DATA/self_train.jsonl    {problem, response} filtered own rollouts (optional, stage 2)
#   $DATA/polaris_rl.parquet  RL prompts {problem, answer} (Polaris-53K subset)
#   $DATA/bench/{aime24,aime25,amc23,math500,minerva,olympiadbench}.{jsonl,parquet} (hub layouts)
# SMOKE=1 runs every stage for one step / one problem (checks the wiring, numbers meaningless).
#
# Not scripted here: stage 0 (sampling Qwen3-8B traces on Polaris-53K) and the GPT-5 rewriting, which
# need an OpenAI-compatible endpoint; see docs/methods/threadweaver.md (data pipeline).
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${DATA:-data/threadweaver}
OUT=${OUT:-outputs/threadweaver_paper}
ACC=${ACC:-accelerate launch}          # e.g. "accelerate launch --config_file fsdp.yaml"
ENGINE=${ENGINE:-vllm}
EXP=experiment=threadweaver_paper
SMOKE_SFT=(); SMOKE_RL=(); SMOKE_EV=()
if [[ "${SMOKE:-0}" == "1" ]]; then
  SMOKE_SFT=(--max-steps 1); SMOKE_RL=(--max-steps 1); SMOKE_EV=(--limit 1 --avg-at-k 1)
fi
PAPER="python -m methods.threadweaver.paper"
BENCH=()
for b in aime24 aime25 amc23 math500 minerva olympiadbench; do
  f=$(ls "$DATA"/bench/"$b".* 2>/dev/null | head -n1 || true)
  [[ -n "$f" ]] && BENCH+=(--bench "$b=$f")
done

# 1. stage-1 SFT: 8 epochs, trie packing + parent-gather loss, FlexAttention (App. B)
$ACC -m methods.threadweaver.paper sft --data "$DATA/stage1.jsonl" --out "$OUT/sft1" "${SMOKE_SFT[@]}" $EXP
INIT=$OUT/sft1
# 2. self-training round (1 epoch from the stage-1 checkpoint, spec §9.4)
if [[ -f "$DATA/self_train.jsonl" ]]; then
  $ACC -m methods.threadweaver.paper sft --data "$DATA/self_train.jsonl" --init "$OUT/sft1" \
    --out "$OUT/sft2" "${SMOKE_SFT[@]}" $EXP method.sft_epochs=1
  INIT=$OUT/sft2
fi
# 3. P-GRPO from the SFT model; sequential GRPO baseline from Qwen3-8B (same prompts and steps)
$ACC -m methods.threadweaver.paper rl --data "$DATA/polaris_rl.parquet" --init "$INIT" \
  --out "$OUT/tw" --engine "$ENGINE" "${SMOKE_RL[@]}" $EXP
$ACC -m methods.threadweaver.paper rl --data "$DATA/polaris_rl.parquet" --init Qwen/Qwen3-8B \
  --out "$OUT/seq" --engine "$ENGINE" --sequential "${SMOKE_RL[@]}" $EXP
# 4. eval: Avg@{32,32,8,1,4,8}, temperature 1.0, 40k tokens over all branches; Table 1 speedups
$PAPER eval --init "$OUT/seq" --out "$OUT/eval_seq" --engine "$ENGINE" --sequential \
  "${BENCH[@]}" "${SMOKE_EV[@]}" $EXP
$PAPER eval --init "$OUT/tw" --out "$OUT/eval_tw" --engine "$ENGINE" \
  --baseline "$OUT/eval_seq/records.json" "${BENCH[@]}" "${SMOKE_EV[@]}" $EXP
cat "$OUT/eval_tw/metrics.json"
