#!/usr/bin/env bash
# Know More, Know Clearer (kmkc): toy and paper-scale commands.
#
# toy:   CPU, fact world + tiny GPT-2 from scratch: decay law, regions vs tiers, CGKE vs uniform SFT,
#        GRPO vs CDKC (calibration). ~10 min per seed on 2 idle cores.
# paper: methods/kmkc/pipeline.py on GPUs (spec §7): profile with vLLM (K=16) -> regions
#        (self-evaluation, rule fallback) -> CGKE SFT (TRL SFTTrainer) -> CDKC (CDKCTrainer, TRL
#        GRPO with colocated vLLM), two rounds, then 11 QA benchmarks (accuracy, ECE,
#        self-knowledge). Needs the FlashRAG datasets under data/flashrag/<name>/{train,dev}.jsonl
#        (hub: RUC-NLPIR/FlashRAG_datasets) and the model weights (hub id or local path).
set -euo pipefail
cd "$(dirname "$0")/../.."

stage=${1:-toy}
case "$stage" in
  toy)
    export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
    icml26 experiment=kmkc_toy 'method.seeds=[0,1,2]' run_dir=outputs/kmkc/toy
    ;;
  paper)
    # One node, 8 GPUs; the policy trains under ZeRO-3 while vLLM generates in colocate mode.
    accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml \
      -m scripts.run experiment=kmkc_paper run_dir=outputs/kmkc/paper "${@:2}"
    # Llama backbone: add method.paper.model=meta-llama/Llama-3.1-8B-Instruct
    ;;
  *)
    echo "usage: $0 [toy|paper] [hydra overrides...]" >&2
    exit 2
    ;;
esac
