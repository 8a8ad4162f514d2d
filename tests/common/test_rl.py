"""Tests for common/rl.py: the advantage and loss hooks of GroupAdvantageGRPOTrainer (trl 1.16)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import copy  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from common.rl import (  # noqa: E402
    TRL_TARGET_VERSION,
    GroupAdvantageGRPOTrainer,
    cpu_grpo_kwargs,
    trl_group_advantages,
)
from common.tiny import tiny_causal_lm  # noqa: E402


def _reward_distinct_chars(completions, **kwargs):
    """Deterministic, text-dependent reward with spread inside a group."""
    return [len(set(c)) / 10.0 for c in completions]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matmuls: one thread is faster, and the CI machine has two cores."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def base_model():
    model, tok = tiny_causal_lm("qwen2", seed=0)
    return model, tok


def _dataset():
    return Dataset.from_dict({"prompt": ["1+1=", "2+3=", "hello", "abc"] * 2})


def _train(trainer_cls, base_model, tmp_path, steps=2, **cfg):
    model, tok = base_model
    model = copy.deepcopy(model)
    cfg.setdefault("per_device_train_batch_size", 8)  # 2 prompts x N=4 per step
    args = GRPOConfig(**cpu_grpo_kwargs(output_dir=str(tmp_path), max_steps=steps, **cfg))
    trainer = trainer_cls(
        model=model,
        reward_funcs=_reward_distinct_chars,
        args=args,
        train_dataset=_dataset(),
        processing_class=tok,
    )
    trainer.train()
    return trainer, {k: v.detach().clone() for k, v in model.named_parameters()}


class _ExplicitTRLHook(GroupAdvantageGRPOTrainer):
    def compute_advantages(self, rewards, inputs):
        return trl_group_advantages(rewards, eps=1e-4, scale=True)


class _ZeroHook(GroupAdvantageGRPOTrainer):
    def compute_advantages(self, rewards, inputs):
        return torch.zeros_like(rewards)


class _TokenZeroHook(GroupAdvantageGRPOTrainer):
    def compute_advantages(self, rewards, inputs):
        t = inputs["completion_mask"].size(1)
        return torch.zeros(*rewards.shape, t)  # [B, N, T]


def test_trl_version_pinned():
    import trl

    assert trl.__version__ == TRL_TARGET_VERSION


def test_trl_group_advantages_closed_form():
    r = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    a = trl_group_advantages(r)
    std = torch.tensor([1.0, 0.0, 0.0, 0.0]).std()  # unbiased, as TRL
    assert torch.allclose(a[0], (r[0] - 0.25) / (std + 1e-4))
    assert torch.equal(a[1], torch.zeros(4))
    r_nan = torch.tensor([[1.0, float("nan"), 0.0]])
    a_nan = trl_group_advantages(r_nan, scale=False)
    assert torch.allclose(a_nan, torch.tensor([[0.5, 0.0, -0.5]]))


def test_hook_reproduces_grpo_trainer(base_model, tmp_path):
    """(a) TRL's advantage through the hook == plain GRPOTrainer, same seed, 2 steps."""
    init = {k: v.detach().clone() for k, v in base_model[0].named_parameters()}
    ref_trainer, ref = _train(GRPOTrainer, base_model, tmp_path / "ref")
    hook_trainer, ours = _train(_ExplicitTRLHook, base_model, tmp_path / "hook")
    moved = sum(not torch.equal(init[k], ref[k]) for k in ref)
    assert moved > len(ref) // 2, "plain GRPO should move most parameters"
    for k in ref:
        torch.testing.assert_close(ours[k], ref[k], rtol=1e-5, atol=1e-6, msg=k)
    assert hook_trainer.last_rewards.shape == (2, 4)  # [B, N]: 8 completions, N=4
    expected = trl_group_advantages(hook_trainer.last_rewards)
    assert torch.allclose(hook_trainer.last_advantages, expected)


def test_zero_advantages_leave_parameters(base_model, tmp_path):
    """(b) zero advantages, no KL, no weight decay -> parameters bit-identical."""
    init = {k: v.detach().clone() for k, v in base_model[0].named_parameters()}
    _, after = _train(_ZeroHook, base_model, tmp_path / "zero")
    for k in init:
        assert torch.equal(init[k], after[k]), k


def test_token_level_advantages_accepted(base_model, tmp_path):
    """[B, N, T] advantages are sliced to the local rows and the completion length."""
    init = {k: v.detach().clone() for k, v in base_model[0].named_parameters()}
    trainer, after = _train(_TokenZeroHook, base_model, tmp_path / "tok", steps=1)
    assert trainer.last_advantages.dim() == 3
    assert all(torch.equal(init[k], after[k]) for k in init)


def test_policy_loss_hook_is_used(base_model, tmp_path):
    calls = []

    class _Counting(GroupAdvantageGRPOTrainer):
        def policy_loss(self, model, inputs):
            logps = self.per_token_logps(model, inputs)  # [b, T]
            assert logps.shape == inputs["completion_mask"].shape
            calls.append(1)
            return super().policy_loss(model, inputs)

    _train(_Counting, base_model, tmp_path / "loss", steps=1)
    assert calls


def test_bad_hook_shape_raises(base_model, tmp_path):
    class _Bad(GroupAdvantageGRPOTrainer):
        def compute_advantages(self, rewards, inputs):
            return rewards.flatten()

    with pytest.raises(ValueError, match="compute_advantages must return"):
        _train(_Bad, base_model, tmp_path / "bad", steps=1)


def test_log_metric_validates_mode():
    trainer = GroupAdvantageGRPOTrainer.__new__(GroupAdvantageGRPOTrainer)
    from collections import defaultdict

    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    trainer.log_metric("x/y", 1.5, mode="train")
    assert trainer._metrics["train"]["x/y"] == [1.5]
    with pytest.raises(ValueError, match="mode"):
        trainer.log_metric("x/y", 1.0, mode="test")


def test_completion_extras_stay_aligned_through_shuffle_and_split(base_model, tmp_path):
    """An extra computed per completion at generation time reaches policy_loss on the same row."""
    seen = []

    class _Extras(GroupAdvantageGRPOTrainer):
        def completion_extras(self, rewards, inputs):
            ids = inputs["completion_ids"] * inputs["completion_mask"]  # [b·N, T]
            return {"id_checksum": ids.sum(dim=1), "row_reward": rewards.flatten()}

        def policy_loss(self, model, inputs):
            ids = inputs["completion_ids"] * inputs["completion_mask"]
            assert torch.equal(inputs["id_checksum"], ids.sum(dim=1))
            seen.append(inputs["id_checksum"].numel())
            return super().policy_loss(model, inputs)

    # 2 micro-batches per generation: TRL shuffles the 16 completions, then splits them.
    _train(_Extras, base_model, tmp_path / "extras", steps=2, gradient_accumulation_steps=2)
    assert seen and all(n == 8 for n in seen)


def test_completion_extras_bad_rows_or_name_raise(base_model, tmp_path):
    class _WrongRows(GroupAdvantageGRPOTrainer):
        def completion_extras(self, rewards, inputs):
            return {"x": torch.zeros(3)}

    class _Shadow(GroupAdvantageGRPOTrainer):
        def completion_extras(self, rewards, inputs):
            return {"advantages": torch.zeros(rewards.numel())}

    with pytest.raises(ValueError, match="one row per local completion"):
        _train(_WrongRows, base_model, tmp_path / "rows", steps=1)
    with pytest.raises(ValueError, match="shadows"):
        _train(_Shadow, base_model, tmp_path / "shadow", steps=1)


def test_per_token_entropy_matches_categorical(base_model, tmp_path):
    """per_token_logps(..., with_entropy=True) gives the entropy of the next-token distribution."""
    got = {}

    class _Probe(GroupAdvantageGRPOTrainer):
        def policy_loss(self, model, inputs):
            logps, ent = self.per_token_logps(model, inputs, with_entropy=True)
            ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
            mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
            t = inputs["completion_ids"].size(1)
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=mask).logits[:, -t - 1 : -1]
                logits = logits / self.temperature
                ref = torch.distributions.Categorical(logits=logits.float()).entropy()
            got["ent"], got["ref"] = ent.detach(), ref
            got["mask"] = inputs["completion_mask"].bool()
            return super().policy_loss(model, inputs)

    _train(_Probe, base_model, tmp_path / "ent", steps=1)
    m = got["mask"]
    torch.testing.assert_close(got["ent"][m], got["ref"][m], rtol=1e-4, atol=1e-4)
