"""The RL plug-in point: a TRL ``GRPOTrainer`` with an advantage hook and a policy-loss hook.

Every group-based RL method in this repository (MaxRL, APO, Geo-RL, ...) changes GRPO in one of two
places: how the rewards of one prompt's ``N`` completions become advantages, or how the per-token
policy loss is formed. :class:`GroupAdvantageGRPOTrainer` exposes exactly those two places as
overridable methods so that methods never touch TRL internals themselves.

This is the only module in the repository that relies on TRL private methods. It was written
against **trl 1.16.0** (:data:`TRL_TARGET_VERSION`, pinned in ``constraints.txt``) and uses:

* ``GRPOTrainer._calculate_rewards(inputs, prompts, completions, completion_ids_list)``, which
  returns the reward matrix ``[B·N, F]`` already gathered across processes;
* ``GRPOTrainer._generate_and_score_completions(inputs)``, whose output dict carries the local
  ``"advantages"`` (shape ``[b·N]`` or ``[b·N, T]``) consumed by ``_compute_loss``;
* ``GRPOTrainer._compute_loss(model, inputs)``, the policy loss.

The advantage and token-loss functions live in :mod:`common.advantages` and
:mod:`common.token_loss` and are re-exported here (``from common.rl import reduce_token_loss``).

The equivalence test in ``tests/common/test_rl.py`` (a hook that reproduces TRL's own advantage
gives the same parameters as plain ``GRPOTrainer``) fails first if a TRL upgrade moves these names.

Shapes: B prompts in the global generation batch (all processes), N completions per prompt,
b prompts on this process, T completion tokens, F reward functions.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import trl
from torch import Tensor

from common.advantages import group_advantages, trl_group_advantages
from common.token_loss import LOSS_TYPES, reduce_token_loss

logger = logging.getLogger(__name__)

TRL_TARGET_VERSION = "1.16.0"
"""The TRL release whose private methods this module overrides (see the module docstring)."""

__all__ = [
    "ADVANTAGE_OPTIONS",
    "ALL",
    "LOSS_OPTIONS",
    "LOSS_TYPES",
    "TRL_TARGET_VERSION",
    "GroupAdvantageGRPOTrainer",
    "cpu_grpo_kwargs",
    "group_advantages",
    "reduce_token_loss",
    "trl_group_advantages",
]

ALL = "all"
"""Marker for :attr:`GroupAdvantageGRPOTrainer.ADVANTAGE_SUPPORT` / ``POLICY_LOSS_SUPPORT``: the hook
honours every value of every TRL option of its kind (it delegates to TRL's own code)."""

ADVANTAGE_OPTIONS: tuple[str, ...] = ("scale_rewards", "multi_objective_aggregation")
"""The ``GRPOConfig`` fields of trl 1.16 that change how rewards become advantages (besides
``reward_weights`` and ``num_generations``, which the trainer applies before the hook and
``mask_truncated_completions``, which acts on the completion mask)."""

LOSS_OPTIONS: tuple[str, ...] = (
    "loss_type",
    "beta",
    "importance_sampling_level",
    "delta",
    "top_entropy_quantile",
    "entropy_coef",
    "use_adaptive_entropy",
    "off_policy_mask_threshold",
    "vllm_importance_sampling_correction",
    "router_aux_loss_coef",
)
"""The ``GRPOConfig`` fields of trl 1.16 that change ``GRPOTrainer._compute_loss``. A
``policy_loss`` override that does not declare one of them requires it at TRL's default (for
``vllm_importance_sampling_correction``: off, or no vLLM). ``epsilon``/``epsilon_high`` are read
through ``self.epsilon_low``/``self.epsilon_high`` by every clipped loss and are not checked; the
SAPO/VESPO constants only act with their ``loss_type``, which is checked."""


def _option_default(name: str) -> Any:
    fld = {f.name: f for f in dataclasses.fields(trl.GRPOConfig)}[name]
    if fld.default is not dataclasses.MISSING:
        return fld.default
    return fld.default_factory()  # type: ignore[misc]


def cpu_grpo_kwargs(**overrides: Any) -> dict[str, Any]:
    """Keyword arguments for a ``GRPOConfig`` that runs on CPU in tests and toys.

    Switches off the GPU-tuned defaults (bf16, pinned memory), checkpointing and reporting, and
    uses small sizes. Any key can be overridden: ``GRPOConfig(**cpu_grpo_kwargs(output_dir=d))``.

    Returns:
        A dict of ``GRPOConfig`` keyword arguments.
    """
    kwargs: dict[str, Any] = {
        "output_dir": "outputs/grpo_cpu",
        "bf16": False,
        "fp16": False,
        "activation_checkpointing": False,  # transformers 5's name: no deprecation warning
        "use_cpu": True,
        "report_to": "none",
        "save_strategy": "no",
        "dataloader_pin_memory": False,
        "dataloader_num_workers": 0,
        "logging_steps": 1,
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 8,
        "max_steps": 2,
        "learning_rate": 1e-2,
        "beta": 0.0,
        "weight_decay": 0.0,
        "seed": 0,
        "disable_tqdm": True,
    }
    kwargs.update(overrides)
    return kwargs


class GroupAdvantageGRPOTrainer(trl.GRPOTrainer):
    """``trl.GRPOTrainer`` with two overridable hooks; everything else is TRL's.

    * :meth:`compute_advantages` receives the **gathered** rewards of the whole generation batch,
      grouped per prompt (``[B, N]``, all processes), and returns ``[B, N]`` sequence-level or
      ``[B, N, T]`` token-level advantages. The trainer then slices this process's rows, so a
      prompt's completions are always normalised together even when they are spread over GPUs.
      The default reproduces TRL's advantage for every ``scale_rewards`` and
      ``multi_objective_aggregation`` value of trl 1.16.
    * :meth:`policy_loss` receives the local batch (TRL's input dict, with the hooked
      ``"advantages"``) and returns the scalar loss; the default is TRL's ``_compute_loss``. A
      custom loss builds a per-token loss and reduces it with :meth:`reduce_loss` (TRL's
      ``loss_type`` normalisation, eval branch and vLLM importance-sampling correction).
    * :meth:`completion_extras` (optional) carries per-completion values computed at generation
      time (a correctness flag, a region label) into :meth:`policy_loss`, aligned with the
      completions through TRL's shuffle and micro-batch split.

    After each generation the trainer keeps ``last_rewards`` (``[B, N]``) and ``last_advantages``
    (the hook's output) for logging and tests; TRL's completion table shows the hooked values.

    Example:
        >>> class MeanScaled(GroupAdvantageGRPOTrainer):
        ...     def compute_advantages(self, rewards, inputs):
        ...         mean = rewards.mean(dim=1, keepdim=True)
        ...         return (rewards - mean) / (mean + 1e-6)
    """

    last_rewards: Tensor | None = None
    last_advantages: Tensor | None = None

    ADVANTAGE_SUPPORT: ClassVar[Mapping[str, tuple[Any, ...]] | str] = ALL
    """Which :data:`ADVANTAGE_OPTIONS` values the class's ``compute_advantages`` honours: option
    -> allowed values (or :data:`ALL` for any value), or :data:`ALL` for every option. Read from the class that defines the hook (not inherited):
    a subclass that overrides ``compute_advantages`` without declaring it honours none, so each of
    these options must stay at TRL's default, else the trainer raises at construction."""

    POLICY_LOSS_SUPPORT: ClassVar[Mapping[str, tuple[Any, ...]] | str] = ALL
    """The same for :data:`LOSS_OPTIONS` and the class that defines ``policy_loss``; a loss that
    reduces with :meth:`reduce_loss` may declare ``"loss_type": LOSS_TYPES`` (if its per-token
    form does not depend on the type), ``"beta"`` and ``"vllm_importance_sampling_correction"``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args") if "args" in kwargs else (args[2] if len(args) > 2 else None)
        if config is not None:
            self.check_supported_options(config)
        super().__init__(*args, **kwargs)

    @classmethod
    def _declared_support(cls, hook: str, attr: str) -> tuple[type, Mapping[str, Any] | str]:
        owner = next(c for c in cls.__mro__ if hook in c.__dict__)
        return owner, owner.__dict__.get(attr, {})

    @classmethod
    def check_supported_options(cls, config: trl.GRPOConfig) -> None:
        """Raise if ``config`` sets a TRL advantage/loss option that this class's hooks ignore.

        Args:
            config: the ``GRPOConfig`` the trainer is built with.

        Raises:
            ValueError: naming the option, its value, the values the hook supports and the class
                that defines the hook.
        """
        checks = (
            ("compute_advantages", "ADVANTAGE_SUPPORT", ADVANTAGE_OPTIONS),
            ("policy_loss", "POLICY_LOSS_SUPPORT", LOSS_OPTIONS),
        )
        for hook, attr, options in checks:
            owner, support = cls._declared_support(hook, attr)
            if support == ALL:
                continue
            for name in options:
                value = getattr(config, name)
                if name == "vllm_importance_sampling_correction":
                    active = bool(config.use_vllm and value)
                    allowed = support.get(name, (False,))
                    if active and allowed != ALL and True not in allowed:
                        raise ValueError(
                            f"{owner.__name__}.{hook} does not implement TRL's "
                            "vllm_importance_sampling_correction (use_vllm=True): set "
                            "vllm_importance_sampling_correction=False or reduce the loss with "
                            "reduce_loss and declare it in POLICY_LOSS_SUPPORT"
                        )
                    continue
                if support.get(name) == ALL:
                    continue
                default = _option_default(name)
                if name == "scale_rewards":
                    default = {True: "group", False: "none"}.get(default, default)
                allowed = tuple(support.get(name, ())) + (default,)
                if value not in allowed:
                    raise ValueError(
                        f"{owner.__name__}.{hook} does not implement the GRPOConfig option "
                        f"{name}={value!r} (supported: {sorted(set(map(repr, allowed)))}); "
                        f"leave {name} at TRL's default {default!r}"
                    )

    # ----- hooks -----------------------------------------------------------------------------
    def compute_advantages(self, rewards: Tensor, inputs: dict[str, Any]) -> Tensor:
        """Turn grouped rewards into advantages (override this).

        Args:
            rewards: ``[B, N]`` rewards gathered over all processes and summed over reward functions
                with ``reward_weights``; NaN marks a completion no reward function could score.
            inputs: Context for the hook: ``"rewards_per_func"`` (``[B, N, F]``, gathered),
                ``"completion_ids"`` and ``"completion_mask"`` (``[b·N, T]``, local), ``"prompt_ids"``
                and ``"prompt_mask"`` (``[b·N, P]``, local), ``"process_slice"`` (the rows of the
                flattened ``[B·N]`` batch that belong to this process), ``"mode"`` ("train" or
                "eval") and ``"trainer_inputs"`` (the local dataset rows, one per completion).

        Returns:
            ``[B, N]`` or ``[B, N, T]`` advantages (``T`` at least the local completion length).
        """
        return trl_group_advantages(
            rewards,
            scale=self.scale_rewards,
            rewards_per_func=inputs["rewards_per_func"],
            reward_weights=self.reward_weights,
            aggregation=self.multi_objective_aggregation,
        )

    def policy_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> Tensor:
        """Scalar policy loss on one local batch (override to change the loss).

        Args:
            model: The policy being trained.
            inputs: TRL's batch dict: ``prompt_ids``, ``prompt_mask``, ``completion_ids``,
                ``completion_mask`` (``[b', T]``), ``advantages`` (``[b']`` or ``[b', T]``) and
                optionally ``old_per_token_logps`` / ``ref_per_token_logps``.

        Returns:
            The loss to back-propagate.
        """
        return super()._compute_loss(model, inputs)

    def reduce_loss(
        self,
        per_token_loss: Tensor,
        inputs: dict[str, Any],
        per_token_kl: Tensor | None = None,
        loss_type: str | None = None,
        beta: float | None = None,
    ) -> Tensor:
        """:func:`reduce_token_loss` with this trainer's settings, for a :meth:`policy_loss`.

        Takes the mask (completion mask times TRL's ``tool_mask``), ``loss_type``,
        ``max_completion_length``, ``num_items_in_batch``, the accumulation steps, the mode (from
        the model's training flag), ``beta`` and, when ``use_vllm`` and
        ``vllm_importance_sampling_correction`` are on, the batch's ``importance_sampling_ratio``.

        Args:
            per_token_loss: ``[b', T]`` (or ``[b', 1]``) per-token loss without the KL term.
            inputs: the batch passed to :meth:`policy_loss`.
            per_token_kl: ``[b', T]`` KL term, added with coefficient ``beta``.
            loss_type: overrides ``args.loss_type`` (e.g. ``"grpo"`` for a per-sequence mean).
            beta: overrides TRL's ``beta`` (e.g. 1.0 when ``per_token_kl`` carries its coefficient).

        Returns:
            The loss to back-propagate.
        """
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        ratio = None
        if self.use_vllm and self.vllm_importance_sampling_correction:
            ratio = inputs["importance_sampling_ratio"]
        mode = "train" if self.model.training else "eval"
        return reduce_token_loss(
            per_token_loss,
            mask,
            self.loss_type if loss_type is None else loss_type,
            mode=mode,
            max_completion_length=self.max_completion_length,
            num_items_in_batch=inputs.get("num_items_in_batch"),
            gradient_accumulation_steps=(
                self.current_gradient_accumulation_steps if mode == "train" else 1
            ),
            steps_per_generation=self.args.steps_per_generation,
            num_processes=self.accelerator.num_processes,
            importance_sampling_ratio=ratio,
            per_token_kl=per_token_kl,
            beta=self.beta if beta is None else beta,
        )

    def completion_extras(self, rewards: Tensor, inputs: dict[str, Any]) -> dict[str, Tensor]:
        """Per-completion values to carry from generation into :meth:`policy_loss` (override this).

        Called right after :meth:`compute_advantages` with the same arguments. Each returned tensor
        has one row per **local** completion (``[b·N, ...]``, the rows of
        ``inputs["completion_ids"]``; slice gathered quantities with ``inputs["process_slice"]``).
        The trainer stores it in the batch under its name, so TRL shuffles and splits it into
        micro-batches together with the completions and ``policy_loss`` finds ``inputs[name]``
        aligned with ``inputs["completion_ids"]``. Names may not shadow TRL's own batch keys.

        Args:
            rewards: ``[B, N]`` gathered rewards, as for :meth:`compute_advantages`.
            inputs: The same context dict as for :meth:`compute_advantages`.

        Returns:
            A dict name -> ``[b·N, ...]`` tensor; the default carries nothing.
        """
        return {}

    def log_metric(self, name: str, value: float, mode: str | None = None) -> None:
        """Records a scalar in TRL's per-step log (averaged and logged with TRL's own metrics).

        Methods log their namespaced keys (``"maxrl/frac_all_fail"``) through this instead of
        writing to TRL's private metric store.

        Args:
            name: the metric key.
            value: a float (or 0-d tensor).
            mode: ``"train"`` or ``"eval"``; None infers it from the model's training flag.
        """
        if mode is None:
            mode = "train" if self.model.training else "eval"
        if mode not in ("train", "eval"):
            raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
        self._metrics[mode][name].append(float(value))

    def per_token_logps(
        self, model: torch.nn.Module, inputs: dict[str, Any], with_entropy: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Per-token log-probabilities ``[b', T]`` of the batch's completions under ``model``.

        A helper for :meth:`policy_loss` and hook overrides, so they need not call TRL private
        methods. ``inputs`` needs ``prompt_ids``, ``prompt_mask``, ``completion_ids`` and
        ``completion_mask`` (the batch, or the :meth:`compute_advantages` context).

        Args:
            model: The model to score with (gradients flow unless called under ``no_grad``).
            inputs: The batch.
            with_entropy: Also return the per-token entropy of the full next-token
                distribution, ``[b', T]`` (at the sampling temperature, as TRL computes it).

        Returns:
            ``logps`` or ``(logps, entropies)``.
        """
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [b', P + T]
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logps, entropies = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=with_entropy
        )[:2]
        return (logps, entropies) if with_entropy else logps  # [b', T]

    # ----- wiring into TRL 1.16 private methods -------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        self._gathered_rewards_per_func = rewards_per_func  # [B·N, F], all processes
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        n = self.num_generations if mode == "train" else self.num_generations_eval
        per_func = self._gathered_rewards_per_func  # [B·N, F]
        weights = self.reward_weights.to(per_func.device)  # [F]
        rewards = (per_func * weights).nansum(dim=1)  # [B·N]
        rewards[torch.isnan(per_func).all(dim=1)] = torch.nan  # unscorable, as in TRL
        if rewards.numel() % n != 0:
            raise ValueError(f"gathered rewards ({rewards.numel()}) not divisible by N={n}")
        grouped = rewards.view(-1, n)  # [B, N]
        local = output["completion_ids"].size(0)  # b·N
        process_slice = slice(
            self.accelerator.process_index * local, (self.accelerator.process_index + 1) * local
        )
        context = {
            "rewards_per_func": per_func.view(-1, n, per_func.size(1)),  # [B, N, F]
            "completion_ids": output["completion_ids"],
            "completion_mask": output["completion_mask"],
            "prompt_ids": output["prompt_ids"],
            "prompt_mask": output["prompt_mask"],
            "process_slice": process_slice,
            "mode": mode,
            "trainer_inputs": inputs,
        }
        adv = self.compute_advantages(grouped, context)
        if adv.shape[:2] != grouped.shape or adv.dim() not in (2, 3):
            raise ValueError(
                f"compute_advantages must return [B, N] or [B, N, T] with [B, N]="
                f"{tuple(grouped.shape)}, got {tuple(adv.shape)}"
            )
        adv = torch.nan_to_num(adv.to(rewards.dtype), nan=0.0)
        self.last_rewards, self.last_advantages = grouped.detach(), adv.detach()
        flat = adv.reshape(grouped.numel(), *adv.shape[2:])  # [B·N] or [B·N, T]
        local_adv = flat[process_slice]
        if local_adv.dim() == 2:
            t = output["completion_ids"].size(1)
            if local_adv.size(1) < t:
                raise ValueError(
                    f"token advantages have T={local_adv.size(1)} < completion length {t}"
                )
            local_adv = local_adv[:, :t]  # [b·N, T]
        output["advantages"] = local_adv.to(output["completion_mask"].device)
        for name, value in self.completion_extras(grouped, context).items():
            if name in output:
                raise ValueError(f"completion_extras: name {name!r} shadows a key of TRL's batch")
            if not isinstance(value, Tensor) or value.dim() == 0 or value.size(0) != local:
                raise ValueError(
                    f"completion_extras[{name!r}] must be a tensor with one row per local "
                    f"completion ({local}), got {getattr(value, 'shape', type(value))}"
                )
            output[name] = value.to(output["completion_mask"].device)
        # TRL logged its own advantages for this batch; show the hooked ones instead.
        logged = self._logs["advantages"]
        for _ in range(min(grouped.numel(), len(logged))):
            logged.pop()
        seq_adv = flat if flat.dim() == 1 else flat.mean(dim=1)
        logged.extend(seq_adv.tolist())
        return output

    def _compute_loss(self, model, inputs):
        return self.policy_loss(model, inputs)
