#!/usr/bin/env bash
# Know More, Know Clearer (kmkc): toy and paper-scale commands (icml26 / common.cli only).
#
# toy:   CPU, fact world + tiny GPT-2 from scratch: decay law, regions vs tiers, CGKE vs uniform SFT,
#        GRPO vs CDKC (calibration). ~6 min per seed on 2 idle cores.
# paper: method.stage=paper on GPUs: profile with vLLM (K=16) -> regions (self-evaluation, rule
#        fallback) -> CGKE SFT (TRL SFTTrainer) -> CDKC (CDKCTrainer, TRL GRPO with colocated vLLM),
#        two rounds, then the 11 QA sets of benchmark=flashrag11 (accuracy, ECE, self-knowledge).
#        The FlashRAG sets are exported to $FLASHRAG_DIR/<set>/{train,dev}.jsonl first (network);
#        BeerQA and SearchQA come from their own releases (see below).
#        The files and fields the paper stages read: docs/methods/kmkc.md, "Data format".
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
cd "$(dirname "$0")/../.."

stage=${1:-toy}
case "$stage" in
  toy)
    export HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
    icml26 experiment=kmkc_toy 'method.toy.seeds=[0,1,2]' run_dir=outputs/kmkc/toy
    ;;
  paper)
    export FLASHRAG_DIR=${FLASHRAG_DIR:-data/flashrag}
    # Exports every set the preset reads (method.train_sets + benchmark.sets) that names a hub_id,
    # from RUC-NLPIR/FlashRAG_datasets (<set>/{train,dev,test}.jsonl there) to its local path
    # (methods/kmkc/flashrag.py; present files are kept). beerqa and searchqa are not configs of
    # that repository: convert BeerQA's beerqa_dev_v1.0.json (https://beerqa.github.io) and the
    # SearchQA release (https://github.com/nyu-dl/dl4ir-searchQA) to $FLASHRAG_DIR/{beerqa,searchqa}/dev.jsonl
    # (one {"id", "question", "golden_answers": [...]} per line) first; the export stops naming them.
    python -m methods.kmkc.flashrag experiment=kmkc_paper "${@:2}"
    # One node, 8 GPUs; the policy trains under ZeRO-3 while vLLM generates in colocate mode.
    accelerate launch --config_file configs/accelerate/deepspeed_zero3.yaml \
      -m common.cli experiment=kmkc_paper run_dir=outputs/kmkc/paper "${@:2}"
    # Llama backbone: add model=llama3_1_8b_instruct
    # Step by step (one round): method.stage=profile, then sft, then cdkc with
    # model.path=outputs/kmkc/paper/paper/cgke/checkpoint, then eval on the CDKC checkpoint.
    ;;
  *)
    echo "usage: $0 [toy|paper] [hydra overrides...]" >&2
    exit 2
    ;;
esac
