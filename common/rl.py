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

The equivalence test in ``tests/common/test_rl.py`` (a hook that reproduces TRL's own advantage
gives the same parameters as plain ``GRPOTrainer``) fails first if a TRL upgrade moves these names.

Shapes: B prompts in the global generation batch (all processes), N completions per prompt,
b prompts on this process, T completion tokens, F reward functions.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import trl
from torch import Tensor

logger = logging.getLogger(__name__)

TRL_TARGET_VERSION = "1.16.0"
"""The TRL release whose private methods this module overrides (see the module docstring)."""

__all__ = [
    "TRL_TARGET_VERSION",
    "GroupAdvantageGRPOTrainer",
    "cpu_grpo_kwargs",
    "trl_group_advantages",
]


def trl_group_advantages(rewards: Tensor, eps: float = 1e-4, scale: bool = True) -> Tensor:
    """TRL's default group-normalised advantage, as a pure function (GRPO, Shao et al. 2024).

    ``A_i = (r_i − mean r) / (std r + eps)`` per group, with the unbiased (Bessel) standard
    deviation and ``eps = 1e-4`` as in trl 1.16 ``scale_rewards="group"``; ``scale=False`` gives
    ``r_i − mean r`` (``scale_rewards="none"``). NaN rewards (unscorable completions) are left out of
    the statistics and get advantage 0, as in TRL.

    Args:
        rewards: ``[B, N]`` summed rewards, one row per prompt group.
        eps: Added to the standard deviation.
        scale: Divide by the group standard deviation.

    Returns:
        ``[B, N]`` advantages.
    """
    if rewards.dim() != 2:
        raise ValueError(f"rewards must have shape [B, N], got {tuple(rewards.shape)}")
    mean = torch.nanmean(rewards, dim=1, keepdim=True)  # [B, 1]
    adv = rewards - mean  # [B, N]
    if scale:
        count = (~torch.isnan(rewards)).sum(dim=1, keepdim=True)  # [B, 1]
        var = torch.nanmean((rewards - mean) ** 2, dim=1, keepdim=True) * count / (count - 1)
        adv = adv / (var.sqrt() + eps)  # [B, N]
    return torch.nan_to_num(adv, nan=0.0)


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
      The default reproduces TRL's advantage for ``scale_rewards`` in ``{"group", "none"}``.
    * :meth:`policy_loss` receives the local batch (TRL's input dict, with the hooked
      ``"advantages"``) and returns the scalar loss; the default is TRL's ``_compute_loss``.
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
        if self.scale_rewards not in ("group", "none"):
            raise ValueError(
                f"the default compute_advantages supports scale_rewards in 'group'/'none', got "
                f"{self.scale_rewards!r}; override compute_advantages for other schemes"
            )
        return trl_group_advantages(rewards, scale=self.scale_rewards == "group")

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
