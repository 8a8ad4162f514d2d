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
    ALL,
    LOSS_TYPES,
    TRL_TARGET_VERSION,
    GroupAdvantageGRPOTrainer,
    cpu_grpo_kwargs,
    reduce_token_loss,
    trl_group_advantages,
)
from common.threads import torch_threads  # noqa: E402
from common.tiny import tiny_causal_lm  # noqa: E402


def _reward_distinct_chars(completions, **kwargs):
    """Deterministic, text-dependent reward with spread inside a group."""
    return [len(set(c)) / 10.0 for c in completions]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matmuls: one thread is faster, and the CI machine has two cores."""
    with torch_threads(1):
        yield


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


# ----- issue 26 point 5: TRL options the hooks do not implement; reduce_token_loss vs TRL -------


def _two_rewards_a(completions, **kwargs):
    return [len(set(c)) / 10.0 for c in completions]


def _two_rewards_b(completions, **kwargs):
    return [float(len(c) % 3) for c in completions]


def _trainer(cls, base_model, tmp_path, **cfg):
    model, tok = base_model
    cfg.setdefault("per_device_train_batch_size", 8)
    args = GRPOConfig(**cpu_grpo_kwargs(output_dir=str(tmp_path), **cfg))
    return cls(
        model=copy.deepcopy(model),
        reward_funcs=[_two_rewards_a, _two_rewards_b],
        args=args,
        train_dataset=_dataset(),
        processing_class=tok,
    )


def test_normalize_then_sum_pure_function_matches_trl_formula():
    """GDPO: per-function group normalisation, weighted sum, then whole-batch normalisation."""
    per_func = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [0.0, 1.0], [1.0, 1.0]]])  # [1, 4, 2]
    w = torch.tensor([1.0, 0.5])
    summed = (per_func * w).sum(-1)
    got = trl_group_advantages(
        summed, rewards_per_func=per_func, reward_weights=w, aggregation="normalize_then_sum"
    )
    z = (per_func - per_func.mean(1, keepdim=True)) / (per_func.std(1, keepdim=True) + 1e-4)
    s = (z * w).sum(-1)
    expected = (s - s.mean()) / (s.std() + 1e-4)
    torch.testing.assert_close(got, expected)
    # sum_then_normalize gives a different answer on the same rewards (the bug of issue 26)
    assert not torch.allclose(got, trl_group_advantages(summed), atol=1e-2)
    with pytest.raises(ValueError, match="rewards_per_func"):
        trl_group_advantages(summed, aggregation="normalize_then_sum")
    with pytest.raises(ValueError, match="aggregation"):
        trl_group_advantages(summed, aggregation="mean")
    with pytest.raises(ValueError, match="scale"):
        trl_group_advantages(summed, scale="batchwise")


@pytest.mark.parametrize(
    "scale, aggregation",
    [
        ("group", "sum_then_normalize"),
        ("batch", "sum_then_normalize"),
        ("none", "sum_then_normalize"),
        ("group", "normalize_then_sum"),
    ],
)
def test_default_hook_equals_trl_advantages(base_model, tmp_path, scale, aggregation):
    """The default compute_advantages == TRL's own advantage for every scale/aggregation option."""
    cfg = {
        "scale_rewards": scale,
        "multi_objective_aggregation": aggregation,
        "reward_weights": [1.0, 0.5],
        "max_completion_length": 6,
    }
    outs = []
    for cls, sub in ((GRPOTrainer, "trl"), (GroupAdvantageGRPOTrainer, "hook")):
        trainer = _trainer(cls, base_model, tmp_path / sub, **cfg)
        torch.manual_seed(0)
        batch = [{"prompt": p} for p in ["1+1="] * 4 + ["abc"] * 4]
        outs.append(trainer._generate_and_score_completions(batch))
    assert torch.equal(outs[0]["completion_ids"], outs[1]["completion_ids"])
    assert outs[0]["advantages"].abs().sum() > 0
    torch.testing.assert_close(outs[1]["advantages"], outs[0]["advantages"], rtol=1e-5, atol=1e-6)


class _CustomAdvantage(GroupAdvantageGRPOTrainer):
    def compute_advantages(self, rewards, inputs):
        return rewards - rewards.mean(dim=1, keepdim=True)


class _CustomLoss(GroupAdvantageGRPOTrainer):
    def policy_loss(self, model, inputs):
        return super().policy_loss(model, inputs)


@pytest.mark.parametrize(
    "cls, option, value",
    [
        (_CustomAdvantage, "multi_objective_aggregation", "normalize_then_sum"),
        (_CustomAdvantage, "scale_rewards", "batch"),
        (_CustomLoss, "loss_type", "sapo"),
        (_CustomLoss, "top_entropy_quantile", 0.5),
        (_CustomLoss, "importance_sampling_level", "sequence"),
        (_CustomLoss, "off_policy_mask_threshold", 0.5),
        (_CustomLoss, "entropy_coef", 0.01),
        (_CustomLoss, "delta", 2.0),
        (_CustomLoss, "beta", 0.04),
    ],
)
def test_unimplemented_option_raises_at_construction(base_model, tmp_path, cls, option, value):
    with pytest.raises(ValueError, match=rf"{cls.__name__}\.\w+ does not implement .*{option}"):
        _trainer(cls, base_model, tmp_path, **{option: value})


def test_vllm_correction_without_support_raises(base_model, tmp_path):
    # Raised before TRL starts vLLM (the check runs first in __init__).
    with pytest.raises(ValueError, match="vllm_importance_sampling_correction"):
        _trainer(_CustomLoss, base_model, tmp_path, use_vllm=True)


def test_declared_support_is_not_inherited_by_a_new_override(base_model, tmp_path):
    class _Declared(_CustomAdvantage):
        ADVANTAGE_SUPPORT = {"scale_rewards": ("none",)}

        def compute_advantages(self, rewards, inputs):
            return rewards - rewards.mean(dim=1, keepdim=True)

    class _Override(_Declared):
        def compute_advantages(self, rewards, inputs):
            return torch.zeros_like(rewards)

    _trainer(_Declared, base_model, tmp_path / "a", scale_rewards="none")  # declared: accepted
    with pytest.raises(ValueError, match="_Override.compute_advantages .*scale_rewards"):
        _trainer(_Override, base_model, tmp_path / "b", scale_rewards="none")
    # the default hook and a loss that only calls super() with default options are fine
    _trainer(GroupAdvantageGRPOTrainer, base_model, tmp_path / "c", scale_rewards="batch")


class _ReducedTRLLoss(GroupAdvantageGRPOTrainer):
    """TRL's per-token losses (trl 1.16 ``_compute_loss``), reduced by ``reduce_loss``."""

    POLICY_LOSS_SUPPORT = {
        "loss_type": LOSS_TYPES,
        "beta": ALL,
        "vllm_importance_sampling_correction": (True, False),
    }

    def policy_loss(self, model, inputs):
        logps = self.per_token_logps(model, inputs)  # [b, T]
        mask = inputs["completion_mask"]
        adv = inputs["advantages"][:, None]  # [b, 1]
        old = inputs["old_per_token_logps"]
        coef_1 = torch.exp(logps - old)
        lt = self.loss_type
        if lt == "cispo":
            ptl = -torch.clamp(coef_1, max=self.epsilon_high).detach() * adv * logps
        elif lt == "sapo":
            temp = torch.where(
                adv > 0, self.args.sapo_temperature_pos, self.args.sapo_temperature_neg
            )
            ptl = -torch.sigmoid(temp * (coef_1 - 1)) * 4 / temp * adv
        elif lt == "vespo":
            phi = GRPOTrainer.get_gamma_weights(
                adv, logps - old, mask, inputs.get("importance_sampling_ratio")
            )
            ptl = -phi * adv * logps
        else:
            coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)
            ptl = -torch.min(coef_1 * adv, coef_2 * adv)
        kl = None
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            kl = (torch.exp(ref - logps) - (ref - logps) - 1) * coef_1  # bias-corrected, as TRL
        return self.reduce_loss(ptl, inputs, per_token_kl=kl)


@pytest.fixture(scope="module")
def loss_batch(base_model):
    g = torch.Generator().manual_seed(3)
    b, p, t = 6, 4, 7
    vocab = base_model[0].config.vocab_size
    prompt_ids = torch.randint(3, vocab, (b, p), generator=g)
    prompt_mask = torch.ones(b, p, dtype=torch.long)
    prompt_mask[:2, :1] = 0  # left padding
    completion_ids = torch.randint(3, vocab, (b, t), generator=g)
    lengths = torch.tensor([7, 3, 5, 1, 6, 4])
    completion_mask = (torch.arange(t)[None] < lengths[:, None]).long()
    with torch.no_grad():
        ids = torch.cat([prompt_ids, completion_ids], 1)
        logits = base_model[0](ids, attention_mask=torch.cat([prompt_mask, completion_mask], 1))
        logps = torch.log_softmax(logits.logits[:, p - 1 : -1], -1)
        logps = logps.gather(-1, completion_ids[..., None]).squeeze(-1)
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(b, generator=g),
        # ratios far enough from 1 that clipping is active on some tokens
        "old_per_token_logps": logps + 0.4 * torch.randn(b, t, generator=g),
        "ref_per_token_logps": logps + 0.3 * torch.randn(b, t, generator=g),
        "importance_sampling_ratio": 0.5 + torch.rand(b, t, generator=g),
        "num_items_in_batch": completion_mask.sum() * 3,
    }


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_reduce_token_loss_matches_trl_compute_loss(base_model, tmp_path, loss_batch, loss_type):
    """Each loss_type, train and eval, with KL and with/without the vLLM correction, == TRL's."""
    trainer = _trainer(
        _ReducedTRLLoss,
        base_model,
        tmp_path,
        loss_type=loss_type,
        gradient_accumulation_steps=2,
        steps_per_generation=4,
        per_device_train_batch_size=4,
        max_completion_length=9,
        epsilon_high=0.28,
    )
    trainer.current_gradient_accumulation_steps = 2
    model = trainer.model
    seen = set()
    for mode in ("train", "eval"):
        model.train(mode == "train")
        for beta, vllm in ((0.0, False), (0.04, False), (0.04, True)):
            trainer.beta, trainer.use_vllm = beta, vllm
            trainer.vllm_importance_sampling_correction = True
            ours = trainer.policy_loss(model, dict(loss_batch))
            theirs = GRPOTrainer._compute_loss(trainer, model, dict(loss_batch))
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
            seen.add(round(float(theirs.detach()), 6))
    assert len(seen) >= 4, "the settings must change TRL's loss, else the test pins nothing"


def test_reduce_token_loss_closed_forms_and_errors():
    ptl = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert float(reduce_token_loss(ptl, mask, "grpo")) == pytest.approx((2.0 + 4.0) / 2)
    assert float(reduce_token_loss(ptl, mask, "bnpo")) == pytest.approx(10.0 / 4)
    assert float(reduce_token_loss(ptl, mask, "luspo")) == pytest.approx(10.0 / 2)
    got = reduce_token_loss(ptl, mask, "dr_grpo", max_completion_length=5)
    assert float(got) == pytest.approx(10.0 / (2 * 5))
    got = reduce_token_loss(
        ptl, mask, "dapo", num_items_in_batch=20, gradient_accumulation_steps=2,
        steps_per_generation=4,
    )  # fmt: skip
    assert float(got) == pytest.approx(10.0 / (20 * 2 / 4))
    got = reduce_token_loss(ptl, mask, "grpo", mode="train", gradient_accumulation_steps=4)
    assert float(got) == pytest.approx(3.0 / 4)
    got = reduce_token_loss(ptl, mask, "grpo", mode="eval", gradient_accumulation_steps=4)
    assert float(got) == pytest.approx(3.0)
    ratio = torch.tensor([[2.0], [0.5]])
    got = reduce_token_loss(ptl, mask, "bnpo", importance_sampling_ratio=ratio)
    assert float(got) == pytest.approx((12.0 + 2.0) / 4)
    assert float(reduce_token_loss(ptl, mask, "vespo", num_items_in_batch=4,
                                   importance_sampling_ratio=ratio)) == pytest.approx(2.5)  # fmt: skip
    with pytest.raises(ValueError, match="loss_type"):
        reduce_token_loss(ptl, mask, "token_mean")
    with pytest.raises(ValueError, match="max_completion_length"):
        reduce_token_loss(ptl, mask, "dr_grpo")
    with pytest.raises(ValueError, match="num_items_in_batch"):
        reduce_token_loss(ptl, mask, "dapo")
    with pytest.raises(ValueError, match="mode"):
        reduce_token_loss(ptl, mask, "grpo", mode="test")
    with pytest.raises(ValueError, match="per_token_loss"):
        reduce_token_loss(ptl[:, :2], mask, "grpo")
