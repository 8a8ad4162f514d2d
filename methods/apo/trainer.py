"""``APOTrainer``: GRPO with APO's rectified ratio on negative-advantage tokens (paper: ratio rectification).

What changes compared with GRPO (``common.rl.GroupAdvantageGRPOTrainer``, TRL 1.16):

1. A frozen reference π_ref is always kept, even when the KL coefficient ``beta`` is 0 (TRL drops it
   then). With PEFT the reference is the model with its adapter disabled, with no second copy.
2. The policy-loss hook runs one extra teacher-forced reference pass per batch and keeps its Top-K
   per completion position (:func:`methods.apo.reference_topk`), then calls
   :func:`methods.apo.apo_per_token_loss` on the policy's full-vocabulary log-probs and reduces
   the per-token loss with TRL's ``loss_type`` (:meth:`common.rl.GroupAdvantageGRPOTrainer.
   reduce_loss`: TRL's normalisation, eval branch and vLLM importance-sampling correction).
3. Optional baselines in the same trainer: ``apo_lambda=1, apo_beta=0`` is GRPO (with APO's
   clipping/aggregation), ``apo_kl_coef > 0`` (or TRL's ``beta``) adds TRL-style k3 KL on all
   tokens (GRPO+KL), and
   ``apo_kl_on_wrong > 0`` adds it only on negative-advantage tokens (KL-on-Wrong).

Advantages are TRL's group-normalised GRPO advantages (the default hook).
"""

from __future__ import annotations

import copy
import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from trl import GRPOConfig

from common.config import CheckpointingNames
from common.rl import GroupAdvantageGRPOTrainer
from methods.apo.loss import (
    ANCHOR_FORMS,
    ANCHOR_RATIO_TO,
    CLIP_MODES,
    apo_per_token_loss,
    kl_on_wrong_penalty,
    policy_entropy,
    policy_logps_at,
)
from methods.apo.topk import reference_topk

logger = logging.getLogger(__name__)

__all__ = ["APOConfig", "APOTrainer"]


@dataclass
class APOConfig(CheckpointingNames, GRPOConfig):
    """``GRPOConfig`` plus APO's loss settings (prefix ``apo_``; TRL's ``beta`` becomes ``apo_kl_coef``).

    Parameters:
        apo_k: safe-manifold size K, the reference Top-K (paper: 8).
        apo_lambda: push coefficient λ on negative tokens (paper: 1.05).
        apo_beta: pull coefficient β towards the anchor set (paper: 0.1).
        apo_clip_mode: ``rectified`` (clip λr − βr_anchor as a whole), ``token_only`` or ``none``.
        apo_anchor_form: ``paper_linear`` (the paper's linear ratio) or the diagnostics
            ``log``/``ref_xent``.
        apo_anchor_ratio_to: ``ref`` (anchor ratio to π_ref, as the restated formula writes it) or
            ``old`` (to the behaviour policy π_old, the PPO convention); the source is ambiguous.
        apo_dual_clip: dual-clip constant c for negative tokens (verl: 3.0); None disables.

    The token aggregation is TRL's ``loss_type`` (default ``dapo``, the global token mean closest to
    verl's ``token-mean``; ``grpo`` is the per-sequence mean, ``bnpo`` the micro-batch token mean).
        apo_kl_coef: coefficient of the GRPO+KL baseline penalty on all tokens (0: off). A
            non-zero TRL ``beta`` is moved here: APO's own reference serves the KL too, so TRL
            does not load a second reference (which it cannot for in-memory models).
        apo_kl_on_wrong: coefficient of the KL-on-Wrong baseline penalty (0: off).
        apo_topk_chunk_size: positions per chunk of the reference log-softmax/top-k.
    """

    apo_k: int = field(default=8, metadata={"help": "Safe-manifold size K (reference Top-K)."})
    apo_lambda: float = field(default=1.05, metadata={"help": "Push coefficient λ (negatives)."})
    apo_beta: float = field(default=0.1, metadata={"help": "Pull coefficient β (anchor set)."})
    apo_clip_mode: str = field(
        default="rectified",
        metadata={"help": "rectified | token_only | none (the paper does not say which)."},
    )
    apo_anchor_form: str = field(
        default="paper_linear", metadata={"help": "paper_linear (paper) | log | ref_xent."}
    )
    apo_anchor_ratio_to: str = field(
        default="ref",
        metadata={"help": "Anchor ratio against ref (π_ref) or old (π_old); source ambiguous."},
    )
    apo_dual_clip: float | None = field(default=3.0, metadata={"help": "Dual-clip c; None: off."})
    apo_kl_coef: float = field(
        default=0.0, metadata={"help": "GRPO+KL baseline coefficient (k3 on all tokens)."}
    )
    apo_kl_on_wrong: float = field(
        default=0.0, metadata={"help": "KL-on-Wrong baseline coefficient (k3 on A<0 tokens)."}
    )
    apo_topk_chunk_size: int = field(default=512, metadata={"help": "Top-K chunk (positions)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta != 0.0:
            logger.info(
                "APOConfig: moving beta=%s to apo_kl_coef (one shared reference)", self.beta
            )
            self.apo_kl_coef, self.beta = self.apo_kl_coef or self.beta, 0.0
        if self.apo_kl_coef < 0:
            raise ValueError(f"apo_kl_coef must be >= 0, got {self.apo_kl_coef}")
        if self.apo_k < 1:
            raise ValueError(f"apo_k must be >= 1, got {self.apo_k}")
        if self.apo_lambda < 0 or self.apo_beta < 0:
            raise ValueError(
                f"apo_lambda and apo_beta must be >= 0, got {self.apo_lambda}, {self.apo_beta}"
            )
        if self.apo_clip_mode not in CLIP_MODES:
            raise ValueError(
                f"apo_clip_mode must be one of {list(CLIP_MODES)}, got {self.apo_clip_mode!r}"
            )
        if self.apo_anchor_form not in ANCHOR_FORMS:
            raise ValueError(
                f"apo_anchor_form must be one of {list(ANCHOR_FORMS)}, got {self.apo_anchor_form!r}"
            )
        if self.apo_anchor_ratio_to not in ANCHOR_RATIO_TO:
            raise ValueError(
                f"apo_anchor_ratio_to must be one of {list(ANCHOR_RATIO_TO)}, got "
                f"{self.apo_anchor_ratio_to!r}"
            )
        if self.apo_anchor_ratio_to == "old" and self.apo_anchor_form == "ref_xent":
            raise ValueError("apo_anchor_form='ref_xent' needs apo_anchor_ratio_to='ref'")
        if self.apo_anchor_ratio_to == "old" and self.num_iterations > 1:
            raise ValueError(
                "apo_anchor_ratio_to='old' needs π_old at the reference Top-K ids, which TRL does "
                "not keep when num_iterations > 1; use num_iterations=1 (on-policy) or 'ref'"
            )
        if self.apo_kl_on_wrong < 0:
            raise ValueError(f"apo_kl_on_wrong must be >= 0, got {self.apo_kl_on_wrong}")
        if self.apo_beta > self.apo_lambda:
            logger.warning(
                "apo_beta=%s > apo_lambda=%s: the pull outweighs the push",
                self.apo_beta,
                self.apo_lambda,
            )
        if self.apo_clip_mode == "rectified" and self.apo_lambda - self.apo_beta < 1 - self.epsilon:
            logger.warning(
                "apo_lambda - apo_beta = %.3f < 1 - epsilon: with apo_clip_mode='rectified' every "
                "negative token is clipped on-policy and negatives give no gradient",
                self.apo_lambda - self.apo_beta,
            )


def _is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


class APOTrainer(GroupAdvantageGRPOTrainer):
    """GRPO trainer whose policy loss is APO's (see the module docstring for what changes).

    Args:
        model: policy (hub id, path or model instance); see ``trl.GRPOTrainer``.
        reward_funcs: reward function(s), as in ``trl.GRPOTrainer``.
        args: an :class:`APOConfig`.
        ref_model: optional frozen reference (default: a copy of the initial policy, or the
            disabled adapter under PEFT). It must share the
            policy's tokenizer and vocabulary.
        **kwargs: passed to ``trl.GRPOTrainer`` (train_dataset, processing_class, peft_config...).

    Logged metrics (``apo/`` prefix, per optimizer step): ``r_anchor_neg``, ``safe_manifold_mass``,
    ``frac_sampled_in_topk``, ``clip_low_frac``, ``clip_high_frac``, ``dual_clip_frac``,
    ``frac_neg_tokens``, ``z_underflow_tokens``, and ``kl_on_wrong`` when that baseline is on.
    """

    _tag_names = ["trl", "grpo", "apo"]
    # The per-token APO loss is a clipped ratio loss, reduced by reduce_loss: every TRL loss_type
    # whose per-token form is the clipped ratio (cispo/sapo/vespo change that form), and TRL's vLLM
    # correction. TRL's ``beta`` is moved to ``apo_kl_coef`` by APOConfig.
    POLICY_LOSS_SUPPORT = {
        "loss_type": ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"),
        "vllm_importance_sampling_correction": (True, False),
    }

    def __init__(
        self,
        model: Any,
        reward_funcs: Any,
        args: APOConfig | None = None,
        ref_model: torch.nn.Module | None = None,
        **kwargs: Any,
    ) -> None:
        if args is None:
            raise ValueError("args must be an APOConfig (APO's λ, β, K live there)")
        if not isinstance(args, APOConfig):
            raise TypeError(f"args must be an APOConfig, got {type(args).__name__}")
        own_ref = ref_model
        will_be_peft = _is_peft(model) if not isinstance(model, str) else False
        will_be_peft = will_be_peft or kwargs.get("peft_config") is not None
        if own_ref is None and not will_be_peft:
            # Copy the initial policy *before* TRL patches its forward (the patch closes over the
            # original module, so a later deepcopy would call the live policy).
            if isinstance(model, str):
                from transformers import AutoModelForCausalLM

                from common.models import weights_hint

                with weights_hint(model):
                    own_ref = AutoModelForCausalLM.from_pretrained(
                        model, **dict(args.model_init_kwargs or {})
                    )
            else:
                own_ref = copy.deepcopy(model)
        super().__init__(model=model, reward_funcs=reward_funcs, args=args, **kwargs)
        self._apo_ref: torch.nn.Module | None = None
        if own_ref is not None:
            own_ref.eval().requires_grad_(False)
            if self.is_deepspeed_enabled:
                from trl.models import prepare_deepspeed

                own_ref = prepare_deepspeed(own_ref, self.accelerator)
            elif self.is_fsdp_enabled:
                from trl.models import prepare_fsdp

                own_ref = prepare_fsdp(own_ref, self.accelerator)
            else:
                own_ref = self.accelerator.prepare_model(own_ref, evaluation_mode=True)
            self._apo_ref = own_ref
        elif not _is_peft(self.accelerator.unwrap_model(self.model)):
            raise ValueError(
                "APO needs a reference model: pass ref_model, use PEFT (the disabled adapter is the "
                "reference) or keep the default copy of the initial policy"
            )
        vocab = self.accelerator.unwrap_model(self.model).get_output_embeddings().weight.shape[0]
        if self._apo_ref is not None:
            ref_out = self.accelerator.unwrap_model(self._apo_ref).get_output_embeddings()
            if ref_out.weight.shape[0] != vocab:
                raise ValueError(
                    f"ref_model vocabulary ({ref_out.weight.shape[0]}) differs from the policy's "
                    f"({vocab}): Top-K ids would index the wrong tokens"
                )
        self._apo_vocab = vocab

    # ----- reference pass ------------------------------------------------------------------
    def _reference_context(self):
        if self._apo_ref is not None:
            return self._apo_ref, nullcontext()
        unwrapped = self.accelerator.unwrap_model(self.model)
        return self.model, unwrapped.disable_adapter()

    def apo_reference(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """π_ref Top-K ids/log-probs [b, T, K] (the paper's safe manifold, restated second-hand) and
        π_ref log-probs of the completion [b, T] (for the KL baselines)."""
        ref, ctx = self._reference_context()
        with torch.no_grad(), ctx:
            return reference_topk(
                ref,
                input_ids,
                attention_mask,
                completion_ids.size(1),
                k=self.args.apo_k,
                temperature=self.temperature,
                chunk_size=self.args.apo_topk_chunk_size,
                expected_vocab_size=self._apo_vocab,
                gather_ids=completion_ids,
            )

    # ----- the loss hook ---------------------------------------------------------------------
    def policy_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        """APO loss on one local batch, reduced as TRL's ``loss_type``; KL terms for the GRPO+KL /
        KL-on-Wrong baselines are added after the vLLM correction, as TRL adds its ``beta`` term."""
        args = self.args
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [b, P + T]
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = (
            completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        )
        t = completion_ids.size(1)
        topk_ids, topk_lp, ref_lp_sampled = self.apo_reference(
            input_ids, attention_mask, completion_ids
        )
        # Policy log-probs at the sampled token and the K reference tokens (the anchor term needs
        # π_θ there), gathered without a [b, T, V] log-softmax (TRL's selective_log_softmax).
        logits = model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=t + 1)
        logits = logits.logits[:, :-1]  # [b, T, V]
        logp_sampled, logp_topk = policy_logps_at(
            logits, completion_ids, topk_ids, temperature=self.temperature
        )  # [b, T], [b, T, K]
        old = inputs.get("old_per_token_logps")
        old = logp_sampled.detach() if old is None else old
        advantages = inputs["advantages"]
        per_token, stats = apo_per_token_loss(
            logp_topk,
            old,
            completion_ids,
            advantages,
            mask,
            topk_ids,
            topk_lp,
            lam=args.apo_lambda,
            beta=args.apo_beta,
            eps_low=self.epsilon_low,
            eps_high=self.epsilon_high,
            dual_clip=args.apo_dual_clip,
            clip_mode=args.apo_clip_mode,
            anchor_form=args.apo_anchor_form,
            anchor_ratio_to=args.apo_anchor_ratio_to,
            gathered=True,
            logp_sampled=logp_sampled,
        )
        maskf = mask.to(logp_sampled.dtype)
        kl = None
        if args.apo_kl_coef > 0:  # GRPO+KL baseline: k3 on every token, as TRL's beta term
            kl = kl_on_wrong_penalty(
                logp_sampled, ref_lp_sampled, -torch.ones_like(advantages), mask, args.apo_kl_coef
            )
            stats["kl"] = float((kl.detach() * maskf).sum() / maskf.sum().clamp_min(1.0))
        if args.apo_kl_on_wrong > 0:
            kl_wrong = kl_on_wrong_penalty(
                logp_sampled, ref_lp_sampled, advantages, mask, args.apo_kl_on_wrong
            )
            stats["kl_on_wrong"] = float(
                (kl_wrong.detach() * maskf).sum() / maskf.sum().clamp_min(1)
            )
            kl = kl_wrong if kl is None else kl + kl_wrong
        # the coefficients are inside kl, hence beta=1
        loss = self.reduce_loss(per_token, inputs, per_token_kl=kl, beta=1.0)
        mode = "train" if self.model.training else "eval"
        with torch.no_grad():
            ent = policy_entropy(logits, self.temperature)  # [b, T]
            stats["entropy"] = float((ent * maskf).sum() / maskf.sum().clamp_min(1.0))
        for key, value in stats.items():
            self.log_metric(f"apo/{key}", value, mode)
        return loss
