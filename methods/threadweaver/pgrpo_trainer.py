"""P-GRPO on TRL: orchestrated (fork/join) rollouts, the acceleration reward, trie-packed loss (§5).

:class:`PGRPOTrainer` is a :class:`common.rl.GroupAdvantageGRPOTrainer` with three changes:

* **Rollouts** come from :class:`~methods.threadweaver.orchestrator.ParallelOrchestrator` through
  TRL's ``rollout_func`` (:class:`OrchestratedRollout`): each completion is the *joined* trajectory
  (all threads, headers and join suffixes). Tokens the orchestrator inserted (thread headers,
  ``</Thread>`` repairs, join suffix) are marked 0 in ``env_mask``, so TRL never counts them as
  generated. The requests (units) of every trajectory are kept for the loss.
* **Advantages** (Eq. 9): ``A = r − mean_group(r)``, no division by the group std
  (:func:`~methods.threadweaver.pgrpo.group_advantages`; ``adv_norm="std"`` = the Tab. 5 ablation).
* **Policy loss** (Eq. 4): the trajectory advantage is broadcast to every completion token of every
  unit. The units of a trajectory are packed into one trie (ancestor mask, depth positions), so each
  thread's tokens are scored with exactly the context and positions the orchestrator gave them, not
  with the causal view of the joined text that TRL's default loss would use. With one optimisation
  step per rollout batch the importance ratio is 1 and PPO clipping is inactive (§5.1, App. A.1), so
  ``L = −(1/T_batch) Σ_rows A_row Σ_{v ∈ completion nodes} log π(v | ancestors(v))``
  (token-sum normalised like TRL's ``loss_type="dapo"``).

The reward (Eq. 5-8) is :class:`PGRPOReward`: ``1{correct} + 1{correct}·min(ρη, ρ_clip)`` (paper) or the
official code's variant; it reads η and the response text (tags kept) that the rollout passes to the
reward functions as extra fields.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from common.rl import GroupAdvantageGRPOTrainer

from .orchestrator import (
    CompletionEngine,
    HFGenerateEngine,
    OrchestratorConfig,
    ParallelOrchestrator,
)
from .format import JOIN_SUFFIX, validate
from .pgrpo import group_advantages, is_correct, pgrpo_reward
from .trie import TrieCollator, Unit, build_packed, packed_forward, parent_gather_loss

logger = logging.getLogger(__name__)

__all__ = ["OrchestratedRollout", "PGRPOReward", "PGRPOTrainer"]


class PGRPOReward:
    """Reward function for TRL (Eq. 5-8): correctness plus the clipped acceleration bonus.

    Called by TRL with the dataset columns and the rollout's extra fields as keyword arguments; uses
    ``response_text`` (tags kept) for grading and the format check, ``eta`` from
    :func:`parallel_stats` and ``has_parallel`` (at least one block).

    Args:
        verify: ``(response_text, gold) -> bool``; default :func:`is_correct` (last ``\\boxed``).
        answer_key: dataset column with the gold answer.
        rho, rho_clip, variant, parallel_reward, format_error_reward: see :func:`pgrpo_reward`.
        treat_no_parallel_as_format_error: official option of the same name: a trajectory
            without any ``<Parallel>`` block fails the format check.
        join_suffix, conclusion: the format the check expects (:func:`validate`, non-strict:
            balanced tags, no nesting, #Outline = #Thread, non-empty threads, a ``</think>``).
    """

    __name__ = "pgrpo_reward"

    def __init__(
        self,
        verify: Callable[[str, Any], bool] = is_correct,
        answer_key: str = "answer",
        rho: float = 0.5,
        rho_clip: float = 0.2,
        variant: str = "paper",
        parallel_reward: float = 0.0,
        format_error_reward: float | None = None,
        treat_no_parallel_as_format_error: bool = False,
        join_suffix: str = JOIN_SUFFIX,
        conclusion: bool = False,
    ):
        pgrpo_reward(True, 0.0, rho, rho_clip, variant, parallel_reward=parallel_reward)
        self.verify, self.answer_key = verify, answer_key
        self.rho, self.rho_clip, self.variant = rho, rho_clip, variant
        self.parallel_reward, self.format_error_reward = parallel_reward, format_error_reward
        self.no_parallel_is_error = treat_no_parallel_as_format_error
        self.join_suffix, self.conclusion = join_suffix, conclusion

    def format_ok(self, text: str, has_parallel: bool) -> bool:
        """The format check behind ``format_error_reward``."""
        if self.no_parallel_is_error and not has_parallel:
            return False
        return validate(text, strict=False, join_suffix=self.join_suffix,
                        conclusion=self.conclusion).ok  # fmt: skip

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float]:
        for key in (self.answer_key, "eta", "response_text"):
            if key not in kwargs:
                raise ValueError(
                    f"PGRPOReward needs the {key!r} field (dataset column or rollout extra field)"
                )
        texts = kwargs["response_text"]
        par = kwargs.get("has_parallel") or ["<Parallel>" in t for t in texts]
        out = []
        for text, gold, eta, p in zip(texts, kwargs[self.answer_key], kwargs["eta"], par):
            ok = True if self.format_error_reward is None else self.format_ok(text, bool(p))
            out.append(
                pgrpo_reward(
                    bool(self.verify(text, gold)), float(eta), self.rho, self.rho_clip,
                    self.variant, has_parallel=bool(p), parallel_reward=self.parallel_reward,
                    format_ok=ok, format_error_reward=self.format_error_reward,
                )
            )  # fmt: skip
        return out


class OrchestratedRollout:
    """TRL ``rollout_func``: one orchestrated trajectory per (already repeated) prompt (§3.2, Alg. 1).

    Args:
        tokenizer: the policy's tokenizer (tags registered as single tokens).
        cfg: orchestrator settings (budget, join suffix, temperature ...).
        engine_factory: ``trainer -> CompletionEngine``; default: HF ``generate`` on the policy.
            At paper scale wrap TRL's colocated vLLM (``trainer.vllm_generation.llm``) in
            :class:`~methods.threadweaver.orchestrator.VLLMEngine` so its weights are synced.
        encode_prompt: ``prompt -> ids``; default: chat template for message lists, plain
            tokenization (no special-token additions) for strings.
    """

    def __init__(
        self,
        tokenizer,
        cfg: OrchestratorConfig,
        engine_factory: Callable[[Any], CompletionEngine] | None = None,
        encode_prompt: Callable[[Any], list[int]] | None = None,
        cache_size: int = 4096,
    ):
        self.tok, self.cfg = tokenizer, cfg
        self.engine_factory, self.encode_prompt = engine_factory, encode_prompt
        self.cache: OrderedDict[tuple, list[Unit]] = OrderedDict()
        self.cache_size = cache_size
        self.last_rollouts: list = []

    def _encode(self, prompt) -> list[int]:
        if self.encode_prompt is not None:
            return list(self.encode_prompt(prompt))
        if isinstance(prompt, str):
            return list(self.tok(prompt, add_special_tokens=False)["input_ids"])
        ids = self.tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def key(self, prompt_ids: Sequence[int], completion_ids: Sequence[int]) -> tuple:
        """Cache key of a trajectory (trailing pad ids stripped, as in TRL's padded batch)."""
        comp = list(completion_ids)
        pad = self.tok.pad_token_id
        while comp and comp[-1] == pad:
            comp.pop()
        return (*prompt_ids, -1, *comp)

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        if self.engine_factory is not None:
            engine = self.engine_factory(trainer)
        else:
            model = trainer.accelerator.unwrap_model(trainer.model)
            engine = HFGenerateEngine(model, self.tok.pad_token_id)
        model = trainer.model
        was_training = model.training
        model.eval()
        try:
            rollouts = ParallelOrchestrator(engine, self.tok, self.cfg).run_many(
                [self._encode(p) for p in prompts]
            )
        finally:
            model.train(was_training)
        out: dict[str, list] = {k: [] for k in (
            "prompt_ids", "completion_ids", "env_mask", "eta", "token_latency", "response_text",
            "has_parallel")}  # fmt: skip
        eos = self.tok.eos_token_id
        for r in rollouts:
            comp, mask = list(r.response_ids), list(r.generated_mask)
            if not comp:  # TRL needs at least one token; an inserted EOS is never trained
                comp, mask = [eos], [0]
            self.cache[self.key(r.prompt_ids, comp)] = r.units
            out["prompt_ids"].append(list(r.prompt_ids))
            out["completion_ids"].append(comp)
            out["env_mask"].append(mask)
            out["eta"].append(float(r.stats.eta))
            out["token_latency"].append(float(r.stats.longest))
            out["has_parallel"].append(bool(r.stats.has_parallel))
            out["response_text"].append(self.tok.decode(r.response_ids, skip_special_tokens=False))
        while len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        self.last_rollouts = rollouts
        out["logprobs"] = None
        return out


class PGRPOTrainer(GroupAdvantageGRPOTrainer):
    """P-GRPO (§5, Alg. 1) on ``trl.GRPOTrainer`` via :class:`common.rl.GroupAdvantageGRPOTrainer`.

    Args:
        model, args, train_dataset, processing_class: as for ``trl.GRPOTrainer``; ``args`` must have
            ``beta=0`` (no KL, App. B) and ``num_iterations=1`` (one step per rollout batch, so the
            importance ratio is 1).
        reward_funcs: default ``[PGRPOReward(rho=rho, rho_clip=rho_clip, variant=reward_variant)]``.
        orchestrator: :class:`OrchestratorConfig` for the rollouts (``parallel=False`` gives the
            sequential-GRPO baseline with the same loss and advantages).
        engine_factory: see :class:`OrchestratedRollout`.
        adv_norm: ``"mean"`` (Eq. 9) or ``"std"`` (standard GRPO, ablation).
        mask_impl: ``"dense"`` or ``"flex"`` (FlexAttention at long context).
        rho, rho_clip, reward_variant: reward settings (Eq. 7, spec §9.2).

    Example::

        trainer = PGRPOTrainer(model=model, args=GRPOConfig(..., beta=0.0), processing_class=tok,
                               train_dataset=ds, orchestrator=OrchestratorConfig(budget_total=40000))
        trainer.train()
    """

    def __init__(
        self,
        *args,
        orchestrator: OrchestratorConfig | None = None,
        engine_factory: Callable[[Any], CompletionEngine] | None = None,
        encode_prompt: Callable[[Any], list[int]] | None = None,
        adv_norm: str = "mean",
        mask_impl: str = "dense",
        rho: float = 0.5,
        rho_clip: float = 0.2,
        reward_variant: str = "paper",
        **kwargs,
    ):
        if adv_norm not in ("mean", "std"):
            raise ValueError(f"adv_norm must be 'mean' or 'std', got {adv_norm!r}")
        if mask_impl not in ("dense", "flex"):
            raise ValueError(f"mask_impl must be 'dense' or 'flex', got {mask_impl!r}")
        targs = kwargs.get("args")
        if targs is not None:
            if getattr(targs, "beta", 0.0) != 0.0:
                raise ValueError(f"P-GRPO uses no KL term: args.beta must be 0, got {targs.beta}")
            if getattr(targs, "num_iterations", 1) != 1:
                raise ValueError(
                    "P-GRPO takes one step per rollout batch (importance ratio 1): "
                    f"args.num_iterations must be 1, got {targs.num_iterations}"
                )
        tok = kwargs.get("processing_class")
        if tok is None or getattr(tok, "pad_token_id", None) is None:
            raise ValueError("processing_class must be a tokenizer with a pad token")
        if kwargs.get("reward_funcs") is None:
            kwargs["reward_funcs"] = [
                PGRPOReward(rho=rho, rho_clip=rho_clip, variant=reward_variant)
            ]
        self.rollout = OrchestratedRollout(
            tok, orchestrator or OrchestratorConfig(), engine_factory, encode_prompt
        )
        kwargs["rollout_func"] = self.rollout
        self.adv_norm, self.mask_impl = adv_norm, mask_impl
        super().__init__(*args, **kwargs)

    def compute_advantages(self, rewards: Tensor, inputs: dict[str, Any]) -> Tensor:
        """Eq. 9: ``A_{p,i} = r_{p,i} − mean_j r_{p,j}`` (``adv_norm="std"``: divided by σ_p)."""
        r = torch.nan_to_num(rewards, nan=0.0)  # [B, N]
        adv = group_advantages(r, norm=self.adv_norm)  # [B, N]
        if inputs.get("mode") == "train":
            self.log_metric(
                "pgrpo/frac_zero_adv_groups", float((adv.abs().sum(1) == 0).float().mean())
            )
        return adv

    def _row_units(self, inputs: dict[str, Any]) -> list[list[Unit]]:
        pids, pmask = inputs["prompt_ids"], inputs["prompt_mask"]
        rows = []
        for i in range(pids.size(0)):
            prompt = pids[i][pmask[i].bool()].tolist()
            key = self.rollout.key(prompt, inputs["completion_ids"][i].tolist())
            units = self.rollout.cache.get(key)
            if units is None:
                raise ValueError(
                    "no orchestrator units recorded for a batch row; PGRPOTrainer's loss needs the "
                    "rollouts of OrchestratedRollout (was the cache evicted? raise cache_size)"
                )
            rows.append(units)
        return rows

    def policy_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> Tensor:
        """Eq. 4 on trie-packed units: ``−(1/T) Σ_rows A_row Σ_{completion nodes} log π``."""
        rows = self._row_units(inputs)
        packs = [build_packed(sorted(u, key=lambda x: -len(x.ids))) for u in rows]
        dev = inputs["completion_ids"].device
        dtype = next(model.parameters()).dtype
        batch = TrieCollator(self.processing_class.pad_token_id, mask_impl=self.mask_impl,
                             dtype=dtype)(packs)  # fmt: skip
        batch = {k: v.to(dev) if isinstance(v, Tensor) else v for k, v in batch.items()}
        logits = packed_forward(model, batch)  # [b, N, V]
        nll = parent_gather_loss(
            logits, batch["input_ids"], batch["parent"], batch["loss_mask"], reduction="none"
        )  # [b, N]
        adv = inputs["advantages"]
        adv = adv if adv.dim() == 1 else adv[:, 0]  # [b] (sequence-level, broadcast)
        n_tok = (batch["loss_mask"] & (batch["parent"] >= 0)).sum()
        if "num_items_in_batch" in inputs:  # DAPO-style: tokens of the whole generation batch
            norm = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            norm = norm * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        else:
            norm = n_tok.clamp(min=1)
        loss = (adv.to(nll.dtype) * nll.sum(dim=1)).sum() / norm
        mode = "train" if model.training else "eval"
        self.log_metric("pgrpo/trained_tokens", float(n_tok), mode)
        return loss
