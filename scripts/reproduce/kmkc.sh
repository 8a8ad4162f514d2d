#!/usr/bin/env bash
# Know More, Know Clearer (kmkc): toy and paper-scale commands.
#
# What runs today: the CPU toy (fact world, tiny GPT-2 from scratch; decay law, regions, CGKE vs
# uniform SFT). The paper-scale pipeline below is the plan from docs/methods/kmkc.md and
# configs/experiment/kmkc_paper.yaml: the vLLM profiling / TRL SFT / CDKC-GRPO driver is not written
# yet, so `icml26 experiment=kmkc_paper` refuses to start with a pointer to the docs.
set -euo pipefail
cd "$(dirname "$0")/../.."
export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}

stage=${1:-toy}
case "$stage" in
  toy)
    # ~5 min on 2 CPU cores, seed 0; three seeds: add method.seeds=[0,1,2]
    icml26 experiment=kmkc_toy run_dir=outputs/kmkc/toy
    ;;
  paper)
    # GPU plan (8x80GB), spec §7; values in configs/experiment/kmkc_paper.yaml:
    # 1. profile: Qwen/Qwen2.5-7B-Instruct, K=16 samples at T=1.0 with vLLM logprobs=0 over
    #    NQ 50k + HotpotQA 30k + 2Wiki 30k; build_profile + assign_regions (self-evaluation with
    #    the rule fallback) -> profile.jsonl; decay-law fit on 50k instances / 100 bins.
    # 2. CGKE: build_cgke_dataset with the model itself as generator (vLLM), then TRL SFTTrainer
    #    (lr 1e-5, 2 epochs, global batch 128, ZeRO-3: configs/accelerate/deepspeed_zero3.yaml).
    # 3. CDKC: GRPO (G=8, lr 1e-6, beta 1e-3) with correctness_reward + cdkc_entropy_loss.
    # 4. Round 2: repeat 1-3 from the round-1 model; 5. evaluate 11 QA sets, 3,000 items each.
    icml26 experiment=kmkc_paper
    ;;
  *)
    echo "usage: $0 [toy|paper]" >&2
    exit 2
    ;;
esac
