"""One training step of each RL trainer with the policy in bfloat16 on the CPU (issue 29 point 1).

A tensor a loss or hook builds in float32 (or on another device) meets the bf16 policy's
log-probabilities here and either raises or silently upcasts; the step must finish with a finite
loss, move the parameters and leave them in bfloat16.
"""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset

from tests.common.mp_worker import PROMPTS, _deterministic, _grpo_args, _length_reward


class _HashEmbedder:
    """A deterministic float32 bag-of-words embedder (Geo-RL's embedder runs outside the policy)."""

    def encode(self, texts):
        out = torch.zeros(len(texts), 8)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, sum(map(ord, w)) % 7] += 1.0
            out[i, -1] += 0.1
        return out


def _quality(prompts, completions, completion_ids, **_):
    return [0.3 + 0.3 * (len(ids) % 3) for ids in completion_ids]


def _trainer(name, out):
    """(trainer class, config, extra trainer kwargs, extra dataset columns)."""
    kw = _grpo_args(out, 4)
    kw["max_steps"] = 1
    if name == "georl":
        from methods.georl import GeoRLGRPOConfig
        from methods.georl.trainer import GeoRLTrainer

        extra = {"embedder": _HashEmbedder(), "reward_funcs": _quality}
        return GeoRLTrainer, GeoRLGRPOConfig(**kw), extra, {}
    if name == "kmkc":
        from methods.kmkc import CDKCConfig, CDKCTrainer

        regions = {"region": ["mastered", "confused", "missing", "missing"]}
        return CDKCTrainer, CDKCConfig(**kw), {}, regions
    if name == "maxrl":
        from methods.maxrl.trainer import MaxRLConfig, MaxRLTrainer

        return MaxRLTrainer, MaxRLConfig(**kw), {}, {}
    if name == "apo":
        from methods.apo.trainer import APOConfig, APOTrainer

        return APOTrainer, APOConfig(**kw), {}, {}
    from trl import GRPOConfig

    from common.rl import GroupAdvantageGRPOTrainer

    return GroupAdvantageGRPOTrainer, GRPOConfig(**kw), {}, {}


@pytest.mark.parametrize("name", ["grpo", "maxrl", "apo", "georl", "kmkc"])
def test_one_bf16_step(name, tmp_path):
    from common.tiny import tiny_causal_lm

    torch.manual_seed(0)
    model, tok = tiny_causal_lm("qwen2", seed=0)
    model = model.to(torch.bfloat16)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    base, config, extra, columns = _trainer(name, str(tmp_path))
    extra.setdefault("reward_funcs", _length_reward)
    data = Dataset.from_dict({"prompt": PROMPTS, **columns})
    trainer = _deterministic(base)(
        model=model, args=config, train_dataset=data, processing_class=tok, **extra
    )
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    after = dict(trainer.model.named_parameters())
    assert all(p.dtype == torch.bfloat16 for p in after.values())
    moved = max((after[k].detach().float() - before[k].float()).abs().max().item() for k in before)
    assert moved > 0, f"{name}: one bf16 step left the parameters unchanged"


def test_one_bf16_pgrpo_step(tmp_path):
    """ThreadWeaver's P-GRPO: orchestrated rollouts, trie-packed bf16 forward, Eq. 4 loss."""
    from common.rl import cpu_grpo_kwargs
    from methods.threadweaver import (
        PGRPOConfig,
        PGRPOReward,
        PGRPOTrainer,
        Trajectory,
        extract_units,
    )
    from methods.threadweaver.toy import make_codebook, toy_tokenizer, toy_trajectory
    from tests.methods.test_threadweaver import MixedOracle, _small_model

    tok = toy_tokenizer(n_symbols=4, chain_len=4)
    cb = make_codebook(4, 4, seed=0)
    t1, t2 = toy_trajectory([0, 2], cb, "par"), toy_trajectory([1, 3, 0], cb, "par")
    par = Trajectory([t1.segments[0], " ; ", t2.segments[0]], t2.final)
    seq = Trajectory(toy_trajectory([0, 2], cb, "seq").segments, "A: c0 c0")  # wrong answer

    def enc(s):
        return tok(s, add_special_tokens=False)["input_ids"]

    prompt = [tok.bos_token_id, *enc("Q: s0 s2\n")]
    engine = MixedOracle(*(extract_units(prompt, t, enc, tok.eos_token_id)[1] for t in (par, seq)))
    engine.n_prompt = len(prompt)
    ds = Dataset.from_list([{"prompt": tok.decode(prompt), "answer": par.final}] * 4)
    model = _small_model(len(tok), "qwen3", dtype=torch.bfloat16)
    before = [p.detach().clone() for p in model.parameters()]
    args = PGRPOConfig(**cpu_grpo_kwargs(output_dir=str(tmp_path), max_steps=1, learning_rate=1e-1,
                                         per_device_train_batch_size=4, num_generations=4),
                       rollout_budget_tokens=200)  # fmt: skip
    reward = PGRPOReward(verify=lambda text, g: text.replace("<eos>", "").endswith(g))
    trainer = PGRPOTrainer(
        model=model, args=args, train_dataset=ds, processing_class=tok,
        reward_funcs=[reward], engine_factory=lambda tr: engine,
    )  # fmt: skip
    result = trainer.train()
    assert math.isfinite(result.training_loss)
    assert bool((trainer.last_advantages != 0).any())  # a real gradient signal
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
