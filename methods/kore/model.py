"""Wrapping a model with KORE adapters through PEFT (paper §3.2).

``apply_kore`` creates a standard PEFT LoRA (scaling 1: ``lora_alpha = r``), then overwrites each
wrapped layer with the KORE factors: ``base_layer.weight <- W_res``, ``lora_A <- A``,
``lora_B <- B``, and freezes ``lora_A``. At step 0 the model computes exactly what it did before.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from methods.kore.nullspace import KoreFactors, check_rank, kore_decompose

logger = logging.getLogger(__name__)


def _matches(name: str, targets: Sequence[str]) -> bool:
    return any(name == t or name.endswith("." + t) for t in targets)


def _target_names(model: nn.Module, target_modules: Sequence[str]) -> list[str]:
    if isinstance(target_modules, str) or not target_modules:
        raise ValueError(
            f"target_modules must be a non-empty list of names, got {target_modules!r}"
        )
    names = [n for n, _ in model.named_modules() if n and _matches(n, target_modules)]
    if not names:
        raise ValueError(f"target_modules {list(target_modules)} matched no module of the model")
    return names


def _layer_factors(
    model: nn.Module,
    names: Sequence[str],
    covs: Mapping[str, torch.Tensor],
    r: int,
    sigma_fuse: str,
    eigvecs: str,
    init: str,
) -> dict[str, KoreFactors]:
    """Check each target layer and compute its KORE factors (paper Eqs. 1-3, §3.2)."""
    modules = dict(model.named_modules())
    factors: dict[str, KoreFactors] = {}
    for n in names:
        m = modules[n]
        if type(m) is not nn.Linear:
            raise ValueError(
                f"target {n!r} is {type(m).__name__}; KORE needs a dense nn.Linear with a "
                "materialised float weight (dequantise / gather first)"
            )
        w = m.weight
        if w.is_meta or not w.is_floating_point() or w.numel() == 0:
            raise ValueError(f"target {n!r} has no materialised float weight (meta/partitioned?)")
        check_rank(r, m.in_features, m.out_features)
        if n not in covs:
            raise ValueError(f"covs has no covariance for target module {n!r}")
        factors[n] = kore_decompose(
            w, covs[n], r, sigma_fuse=sigma_fuse, eigvecs=eigvecs, init=init
        )
    return factors


def _install_factors(
    peft_model, factors: Mapping[str, KoreFactors], adapter_name: str, freeze_A: bool
) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Write W_res into the base weight and A, B into the LoRA factors (paper Eq. 3: the wrapped
    layer computes W_res x + B A x = W0 x at step 0); freeze A unless ``freeze_A`` is False.

    Returns:
        ``(init_B, null_energy)`` per module name.
    """
    init_B, energy = {}, {}
    for n, f in factors.items():
        layer = peft_model.base_model.model.get_submodule(n)
        if abs(layer.scaling[adapter_name] - 1.0) > 1e-12:
            raise RuntimeError(
                f"expected LoRA scaling 1 on {n!r}, got {layer.scaling[adapter_name]}"
            )
        with torch.no_grad():
            base = layer.get_base_layer()
            base.weight.copy_(f.W_res.to(base.weight.dtype))
            layer.lora_A[adapter_name].weight.copy_(f.A.to(base.weight.dtype))
            layer.lora_B[adapter_name].weight.copy_(f.B.to(base.weight.dtype))
        layer.lora_A[adapter_name].weight.requires_grad_(not freeze_A)
        layer.lora_B[adapter_name].weight.requires_grad_(True)
        init_B[n] = layer.lora_B[adapter_name].weight.detach().clone()
        energy[n] = f.null_energy
    return init_B, energy


def apply_kore(
    model: nn.Module,
    covs: Mapping[str, torch.Tensor],
    r: int,
    target_modules: Sequence[str],
    freeze_A: bool = True,
    sigma_fuse: str = "UV",
    adapter_name: str = "default",
    eigvecs: str = "smallest",
    init: str = "kore",
):
    """Wraps ``model`` with KORE-initialised LoRA adapters (paper Eqs. 1-3, §3.2).

    Args:
        model: a plain (not PEFT-wrapped) transformers model; modified in place and wrapped.
        covs: ``{module name: C [d_in, d_in]}`` from :func:`collect_input_covariances`, one per
            target module (names as in ``model.named_modules()``).
        r: adapter rank; ``1 <= r <= min(d_out, d_in)`` of every target layer.
        target_modules: module-name suffixes (e.g. ``["q_proj", "v_proj"]``), matched like PEFT.
        freeze_A: freeze the down-projection (KORE); ``False`` is the paper's "w/o frozen A" ablation.
        sigma_fuse: see :func:`kore_decompose`.
        adapter_name: PEFT adapter name.
        eigvecs, init: the initialisation (:func:`kore_decompose`): ``"smallest"``/``"kore"`` is
            KORE; ``eigvecs="largest"`` the largest-eigenvector ablation; ``init="lora_null_v1"``
            the official ``--singular_aware_2`` init (``A = Û^T``, ``B = 0``, base weight unchanged).

    Returns:
        The ``PeftModel``. It carries ``kore_init_B`` (``{module name: B at init}``, needed by
        :func:`export_standard_lora`) and ``kore_null_energy`` (``{module name: float}``).

    Raises:
        TypeError / ValueError: if the model is already PEFT-wrapped, a target is not a dense
            float ``nn.Linear`` (quantised, meta or partitioned weights), a covariance is missing or
            malformed, or ``r`` is invalid for some layer.
    """
    from peft import LoraConfig, PeftModel, get_peft_model
    from peft.tuners.lora import LoraLayer

    if isinstance(model, PeftModel) or any(isinstance(m, LoraLayer) for m in model.modules()):
        raise ValueError("model is already wrapped with PEFT adapters; pass the plain base model")
    names = _target_names(model, target_modules)
    factors = _layer_factors(model, names, covs, r, sigma_fuse, eigvecs, init)
    cfg = LoraConfig(
        r=r,
        lora_alpha=r,
        lora_dropout=0.0,
        init_lora_weights=False,
        target_modules=names,
        bias="none",
        use_rslora=False,
    )
    peft_model = get_peft_model(model, cfg, adapter_name=adapter_name)
    init_B, energy = _install_factors(peft_model, factors, adapter_name, freeze_A)
    peft_model.kore_init_B = init_B
    peft_model.kore_null_energy = energy
    logger.info(
        "KORE: %d layers, r=%d, mean null_energy %.3g",
        len(names),
        r,
        sum(energy.values()) / len(energy),
    )
    return peft_model


def export_standard_lora(
    peft_model, init_B: Mapping[str, torch.Tensor] | None = None, adapter_name: str = "default"
) -> dict[str, torch.Tensor]:
    """Exports a trained frozen-A KORE adapter as a standard LoRA on the *untouched* base.

    ``W* = W_res + B' A = W0 + (B' - B) A``, so ``lora_A = A`` and ``lora_B = B' - B`` with scaling 1
    (``lora_alpha = r``) reproduce the fine-tuned model on the original weights.

    Args:
        peft_model: the model returned by :func:`apply_kore` (after training).
        init_B: ``{module name: B at init}``; defaults to ``peft_model.kore_init_B``.
        adapter_name: PEFT adapter name.

    Returns:
        A PEFT-style state dict ``{"base_model.model.<name>.lora_{A,B}.weight": tensor}`` for
        ``peft.set_peft_model_state_dict`` on a ``LoraConfig(r, lora_alpha=r)`` model.

    Raises:
        ValueError: if ``init_B`` is missing a layer or ``lora_A`` was trained (not exportable).
    """
    init_B = init_B if init_B is not None else getattr(peft_model, "kore_init_B", None)
    if init_B is None:
        raise ValueError("init_B is required (apply_kore stores it as peft_model.kore_init_B)")
    out = {}
    for n, b0 in init_B.items():
        layer = peft_model.base_model.model.get_submodule(n)
        if layer.lora_A[adapter_name].weight.requires_grad:
            raise ValueError(
                f"lora_A of {n!r} is trainable; only frozen-A KORE adapters export as a standard "
                "LoRA on the original base (merge instead)"
            )
        key = f"base_model.model.{n}"
        out[f"{key}.lora_A.weight"] = layer.lora_A[adapter_name].weight.detach().clone()
        out[f"{key}.lora_B.weight"] = layer.lora_B[adapter_name].weight.detach() - b0.to(
            layer.lora_B[adapter_name].weight.dtype
        )
    return out


def effective_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """``{linear name: effective weight}`` for a plain or LoRA-wrapped model (names of the base model).

    For a PEFT LoRA layer the effective weight is ``W_base + scaling * B A`` (active adapters).
    """
    from peft.tuners.lora import LoraLayer

    root = model.base_model.model if hasattr(model, "peft_config") else model
    out = {}
    lora_children = set()
    for n, m in root.named_modules():
        if isinstance(m, LoraLayer):
            w = m.get_base_layer().weight.detach().clone()
            for a in m.active_adapters:
                if a in m.lora_A:
                    w = w + m.scaling[a] * m.lora_B[a].weight.detach() @ m.lora_A[a].weight.detach()
            out[n] = w
            lora_children.update(f"{n}.{c}" for c, _ in m.named_modules() if c)
        elif (
            type(m) is nn.Linear
            and n not in lora_children
            and not any(n.startswith(p + ".") for p in out)
        ):
            out[n] = m.weight.detach().clone()
    return out
