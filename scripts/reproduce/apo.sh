#!/usr/bin/env bash
# APO paper-scale reproduction (icml26 experiment=apo_paper). GPUs, vLLM (pip install -e .[vllm]) and network for hub
# checkpoints and data. One launch per arm, same seed and settings (configs/experiment/apo_paper.yaml).
# Usage: bash scripts/reproduce/apo.sh [model] [num_gpus]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"  # the checkout's .venv first on PATH
MODEL=${1:-Qwen/Qwen2.5-Math-7B}
NGPU=${2:-8}
export APO_DATA=${APO_DATA:-data/apo}
export APO_TRAIN=${APO_TRAIN:-$APO_DATA/dapo_math_17k.jsonl}
mkdir -p "$APO_DATA"
unset HF_HUB_OFFLINE

# 1. Data -> local jsonl with columns problem / answer (load_math_dataset layout). The hub ids are
#    common public copies, not checked against the paper (benchmarks inferred).
python - <<'PY'
import json, os
from pathlib import Path
from datasets import load_dataset
out = Path(os.environ["APO_DATA"])
sets = {
    "dapo_math_17k": ("BytedTsinghua-SIA/DAPO-Math-17k", "train"),
    "aime24": ("HuggingFaceH4/aime_2024", "train"),
    "aime25": ("math-ai/aime25", "test"),
    "amc23": ("math-ai/amc23", "test"),
    "math500": ("HuggingFaceH4/MATH-500", "test"),
    "minerva": ("math-ai/minervamath", "test"),
}
def pick(row, names):
    for n in names:
        v = row
        for part in n.split("."):
            v = v.get(part) if isinstance(v, dict) else None
        if v:
            return v[-1]["content"] if isinstance(v, list) else str(v)
    raise KeyError(f"none of {names} in {list(row)}")
for name, (hub, split) in sets.items():
    path = out / f"{name}.jsonl"
    if path.exists():
        continue
    ds = load_dataset(hub, split=split)
    seen = set()
    with path.open("w") as f:
        for row in ds:
            problem = pick(row, ["problem", "question", "prompt"])
            answer = pick(row, ["answer", "solution", "reward_model.ground_truth"])
            if problem in seen:  # DAPO-Math-17k repeats prompts; the paper used a dedup copy
                continue
            seen.add(problem)
            f.write(json.dumps({"problem": problem, "answer": answer}) + "\n")
PY

# 2. One arm per launch: APO, GRPO, GRPO+KL, KL-on-Wrong (each also evaluates the base model).
#    Local copies: model.path=<folder>, benchmark.sets.<set>.path=<file>, method.train_data.path=<file>.
for ARM in apo grpo grpo_kl kl_on_wrong; do
  accelerate launch --config_file configs/accelerate/multi_gpu_fsdp.yaml --num_processes "$NGPU" \
    -m common.cli experiment=apo_paper model.name="$MODEL" "method.arms=[$ARM]" \
    method.train_data.path="$APO_TRAIN" \
    benchmark.sets.aime24.path="$APO_DATA/aime24.jsonl" benchmark.sets.aime25.path="$APO_DATA/aime25.jsonl" \
    benchmark.sets.amc23.path="$APO_DATA/amc23.jsonl" benchmark.sets.math500.path="$APO_DATA/math500.jsonl" \
    benchmark.sets.minerva.path="$APO_DATA/minerva.jsonl" \
    run_dir="outputs/apo/paper/$ARM"
done
# Results: outputs/apo/paper/<arm>/results.md (Avg Pass@k and Pass@k per benchmark).
