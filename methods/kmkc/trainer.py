"""The CDKC trainer: GRPO + the signed calibration term (Eqs. E5-E8 of our restatement) on
common.rl's hooks.

Kept apart from :mod:`methods.kmkc.cdkc` so that importing the package does not import TRL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from trl import GRPOConfig

from common.config import CheckpointingNames
from common.rl import ALL, LOSS_TYPES, GroupAdvantageGRPOTrainer, reduce_token_loss

from .cdkc import CalibrationWeights, cdkc_rollout_weights
from .regions import REGIONS

CALIBRATION_MODES = ("loss", "reward")
SIGNALS = ("nll", "entropy")


@dataclass
class CDKCConfig(CheckpointingNames, GRPOConfig):
    """``trl.GRPOConfig`` plus the calibration knobs of CDKC (all inferred: the paper's objective
    is not public).

    Attributes:
        calibration_mode: ``"loss"`` adds the signed region-weighted term (E7) to the GRPO loss
            (E8); ``"reward"`` shapes the reward ``r_i + α_g·s_i·c(y_i|q)`` instead.
        signal: the uncertainty H in (E7) and in the reward mode's confidence exp(−U):
            ``"entropy"`` (default: entropy of the next-token distribution, E3, as the paper's
            method figure says "confidence estimated via entropy over the token distribution") or
            ``"nll"`` (NLL of the sampled token, E1, the paper's Eq. 24 for profiling).
        calibration_loss_type: the TRL ``loss_type`` rule that reduces the per-token calibration
            term λ_i s_i H_{i,t} (:func:`common.rl.reduce_token_loss`); ``"grpo"`` (default) is
            (1/b) Σ_i λ_i s_i H̄_i of (E7).
        region_weights: λ[g] = [λ_correct, λ_wrong] per region; None keeps our defaults.
        reward_alpha: α_g per region for the reward mode; None keeps our defaults.
        region_adaptive: False uses ``shared_weights`` / ``shared_alpha`` for every region (ablation).
        shared_weights: λ pair used when ``region_adaptive`` is False.
        shared_alpha: α used when ``region_adaptive`` is False.
        stabilize_batches: number of policy-loss batches whose H̄ values fix the confused band
            ``[h_lo, h_hi]`` (our default: the first 10); the confused region contributes nothing before.
        stabilize_quantiles: the band's quantiles (our default: 25th-75th percentile).
        correct_reward_index: which reward function is the 0/1 correctness reward (E5).
    """

    calibration_mode: str = field(
        default="loss", metadata={"help": "loss (add the E7 term) | reward (shape the reward)."}
    )
    signal: str = field(
        default="entropy",
        metadata={"help": "entropy (paper's method figure) | nll (Eq. 24) for H in E7 / U."},
    )
    calibration_loss_type: str = field(
        default="grpo",
        metadata={"help": "TRL loss_type rule reducing the per-token E7 term (grpo: (1/b)ΣH̄)."},
    )
    region_weights: dict | None = None
    reward_alpha: dict | None = None
    region_adaptive: bool = True
    shared_weights: list[float] = field(default_factory=lambda: [3e-3, 3e-3])
    shared_alpha: float = 0.5
    stabilize_batches: int = 10
    stabilize_quantiles: list[float] = field(default_factory=lambda: [0.25, 0.75])
    correct_reward_index: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.calibration_mode not in CALIBRATION_MODES:
            raise ValueError(
                f"calibration_mode must be one of {CALIBRATION_MODES}, got {self.calibration_mode!r}"
            )
        if self.signal not in SIGNALS:
            raise ValueError(f"signal must be one of {SIGNALS}, got {self.signal!r}")
        if self.calibration_loss_type not in LOSS_TYPES:
            raise ValueError(
                f"calibration_loss_type must be one of {list(LOSS_TYPES)}, got "
                f"{self.calibration_loss_type!r}"
            )
        for name, table in (
            ("region_weights", self.region_weights),
            ("reward_alpha", self.reward_alpha),
        ):
            bad = sorted(set(table or {}) - set(REGIONS))
            if bad:
                raise ValueError(f"{name}: unknown regions {bad}; valid: {list(REGIONS)}")
        lo, hi = self.stabilize_quantiles
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"stabilize_quantiles must satisfy 0 <= lo <= hi <= 1, got {lo, hi}")
        if self.stabilize_batches < 1:
            raise ValueError(f"stabilize_batches must be >= 1, got {self.stabilize_batches}")

    def calibration_weights(self, band: tuple[float, float] | None = None) -> CalibrationWeights:
        """The λ table of (E7) with the current confused band.

        Source: our inference (region weights not public).
        """
        table = {r: tuple(v) for r, v in (self.region_weights or {}).items()}
        return CalibrationWeights(
            band=band,
            region_adaptive=self.region_adaptive,
            shared=tuple(self.shared_weights),
            **table,
        )

    def alpha(self, region: str) -> float:
        """α_g of the reward mode (our inference: mastered 0.5, confused 0.25, missing 0.5)."""
        if not self.region_adaptive:
            return float(self.shared_alpha)
        table = {"mastered": 0.5, "confused": 0.25, "missing": 0.5, **(self.reward_alpha or {})}
        return float(table[region])


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the unmasked positions of each row: ``[b, T] -> [b]`` (empty rows give 0).

    Source: our inference (per-rollout mean of the token signal).

    H̄_i of (E7), the per-rollout mean of the token signal (our restatement, doc deviations).
    """
    mask = mask.to(values.dtype)
    return (values * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)


class CDKCTrainer(GroupAdvantageGRPOTrainer):
    """GRPO with the bidirectional, region-adaptive calibration of CDKC.

    The dataset needs a ``region`` column (mastered / confused / missing, from CGKE profiling)
    unless ``args.region_adaptive`` is False; the first reward function must be the 0/1
    correctness reward (E5; ``args.correct_reward_index`` selects another).

    * ``calibration_mode="loss"``: loss = TRL's GRPO loss (E6, E8) + the per-token term
      λ[g_i, s_i]·s_i·H_{i,t} reduced by :func:`common.rl.reduce_token_loss` with
      ``calibration_loss_type`` (``grpo``: (1/b)Σ λ s H̄_i, E7) and TRL's gradient-accumulation /
      eval handling; H is the token entropy (default) or NLL under the current policy, s_i = +1
      for a correct and −1 for a wrong rollout. The vLLM importance-sampling ratio is not applied
      to this term (it is not a policy-gradient term; TRL does not apply it to its entropy bonus
      either). With every λ = 0 the loss is TRL's, bit for bit.
    * ``calibration_mode="reward"``: the GRPO advantage of ``1[correct] + α_g·s_i·exp(−U_i)``,
      U the mean token entropy or NLL (``signal``).

    Correctness and region travel from generation to the loss through
    :meth:`common.rl.GroupAdvantageGRPOTrainer.completion_extras`.
    """

    # policy_loss adds a term to TRL's own loss (every TRL loss option is TRL's); compute_advantages
    # delegates to the default hook (every scale_rewards); normalize_then_sum only in loss mode.
    POLICY_LOSS_SUPPORT = ALL
    ADVANTAGE_SUPPORT = {"scale_rewards": ALL, "multi_objective_aggregation": ALL}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args") if "args" in kwargs else (args[2] if len(args) > 2 else None)
        if (
            isinstance(config, CDKCConfig)
            and config.calibration_mode == "reward"
            and config.multi_objective_aggregation != "sum_then_normalize"
        ):
            raise ValueError(
                "CDKCTrainer: calibration_mode='reward' shapes the summed reward and does not "
                "implement multi_objective_aggregation="
                f"{config.multi_objective_aggregation!r}; use 'sum_then_normalize'"
            )
        super().__init__(*args, **kwargs)
        if not isinstance(self.args, CDKCConfig):
            raise TypeError(f"args must be a CDKCConfig, got {type(self.args).__name__}")
        n_funcs = len(self.reward_funcs)
        if not 0 <= self.args.correct_reward_index < n_funcs:
            raise ValueError(
                f"correct_reward_index={self.args.correct_reward_index} but there are "
                f"{n_funcs} reward functions"
            )
        self.band: tuple[float, float] | None = None
        self._band_values: list[float] = []
        self._band_calls = 0
        self._cdkc_capture: list | None = None

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any):
        # Records the policy forward of TRL's loss, so that the calibration term reuses its
        # log-probs/entropies instead of a second forward (issue 33: step time vs GRPO).
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if self._cdkc_capture is not None:
            self._cdkc_capture.append(out)
        return out

    # ----- generation-time hooks -----------------------------------------------------------
    def _local_correct(self, inputs: dict[str, Any]) -> torch.Tensor:
        per_func = inputs["rewards_per_func"][..., self.args.correct_reward_index]  # [B, N]
        return (per_func.flatten()[inputs["process_slice"]] > 0.5).cpu()  # [b·N] bool

    def _local_regions(self, inputs: dict[str, Any]) -> list[str]:
        rows = inputs["trainer_inputs"]
        if not self.args.region_adaptive:
            return [str(r.get("region", "missing")) for r in rows]
        missing = [i for i, r in enumerate(rows) if "region" not in r]
        if missing:
            raise ValueError(
                "CDKC needs a 'region' column in the training dataset (mastered/confused/missing "
                "from CGKE profiling), or region_adaptive=False"
            )
        regions = [str(r["region"]) for r in rows]
        bad = sorted(set(regions) - set(REGIONS))
        if bad:
            raise ValueError(f"region column: unknown labels {bad}; valid: {list(REGIONS)}")
        return regions

    def compute_advantages(self, rewards: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
        """Loss mode: TRL's group advantage (E6). Reward mode: the advantage of the shaped reward.

        Source: TRL's GRPO advantage (the paper's CDKC optimiser is GRPO); the reward mode is
        our inference.
        """
        if self.args.calibration_mode == "loss":
            return super().compute_advantages(rewards, inputs)
        regions = self._local_regions(inputs)
        correct = self._local_correct(inputs)
        with torch.no_grad():
            # c = exp(-U) (E2), U the mean token entropy (E3) or NLL (E1); a fully masked
            # (truncated) rollout gets U = 0.
            conf = torch.exp(
                -masked_mean(self._token_signal(self.model, inputs), inputs["completion_mask"])
            )
        sign = torch.where(correct, 1.0, -1.0).to(conf.device)
        alpha = torch.tensor([self.args.alpha(r) for r in regions], device=conf.device)
        bonus = self.accelerator.gather(alpha * sign * conf)  # [B·N], all processes
        shaped = rewards + bonus.view_as(rewards).to(rewards.dtype)
        self.log_metric("cdkc/reward_bonus", float(bonus.mean()))
        return super().compute_advantages(shaped, inputs)

    def completion_extras(self, rewards: torch.Tensor, inputs: dict[str, Any]) -> dict:
        """Per-completion extras (region, correctness) for the calibration term; engineering, not in
        the paper.
        """
        regions = self._local_regions(inputs)
        index = {r: i for i, r in enumerate(REGIONS)}
        return {
            "cdkc_correct": self._local_correct(inputs),
            "cdkc_region": torch.tensor([index.get(r, 0) for r in regions], dtype=torch.long),
        }

    def _token_signal(
        self, model: torch.nn.Module, inputs: dict[str, Any], captured: list | None = None
    ) -> torch.Tensor:
        """Per-token uncertainty ``[b, T]``: entropy of the next-token distribution or NLL.

        ``captured``: the outputs of the loss's own forward (same model, same batch); reused when
        it holds one of the right shape, else the model is run again."""
        shape = tuple(inputs["completion_ids"].shape)
        for logps, ent, *_ in reversed(captured or []):
            if tuple(logps.shape) != shape:
                continue
            if self.args.signal == "entropy" and ent is not None:
                return ent
            if self.args.signal != "entropy":
                return -logps
        if self.args.signal == "entropy":
            return self.per_token_logps(model, inputs, with_entropy=True)[1]
        return -self.per_token_logps(model, inputs)

    # ----- the loss ------------------------------------------------------------------------
    def policy_loss(self, model: torch.nn.Module, inputs: dict[str, Any]) -> torch.Tensor:
        """(E8): GRPO loss + the signed calibration term (loss mode).

        Source: our inference (the paper's bidirectional entropy objective is not public); GRPO loss
        from TRL.
        """
        self._cdkc_capture = [] if self.args.calibration_mode == "loss" else None
        try:
            loss = super().policy_loss(model, inputs)
            captured = self._cdkc_capture
        finally:
            self._cdkc_capture = None
        if self.args.calibration_mode != "loss":
            return loss
        w = self.args.calibration_weights(self.band)
        pairs = [w.shared] if not w.region_adaptive else [w.mastered, w.confused, w.missing]
        if all(v == 0.0 for p in pairs for v in p):
            return loss  # every λ = 0: exactly TRL's GRPO loss
        mask = inputs["completion_mask"]
        token_h = self._token_signal(model, inputs, captured)  # [b, T] (E3 or E1)
        h = masked_mean(token_h, mask)  # [b] H̄
        regions = [REGIONS[i] for i in inputs["cdkc_region"].tolist()]
        if self.band is None:
            self._band_values.extend(h.detach().float().tolist())
            self._band_calls += 1
            if self._band_calls >= self.args.stabilize_batches:
                lo, hi = self.args.stabilize_quantiles
                # every process's H̄ values: one band for all ranks, as with one process
                vals = self.accelerator.gather(torch.tensor(self._band_values, device=h.device))
                self.band = (float(vals.quantile(lo)), float(vals.quantile(hi)))
                self.log_metric("cdkc/band_lo", self.band[0])
                self.log_metric("cdkc/band_hi", self.band[1])
        if self.band is None and w.region_adaptive:
            # Before the band is frozen the confused region is held still (Fig. 2: "stabilize uncertainty").
            w = self.args.calibration_weights(None)
            w.confused = (0.0, 0.0)
        factors = cdkc_rollout_weights(h, inputs["cdkc_correct"].to(h.device), regions, w)  # [b]
        mode = "train" if self.model.training else "eval"
        term = reduce_token_loss(
            factors[:, None] * token_h,  # [b, T] per-token calibration loss
            mask,
            self.args.calibration_loss_type,
            mode=mode,
            max_completion_length=self.max_completion_length,
            num_items_in_batch=inputs.get("num_items_in_batch"),
            gradient_accumulation_steps=(
                self.current_gradient_accumulation_steps if mode == "train" else 1
            ),
            steps_per_generation=self.args.steps_per_generation,
            num_processes=self.accelerator.num_processes,
        )
        correct = inputs["cdkc_correct"].bool()
        if correct.any():
            self.log_metric("cdkc/h_correct", float(h.detach()[correct.to(h.device)].mean()))
        if (~correct).any():
            self.log_metric("cdkc/h_wrong", float(h.detach()[~correct.to(h.device)].mean()))
        return loss + term
