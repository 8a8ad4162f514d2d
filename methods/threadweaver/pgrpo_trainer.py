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
from dataclasses import dataclass
from typing import Any

import torch
import trl
from torch import Tensor

from common.config import CheckpointingNames
from common.rl import GroupAdvantageGRPOTrainer

from .config import check_mask_impl, knob
from .engines import CompletionEngine, HFGenerateEngine
from .format import JOIN_SUFFIX, validate
from .orchestrator import OrchestratorConfig, ParallelOrchestrator
from .pgrpo import group_advantages, is_correct, pgrpo_reward
from .trie import TrieCollator, Unit, build_packed, packed_forward, parent_gather_loss

logger = logging.getLogger(__name__)

__all__ = ["OrchestratedRollout", "PGRPOConfig", "PGRPOReward", "PGRPOTrainer"]

_ADV_NORMS = ("mean", "std")


@dataclass
class PGRPOConfig(CheckpointingNames, trl.GRPOConfig):
    """``GRPOConfig`` plus every P-GRPO knob (§5, Alg. 1, App. B), so each is saved with the run.

    Defaults follow the paper: no KL (``beta=0``), one optimisation step per rollout batch
    (``num_iterations=1``, importance ratio 1), token-sum normalisation over the generation batch
    (``loss_type="dapo"``), no std scaling by TRL (the group advantage is P-GRPO's own, Eq. 9).
    Sampling uses TRL's ``temperature`` / ``top_p`` (App. B: 1.0 / 1.0).
    """

    adv_norm: str = knob(
        "mean",
        "Eq. 9 'mean' (r - mean_group r); 'std' divides by the group's sample "
        "std (standard GRPO, the Tab. 5 ablation; official norm_adv_by_std_in_grpo).",
    )
    zero_adv_threshold: float | None = knob(
        None,
        "Official grpo_zero_adv_if_all_ge_le: zero the advantages of a group "
        "whose rewards are all >= or all <= this value (None: off, as the paper).",
    )
    rho: float = knob(0.5, "Acceleration reward slope ρ (Eq. 7).")
    rho_clip: float = knob(0.2, "Acceleration reward cap ρ_clip (Eq. 7).")
    reward_variant: str = knob(
        "paper",
        "'paper': 1{c}(1 + min(ρη, ρ_clip)); 'repo': official defaults, "
        "1 + ρ min(η, ρ_clip) if correct else -1.",
    )
    parallel_reward: float = knob(
        0.0,
        "Official parallel_rewardv2: bonus for a correct trajectory with at "
        "least one <Parallel> block (0: off, as the paper).",
    )
    format_error_reward: float | None = knob(
        None,
        "Official format_error_reward: the reward of a trajectory that fails "
        "the format check (None: off, as the paper).",
    )
    treat_no_parallel_as_format_error: bool = knob(
        False,
        "Official option: a trajectory without <Parallel> fails the format "
        "check (only with format_error_reward).",
    )
    parallel_rollouts: bool = knob(
        True,
        "False: the sequential-GRPO baseline (no orchestrator; same reward, advantage and loss).",
    )
    rollout_budget_tokens: int = knob(40000, "Total generated tokens over all branches (App. B).")
    rollout_max_model_len: int = knob(40960, "Context limit of one request (App. B).")
    rollout_max_iters: int = knob(32, "Orchestrator loop guard (official controller: 32).")
    join_suffix: str = knob(
        "\n</Parallel>",
        "Text appended after a block's threads: paper '\\n</Parallel>'; "
        "official no_conclusion mode '\\n'.",
    )
    conclusion: bool = knob(
        False,
        "Official <Conclusion> mode (no_conclusion=false): join with "
        "'\\n<Conclusion>\\n' and let the model close the block.",
    )
    mask_impl: str = knob(
        "dense",
        "Trie mask of the loss forward: 'dense' additive [B,1,N,N] (SDPA/eager) "
        "or 'flex' FlexAttention BlockMask (App. B; CUDA only for training).",
    )
    beta: float = knob(0.0, "KL coefficient; 0 in P-GRPO (App. B).")
    loss_type: str = knob("dapo", "Token-sum over the generation batch (Eq. 4).")
    scale_rewards: str = knob("none", "TRL's scaling is off: P-GRPO's advantage is Eq. 9.")
    vllm_importance_sampling_correction: bool = knob(
        False,
        "Not supported: TRL's ratio is computed on the joined causal view, "
        "not on the trie view the orchestrator sampled (see the method doc).",
    )

    def __post_init__(self):
        if self.adv_norm not in _ADV_NORMS:
            raise ValueError(f"adv_norm must be one of {_ADV_NORMS}, got {self.adv_norm!r}")
        check_mask_impl(self.mask_impl)
        if self.reward_variant not in ("paper", "repo"):
            raise ValueError(
                f"reward_variant must be 'paper' or 'repo', got {self.reward_variant!r}"
            )
        pgrpo_reward(True, 0.0, self.rho, self.rho_clip, self.reward_variant,
                     parallel_reward=self.parallel_reward)  # fmt: skip
        for name in ("rollout_budget_tokens", "rollout_max_model_len", "rollout_max_iters"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.beta != 0.0:
            raise ValueError(f"P-GRPO uses no KL term (App. B): beta must be 0, got {self.beta}")
        if self.num_iterations != 1:
            raise ValueError(
                "P-GRPO takes one step per rollout batch (importance ratio 1): "
                f"num_iterations must be 1, got {self.num_iterations}"
            )
        if self.num_generations is not None and self.num_generations < 2:
            raise ValueError(
                f"num_generations must be >= 2 (group advantages), got {self.num_generations}"
            )
        super().__post_init__()

    def orchestrator(self) -> OrchestratorConfig:
        """The rollout settings as an :class:`OrchestratorConfig`.

        Source: engineering, not in the paper.
        """
        return OrchestratorConfig(
            budget_total=self.rollout_budget_tokens,
            max_model_len=self.rollout_max_model_len,
            max_iters=self.rollout_max_iters,
            join_suffix=self.join_suffix,
            temperature=self.temperature,
            top_p=self.top_p,
            parallel=self.parallel_rollouts,
            conclusion=self.conclusion,
        )


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
        """The format check behind ``format_error_reward``.

        Source: official reward code under ``threadweaver_rl/deepscaler/rewards/``
        (``format_error_reward``); not part of the paper's Eq. 5-8 reward.
        """
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
            :class:`~methods.threadweaver.engines.VLLMEngine` so its weights are synced.
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
        """Cache key of a trajectory (trailing pad ids stripped, as in TRL's padded batch).

        Source: engineering, not in the paper.
        """
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

    Every algorithm knob is a field of :class:`PGRPOConfig` (the ``args``); the constructor only
    takes what cannot be saved with the run.

    Args:
        model, args, train_dataset, processing_class: as for ``trl.GRPOTrainer``; ``args`` must be a
            :class:`PGRPOConfig`.
        reward_funcs: default ``[PGRPOReward(...)]`` built from ``args``.
        engine_factory: see :class:`OrchestratedRollout`.
        encode_prompt: see :class:`OrchestratedRollout`.

    Example::

        args = PGRPOConfig(output_dir="out", num_generations=8, rollout_budget_tokens=40000)
        trainer = PGRPOTrainer(model=model, args=args, processing_class=tok, train_dataset=ds)
        trainer.train()
    """

    ADVANTAGE_SUPPORT = {"scale_rewards": ("none",)}
    POLICY_LOSS_SUPPORT = {"loss_type": ("dapo", "bnpo", "grpo", "dr_grpo", "luspo")}

    def __init__(
        self,
        *args,
        engine_factory: Callable[[Any], CompletionEngine] | None = None,
        encode_prompt: Callable[[Any], list[int]] | None = None,
        **kwargs,
    ):
        targs = kwargs.get("args")
        if not isinstance(targs, PGRPOConfig):
            raise TypeError(
                f"args must be a PGRPOConfig (its fields are the P-GRPO knobs), got "
                f"{type(targs).__name__}"
            )
        tok = kwargs.get("processing_class")
        if tok is None or getattr(tok, "pad_token_id", None) is None:
            raise ValueError("processing_class must be a tokenizer with a pad token")
        if kwargs.get("reward_funcs") is None:
            kwargs["reward_funcs"] = [
                PGRPOReward(
                    rho=targs.rho, rho_clip=targs.rho_clip, variant=targs.reward_variant,
                    parallel_reward=targs.parallel_reward,
                    format_error_reward=targs.format_error_reward,
                    treat_no_parallel_as_format_error=targs.treat_no_parallel_as_format_error,
                    join_suffix=targs.join_suffix, conclusion=targs.conclusion,
                )
            ]  # fmt: skip
        self.rollout = OrchestratedRollout(tok, targs.orchestrator(), engine_factory, encode_prompt)
        kwargs["rollout_func"] = self.rollout
        self.adv_norm, self.mask_impl = targs.adv_norm, targs.mask_impl
        self.zero_adv_threshold = targs.zero_adv_threshold
        super().__init__(*args, **kwargs)

    def compute_advantages(self, rewards: Tensor, inputs: dict[str, Any]) -> Tensor:
        """Eq. 9: ``A_{p,i} = r_{p,i} − mean_j r_{p,j}`` (``adv_norm="std"``: divided by σ_p)."""
        r = torch.nan_to_num(rewards, nan=0.0)  # [B, N]
        adv = group_advantages(r, norm=self.adv_norm, zero_threshold=self.zero_adv_threshold)
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
        """Eq. 4 on trie-packed units: per node ``−A_row log π(v | ancestors(v))``, reduced by
        :meth:`reduce_loss` (TRL's ``loss_type`` normalisation; train and eval alike)."""
        rows = self._row_units(inputs)
        packs = [build_packed(sorted(u, key=lambda x: -len(x.ids))) for u in rows]
        dev = inputs["completion_ids"].device
        batch = TrieCollator(self.processing_class.pad_token_id, mask_impl=self.mask_impl)(packs)
        batch = {k: v.to(dev) if isinstance(v, Tensor) else v for k, v in batch.items()}
        logits = packed_forward(model, batch)  # [b, N, V]; mask built on dev in the model's dtype
        nll = parent_gather_loss(
            logits, batch["input_ids"], batch["parent"], batch["loss_mask"], reduction="none"
        )  # [b, N]
        adv = inputs["advantages"]
        adv = adv if adv.dim() == 1 else adv[:, 0]  # [b] (sequence-level, broadcast)
        trained = batch["loss_mask"] & (batch["parent"] >= 0)  # [b, N]
        per_node = adv.to(nll.dtype).unsqueeze(1) * nll  # [b, N] = −A log π on trained nodes
        node_inputs = {k: v for k, v in inputs.items() if k != "tool_mask"}  # [b, T]: joined view
        node_inputs["completion_mask"] = trained.to(nll.dtype)  # trie nodes, the loss's tokens
        loss = self.reduce_loss(per_node, node_inputs)
        mode = "train" if model.training else "eval"
        self.log_metric("pgrpo/trained_tokens", float(trained.sum()), mode)
        return loss
