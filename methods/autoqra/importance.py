"""Layer-wise importance priors (official core/importance.py, Phase I) and the warm start they feed (Eq. 6).

Two raw per-block signals, min-max normalised to [0, 1]: ``I_q`` (fidelity: how much the loss degrades when
block ℓ alone is quantised to min(Q)) and ``I_r`` (plasticity: Fisher-style ``Σ ||∇_W L_task||_F²`` over the
block's projections). The combined score is ``I = w_q I_q + w_r I_r``.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import torch

from .apply import block_modules, fake_quantize

logger = logging.getLogger(__name__)


def _minmax(x: np.ndarray, name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D [L], got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or inf: {x.tolist()}")
    span = x.max() - x.min()
    if span <= 0:
        logger.warning("%s is constant; its normalised importance is all zeros", name)
        return np.zeros_like(x)
    return (x - x.min()) / span


class Importance:
    """Normalised importance priors (official core/importance.py).

    Args:
        raw_q: raw quantisation sensitivity per block, shape [L].
        raw_r: raw adaptation demand per block, shape [L].
        w_q, w_r: weights of the combined score (0.5 / 0.5 in the repo).
    """

    def __init__(self, raw_q, raw_r, w_q: float = 0.5, w_r: float = 0.5) -> None:
        self.raw_q = np.asarray(raw_q, dtype=np.float64)
        self.raw_r = np.asarray(raw_r, dtype=np.float64)
        if self.raw_q.shape != self.raw_r.shape:
            raise ValueError(
                f"raw_q {self.raw_q.shape} and raw_r {self.raw_r.shape} differ in length"
            )
        self.I_q = _minmax(self.raw_q, "raw_q")
        self.I_r = _minmax(self.raw_r, "raw_r")
        self.w_q, self.w_r = float(w_q), float(w_r)

    @property
    def num_layers(self) -> int:
        """Number of blocks L; engineering, not in the paper."""
        return int(self.I_q.size)

    @property
    def score(self) -> np.ndarray:
        """Combined ``I(ℓ) = w_q I_q(ℓ) + w_r I_r(ℓ)``, shape [L].

        Source: official ``core/importance.py`` (w_q = w_r = 0.5).
        """
        return self.w_q * self.I_q + self.w_r * self.I_r

    def check_length(self, num_layers: int) -> None:
        """Raise unless the importances cover ``num_layers`` blocks; engineering,
        not in the paper.
        """
        if self.num_layers != num_layers:
            raise ValueError(f"importance has {self.num_layers} layers, expected {num_layers}")

    @classmethod
    def uniform(cls, num_layers: int) -> Importance:
        """All-equal importances (an ablation of ours, not in the paper)."""
        return cls(np.zeros(num_layers), np.zeros(num_layers))

    @classmethod
    def from_json(cls, path: str | Path, num_layers: int) -> Importance:
        """Load either schema: ``{backbone,lora}_metric_per_layer`` or the shipped per-linear ``loss`` dict.

        Source: official ``core/importance.py`` schema; the per-linear ``loss`` conversion is
        our inference.

        For the per-linear schema, ``I_q_raw(ℓ) = Σ_modules loss["ℓ.<module>"]`` and ``I_r_raw`` is zero
        (the file carries no adaptation signal).
        """
        data = json.loads(Path(path).read_text())
        raw_q, raw_r = np.zeros(num_layers), np.zeros(num_layers)
        if "backbone_metric_per_layer" in data or "lora_metric_per_layer" in data:
            for key, arr in (
                ("backbone_metric_per_layer", raw_q),
                ("lora_metric_per_layer", raw_r),
            ):
                for k, v in data.get(key, {}).items():
                    if not 0 <= int(k) < num_layers:
                        raise ValueError(
                            f"{path}: layer {k} out of range for num_layers={num_layers}"
                        )
                    arr[int(k)] = float(v)
        elif isinstance(data.get("loss"), dict):
            for k, v in data["loss"].items():
                layer = int(str(k).split(".")[0])
                if not 0 <= layer < num_layers:
                    raise ValueError(
                        f"{path}: layer {layer} out of range for num_layers={num_layers}"
                    )
                raw_q[layer] += float(v)
        else:
            raise ValueError(
                f"{path}: unsupported importance schema (keys {sorted(data)}); expected "
                "'backbone_metric_per_layer'/'lora_metric_per_layer' or a per-linear 'loss' dict"
            )
        return cls(raw_q, raw_r)


def _mean_loss(model, batches: Iterable[torch.Tensor]) -> float:
    losses = []
    with torch.no_grad():
        for ids in batches:
            losses.append(float(model(input_ids=ids, labels=ids).loss))
    return float(np.mean(losses))


def compute_quant_sensitivity(
    model, batches: list[torch.Tensor], bits: int = 2, group_size: int = 128
):
    """Raw ``I_q``: increase of the mean next-token loss when only block ℓ is quantised to ``bits``.

    Source: our inference (the official code ships the scores but not how they are computed).

    Args:
        model: full-precision causal LM (not modified).
        batches: calibration token-id batches, each [B, T].
        bits: the bit-width for the probe (min(Q)).
        group_size: quantisation group size.

    Returns:
        ``np.ndarray[L]`` of loss increases.
    """
    model = copy.deepcopy(model).eval()
    base = _mean_loss(model, batches)
    out = []
    for mods in block_modules(model):
        saved = {n: m.weight.detach().clone() for n, m in mods.items()}
        with torch.no_grad():
            for m in mods.values():
                m.weight.copy_(fake_quantize(m.weight, bits, group_size))
        out.append(_mean_loss(model, batches) - base)
        with torch.no_grad():
            for n, m in mods.items():
                m.weight.copy_(saved[n])
    return np.asarray(out)


def compute_adapt_sensitivity(model, batches: list[torch.Tensor]) -> np.ndarray:
    """Raw ``I_r``: Fisher-style ``Σ_modules mean_batch ||∇_W L_task||_F²`` per block on task data.

    Source: our inference (the official code does not compute ``I_r``).
    """
    model = copy.deepcopy(model).train()
    blocks = block_modules(model)
    scores = np.zeros(len(blocks))
    for ids in batches:
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        for i, mods in enumerate(blocks):
            scores[i] += sum(float(m.weight.grad.pow(2).sum()) for m in mods.values())
    return scores / max(len(batches), 1)
