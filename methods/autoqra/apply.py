"""Quantise a causal LM per block and attach per-block LoRA ranks (official search/phase2_evolution.py steps 1-2).

``fake_quantize`` is the CPU stand-in for HQQ: asymmetric round-to-nearest, group-wise over the flattened
weight, with a float scale and offset per group. ``build_quantized_lora_model`` quantises all seven
projections of block ℓ to ``q_ℓ`` bits (``"fake"`` backend, or HQQ on GPU) and attaches PEFT LoRA with
``rank_pattern``/``alpha_pattern`` (α = 2r). The fake backend keeps the packed codes and the fp16 group
metadata on each module (``module.autoqra_quant``), so ``held_bytes`` measures what the model really holds.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import torch
from torch import nn

from .memory import PROJECTIONS
from .space import QRConfig

logger = logging.getLogger(__name__)

FAKE_SUPPORTED_BITS: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)


@dataclass
class QuantState:
    """Packed representation of one fake-quantised weight: codes + per-group fp16 scale and offset."""

    codes: torch.Tensor  # [n_groups, g] uint8
    scale: torch.Tensor  # [n_groups, 1] float16
    offset: torch.Tensor  # [n_groups, 1] float16
    bits: int

    def nbytes(self) -> float:
        """Packed bytes: ``numel·bits/8`` for the codes + 2 bytes for each scale and offset.

        Source: official ``core/memory.py`` (codes at q/8 bytes, 2 bytes per group scale and offset;
        paper Eq. 1).
        """
        return self.codes.numel() * self.bits / 8.0 + 2.0 * (
            self.scale.numel() + self.offset.numel()
        )


def quantize_groups(weight: torch.Tensor, bits: int, group_size: int) -> QuantState:
    """Asymmetric round-to-nearest over groups of ``group_size`` consecutive (flattened) weights.

    Source: our choice (a dependency-free RTN stand-in; the official code uses HQQ,
    ``evaluation/real_task.py``).

    Per group: ``s = (max - min)/(2^b - 1)``, ``code = round((w - min)/s)`` ∈ [0, 2^b - 1]. Scale and offset
    are rounded to fp16 first (they are stored as 16-bit metadata, p_meta = 16), so dequantising the codes
    and quantising again gives the same values (idempotence).
    """
    if not isinstance(weight, torch.Tensor):
        raise TypeError(f"weight must be a torch.Tensor, got {type(weight).__name__}")
    if int(bits) != bits or bits not in FAKE_SUPPORTED_BITS:
        raise ValueError(f"bits must be an integer in {FAKE_SUPPORTED_BITS}, got {bits}")
    if int(group_size) <= 0:
        raise ValueError(f"group_size must be > 0, got {group_size}")
    if weight.numel() % group_size != 0:
        raise ValueError(
            f"weight.numel()={weight.numel()} is not divisible by group_size={group_size}"
        )
    w = weight.detach().float().reshape(-1, group_size)  # [n_groups, g]
    lo = w.min(dim=1, keepdim=True).values.half().float()
    hi = w.max(dim=1, keepdim=True).values
    levels = 2**bits - 1
    scale = ((hi - lo) / levels).half().float()
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))  # constant group: any scale works
    codes = torch.clamp(torch.round((w - lo) / scale), 0, levels).to(torch.uint8)
    return QuantState(codes=codes, scale=scale.half(), offset=lo.half(), bits=int(bits))


def dequantize(
    state: QuantState, shape: torch.Size, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``w = offset + code·scale`` reshaped to ``shape``.

    Source: our choice (RTN stand-in for HQQ), not in the paper.
    """
    w = state.offset.float() + state.codes.float() * state.scale.float()
    return w.reshape(shape).to(dtype)


def fake_quantize(weight: torch.Tensor, bits: int, group_size: int = 128) -> torch.Tensor:
    """Quantise-dequantise ``weight`` (any shape) with ``bits`` bits per weight, group-wise (our toy design).

    Source: our choice (RTN stand-in for HQQ with group size 128 as official
    ``evaluation/real_task.py``).

    Args:
        weight: the full-precision weight; ``numel`` must be divisible by ``group_size``.
        bits: bits per weight (1..8); 8 is real 8-bit (256 levels), not full precision.
        group_size: number of consecutive weights sharing one scale/offset.

    Returns:
        Tensor of the same shape and dtype with at most ``2^bits`` distinct values per group and
        ``|w - ŵ| <= scale/2`` elementwise.
    """
    state = quantize_groups(weight, bits, group_size)
    return dequantize(state, weight.shape, weight.dtype)


def block_modules(model: nn.Module, num_layers: int | None = None) -> list[dict[str, nn.Linear]]:
    """The seven projections of every block, ``[{proj_name: nn.Linear}]``; raise listing missing ones.

    Source: official ``core/config.py`` (the seven linears of a block share q and r); module lookup
    is engineering.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", base)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise ValueError(
            "model has no `model.layers`; AutoQRA expects a Llama/Qwen-style decoder "
            "(model.layers[i].{self_attn,mlp}.{proj})"
        )
    out, missing = [], []
    for i, layer in enumerate(layers):
        mods = {}
        for name in PROJECTIONS:
            mod = layer
            for part in name.split("."):
                mod = getattr(mod, part, None)
                if mod is None:
                    break
            if not isinstance(mod, nn.Linear):
                missing.append(f"model.layers.{i}.{name}")
            else:
                mods[name] = mod
        out.append(mods)
    if missing:
        raise ValueError(f"model is missing projection modules: {missing[:10]}")
    if num_layers is not None and len(out) != num_layers:
        raise ValueError(f"cfg has {num_layers} layers but the model has {len(out)} blocks")
    return out


def _quantize_hqq(model: nn.Module, cfg: QRConfig, group_size: int, q8_as_fp16: bool) -> None:
    try:
        from hqq.core.quantize import BaseQuantizeConfig, HQQLinear, Quantizer
    except ImportError as e:  # pragma: no cover - optional GPU dependency
        raise ImportError(
            "backend='hqq' needs the `hqq` package (pip install hqq); use backend='fake' on CPU"
        ) from e
    supported = set(getattr(Quantizer, "SUPPORTED_BITS", (1, 2, 3, 4, 8)))
    device = next(model.parameters()).device
    for layer_idx, mods in enumerate(block_modules(model, cfg.num_layers)):
        bits = cfg.q[layer_idx]
        if bits >= 16 or (bits >= 8 and q8_as_fp16):
            continue
        if bits not in supported:
            raise ValueError(
                f"HQQ cannot express {bits}-bit weights (supported: {sorted(supported)})"
            )
        for name, lin in mods.items():
            qcfg = BaseQuantizeConfig(nbits=bits, group_size=group_size)
            hq = HQQLinear(lin, quant_config=qcfg, compute_dtype=lin.weight.dtype, device=device)
            parent = model.model.layers[layer_idx]
            for part in name.split(".")[:-1]:
                parent = getattr(parent, part)
            setattr(parent, name.split(".")[-1], hq)


def build_quantized_lora_model(
    model: nn.Module,
    cfg: QRConfig,
    backend: str = "fake",
    group_size: int = 128,
    lora_dropout: float = 0.0,
    copy_model: bool = True,
    q8_as_fp16: bool = False,
):
    """Quantise block ℓ to ``cfg.q[ℓ]`` bits and attach LoRA of rank ``cfg.r[ℓ]`` (α = 2r) to its projections.

    Args:
        model: an HF Llama/Qwen causal LM (full precision).
        cfg: the per-block configuration; ``len(cfg.q)`` must equal the number of blocks.
        backend: ``"fake"`` (CPU, group-wise RTN, keeps packed codes) or ``"hqq"`` (GPU, needs ``hqq``).
        group_size: quantisation group size (128 paper, 32 toy).
        lora_dropout: LoRA dropout (0.05 in the repo's SFT).
        copy_model: deep-copy ``model`` first (keep True when building many candidates from one base).
        q8_as_fp16: the repo's behaviour of leaving 8-bit blocks unquantised (our choice (docs deviations)); default off.

    Returns:
        A ``peft.PeftModel`` whose base weights are frozen and whose LoRA factors are trainable.
    """
    from peft import LoraConfig, get_peft_model

    if not isinstance(cfg, QRConfig):
        raise TypeError(f"cfg must be a QRConfig, got {type(cfg).__name__}")
    if backend not in ("fake", "hqq"):
        raise ValueError(f"backend must be 'fake' or 'hqq', got {backend!r}")
    if copy_model:
        model = copy.deepcopy(model)
    blocks = block_modules(model, cfg.num_layers)
    if backend == "fake":
        bad = sorted({b for b in cfg.q if b not in FAKE_SUPPORTED_BITS and b < 16})
        if bad:
            raise ValueError(f"cfg.q has bit-widths {bad} the fake backend cannot express")
        for layer_idx, mods in enumerate(blocks):
            bits = cfg.q[layer_idx]
            for lin in mods.values():
                if bits >= 16 or (bits >= 8 and q8_as_fp16):
                    lin.autoqra_quant = None
                    continue
                with torch.no_grad():
                    state = quantize_groups(lin.weight, bits, group_size)
                    lin.weight.copy_(dequantize(state, lin.weight.shape, lin.weight.dtype))
                lin.autoqra_quant = state
    else:
        _quantize_hqq(model, cfg, group_size, q8_as_fp16)

    rank_pattern, alpha_pattern = {}, {}
    for layer_idx in range(cfg.num_layers):
        for name in PROJECTIONS:
            key = f"model.layers.{layer_idx}.{name}"
            rank_pattern[key] = cfg.r[layer_idx]
            alpha_pattern[key] = 2 * cfg.r[layer_idx]
    base_r = max(set(cfg.r), key=cfg.r.count)  # the repo's base rank: the most frequent one
    lcfg = LoraConfig(
        r=base_r,
        lora_alpha=2 * base_r,
        lora_dropout=lora_dropout,
        target_modules=[n.split(".")[-1] for n in PROJECTIONS],
        rank_pattern=rank_pattern,
        alpha_pattern=alpha_pattern,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lcfg)


def held_bytes(peft_model: nn.Module, lora_bits: int = 16) -> float:
    """Bytes the quantised blocks hold: packed codes + fp16 metadata + LoRA factors at ``lora_bits``.

    Blocks left unquantised count at 16 bits per weight. Embeddings and the LM head are not counted
    (as in Eq. 1).
    """
    total = 0.0
    for _name, mod in peft_model.named_modules():
        if not hasattr(mod, "lora_A") or not hasattr(mod, "base_layer"):
            continue
        base = mod.base_layer
        state = getattr(base, "autoqra_quant", None)
        total += state.nbytes() if state is not None else base.weight.numel() * 2.0
        for sub in (mod.lora_A, mod.lora_B):
            for lin in sub.values():
                total += lin.weight.numel() * lora_bits / 8.0
    return total
