#!/usr/bin/env bash
# Know More, Know Clearer (kmkc): toy and paper-scale commands (icml26 / common.cli only).
#
# toy:   CPU, fact world + tiny GPT-2 from scratch: decay law, regions vs tiers, CGKE vs uniform SFT,
#        GRPO vs CDKC (calibration). ~6 min per seed on 2 idle cores.
# paper: method.stage=paper on GPUs: profile with vLLM (K=16) -> regions (self-evaluation, rule
#        fallback) -> CGKE SFT (TRL SFTTrainer) -> CDKC (CDKCTrainer, TRL GRPO with colocated vLLM),
#        two rounds, then the 11 QA sets of benchmark=flashrag11 (accuracy, ECE, self-knowledge).
#        The FlashRAG sets are exported to $FLASHRAG_DIR/<set>/{train,dev}.jsonl first (network).
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
    python - <<'PY'
import json, os
from pathlib import Path
from datasets import load_dataset
root = Path(os.environ["FLASHRAG_DIR"])
want = {"nq": ["train", "dev"], "hotpotqa": ["train", "dev"], "2wikimultihopqa": ["train", "dev"],
        "popqa": ["test"], "musique": ["dev"], "squad": ["dev"], "beerqa": ["dev"],
        "web_questions": ["test"], "bamboogle": ["test"], "searchqa": ["test"], "triviaqa": ["dev"]}
for name, splits in want.items():
    for split in splits:
        path = root / name / f"{'train' if split == 'train' else 'dev'}.jsonl"
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        ds = load_dataset("RUC-NLPIR/FlashRAG_datasets", name, split=split)
        with path.open("w") as f:
            for row in ds:
                f.write(json.dumps({"id": row["id"], "question": row["question"],
                                    "golden_answers": row["golden_answers"]}) + "\n")
PY
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
