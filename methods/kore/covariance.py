"""Streaming input-covariance collection for KORE-Constraint (paper §3.2, repo ``calib_cov_distribution``).

Forward hooks on the selected ``nn.Linear`` modules accumulate ``C += x^T x / denom`` per sample,
where ``x [L, d_in]`` are the sample's non-padding input tokens, optionally divided by the sample's
max value first (the official code's ``sample_max`` normalisation). Memory is ``O(d_in^2)`` per layer
whatever the number of tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Literal

import torch
from torch import nn


def default_llm_linear_filter(name: str, module: nn.Module) -> bool:
    """Every ``nn.Linear`` inside the decoder layers (``...layers.<i>...``), not vision/projector/head.

    The official ``calib_cov_distribution`` scope (linears under ``model.model.layers``).
    """
    return isinstance(module, nn.Linear) and ".layers." in f".{name}" and "vision" not in name


def _normalise(x: torch.Tensor, normalize: str, max_mode: str) -> torch.Tensor:
    if normalize == "none":
        return x
    m = x.max() if max_mode == "raw" else x.abs().max()
    m = m.abs()
    if m == 0:
        return x
    return x / m


def _select_linears(
    model: nn.Module, module_filter: Callable[[str, nn.Module], bool]
) -> dict[str, nn.Linear]:
    """The modules ``module_filter`` selects; each must be a dense ``nn.Linear``."""
    selected = {n: m for n, m in model.named_modules() if n and module_filter(n, m)}
    if not selected:
        raise ValueError("module_filter selected no module")
    for n, m in selected.items():
        if not isinstance(m, nn.Linear):
            raise ValueError(f"module {n!r} is {type(m).__name__}, expected a dense nn.Linear")
    return selected


def _covariance_hook(
    name: str,
    covs: dict[str, torch.Tensor],
    state: dict[str, torch.Tensor | None],
    store_dtype: torch.dtype,
    normalize: str,
    max_mode: str,
    denom: float,
):
    """Forward hook adding ``x^T x / denom`` of each unpadded sample's inputs to ``covs[name]``
    (the covariance C = X X^T of paper §3.2, per-sample normalisation of the official code)."""

    def hook(_m, inputs, _out):
        x = inputs[0].detach()
        if x.ndim == 2:
            x = x[None]
        mask = state["mask"]
        for b in range(x.shape[0]):
            xb = x[b] if mask is None else x[b][mask[b].bool()]
            if xb.numel() == 0:
                continue
            xb = xb.to(store_dtype)
            if not torch.isfinite(xb).all():
                raise ValueError(f"NaN/Inf in the inputs of {name!r}")
            xb = _normalise(xb, normalize, max_mode)
            covs[name].addmm_(xb.T, xb, alpha=1.0 / denom)

    return hook


def _run_calibration(
    model: nn.Module,
    dataloader: Iterable[Mapping[str, torch.Tensor]],
    state: dict[str, torch.Tensor | None],
) -> int:
    """Run every batch through ``model`` in eval mode (hooks attached); returns the token count."""
    n_tokens = 0
    was_training = model.training
    model.eval()
    dev = next(model.parameters()).device
    for batch in dataloader:
        batch = {k: v.to(dev) if torch.is_tensor(v) else v for k, v in batch.items()}
        ids = batch["input_ids"]
        mask = batch.get("attention_mask")
        if mask is None and ids.shape[0] > 1:
            raise ValueError(
                "batches with more than one row need an attention_mask (padding would "
                "pollute the covariance)"
            )
        state["mask"] = mask
        n_tokens += int(mask.sum()) if mask is not None else ids.numel()
        model(**batch)
    model.train(was_training)
    return n_tokens


@torch.no_grad()
def collect_input_covariances(
    model: nn.Module,
    dataloader: Iterable[Mapping[str, torch.Tensor]],
    module_filter: Callable[[str, nn.Module], bool] = default_llm_linear_filter,
    normalize: Literal["sample_max", "none"] = "sample_max",
    denom: float = 256.0,
    max_mode: Literal["raw", "abs"] = "raw",
    store_dtype: torch.dtype = torch.float32,
) -> dict[str, torch.Tensor]:
    """Accumulates the input covariance ``C = X X^T`` of every selected linear layer (paper §3.2).

    Args:
        model: the model; each batch is passed as ``model(**batch)``.
        dataloader: batches with ``input_ids`` and, when the batch has more than one row,
            ``attention_mask`` (padding positions are excluded from C).
        module_filter: ``(name, module) -> bool``; selected modules must be ``nn.Linear``.
        normalize: ``"sample_max"`` divides each sample's tokens by ``|max(x)|`` (repo behaviour);
            ``"none"`` gives the paper's plain ``X X^T``.
        denom: every sample's ``x^T x`` is divided by this (repo: 256).
        max_mode: ``"raw"`` uses ``|max(x)|`` (repo), ``"abs"`` uses ``max(|x|)``.
        store_dtype: accumulation dtype (float32 or float64).

    Returns:
        ``{module name: C [d_in, d_in]}`` on CPU.

    Raises:
        ValueError: on bad options, no selected module, a selected module that is not ``nn.Linear``,
            batch size > 1 without ``attention_mask``, zero calibration tokens, or NaN/Inf inputs.
    """
    if normalize not in ("sample_max", "none"):
        raise ValueError(f"normalize must be 'sample_max' or 'none', got {normalize!r}")
    if max_mode not in ("raw", "abs"):
        raise ValueError(f"max_mode must be 'raw' or 'abs', got {max_mode!r}")
    if not denom > 0:
        raise ValueError(f"denom must be > 0, got {denom}")
    selected = _select_linears(model, module_filter)
    covs = {
        n: torch.zeros(m.in_features, m.in_features, dtype=store_dtype, device=m.weight.device)
        for n, m in selected.items()
    }
    state: dict[str, torch.Tensor | None] = {"mask": None}
    hooks = [
        m.register_forward_hook(
            _covariance_hook(n, covs, state, store_dtype, normalize, max_mode, denom)
        )
        for n, m in selected.items()
    ]
    try:
        n_tokens = _run_calibration(model, dataloader, state)
    finally:
        for h in hooks:
            h.remove()
    if n_tokens == 0:
        raise ValueError("the calibration dataloader yielded zero tokens")
    for n, c in covs.items():
        if not torch.isfinite(c).all():
            raise ValueError(f"covariance of {n!r} has NaN/Inf")
    return covs
