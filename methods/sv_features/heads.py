"""QK / OV matrices of attention heads in Hugging Face models, with biases and RoPE.

Sources: the augmented QK matrix as ``utils.py`` of the authors' earlier
``gaabrielfranco/sparse-attention-decomposition``; RoPE (paper App. D) as ``rope.py`` of
``gaabrielfranco/accpp-tracer``. The official ``svf-alignment`` code was not read.

Row-vector conventions (as in TransformerLens): ``W_Q, W_K, W_V [d_model, d_head]``,
``W_O [d_head, d_model]``. The augmented query/key factors ``A = [W_Q; b_Q^T]``, ``B = [W_K; b_K^T]``
(``[d_model + 1, d_head]``) give the pre-scaling logit ``x~_i^T A R_i^T R_j B^T x~_j`` with
``x~ = [LN(x); 1]`` and ``R_p`` the rotary rotation at position ``p`` (identity without RoPE). The model's
softmax input is that logit times :func:`attention_scale` (``1/sqrt(d_head)``).

Supported: GPT-2 (``GPT2LMHeadModel``, absolute positions), GPT-NeoX / Pythia (partial rotary) and Llama-style rotary models with separate
``q_proj``/``k_proj`` (Llama, Qwen2, Mistral; grouped-query heads handled). Models with per-head q/k
normalisation (Qwen3, OLMo2) are rejected, since their logit is not bilinear in ``x~``.

LayerNorm folding (``fold_ln=True``, TransformerLens ``fold_ln`` + ``center_weights``, the default of the
authors' ``HookedTransformer.from_pretrained`` pipeline): the norm's gain and bias move into the head's
weights, ``W_Q <- diag(γ) W_Q`` (then, for LayerNorm, centred over ``d_model``) and ``b_Q <- b_Q + β W_Q``,
and the input becomes the bare normalised stream ``x̂ = (x - mean) / std`` (RMSNorm: ``x / rms``, no
centring). The logits are unchanged, but ``Ω~`` and hence its singular vectors are not: with a
non-trivial gain the two bases differ (the sparse decomposition's edges with them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class HeadFactors:
    """Augmented factors of one head.

    Attributes:
        A: ``[d+1, d_head]`` query factor ``[W_Q; b_Q^T]``.
        B: ``[d+1, d_head]`` key factor ``[W_K; b_K^T]``.
        scale: the factor the model multiplies the logit by before the softmax.
        rotary: whether RoPE rotations act between ``A`` and ``B``.
        input_module: name of the module whose output is ``LN(x)`` for this layer.
    """

    A: torch.Tensor
    B: torch.Tensor
    scale: float
    rotary: bool
    input_module: str


def _layers(model: nn.Module):
    base = getattr(model, "model", None)
    if base is not None and hasattr(base, "layers"):
        return "llama", base.layers, "model.layers"
    nx = getattr(model, "gpt_neox", None)
    if nx is not None and hasattr(nx, "layers"):
        return "neox", nx.layers, "gpt_neox.layers"
    tr = getattr(model, "transformer", None)
    if tr is not None and hasattr(tr, "h"):
        return "gpt2", tr.h, "transformer.h"
    if hasattr(model, "layers") and hasattr(model, "rotary_emb"):
        return "llama", model.layers, "layers"
    raise TypeError(
        f"model of type {type(model).__name__} is not supported: expected a GPT-2 or a Llama-style "
        "model (model.model.layers[*].self_attn.q_proj)"
    )


def _check_index(model: nn.Module, layer: int, head: int):
    kind, layers, prefix = _layers(model)
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer={layer} out of range for {len(layers)} layers")
    cfg = model.config
    n_heads = cfg.n_head if kind == "gpt2" else cfg.num_attention_heads
    if not 0 <= head < n_heads:
        raise ValueError(f"head={head} out of range for {n_heads} heads")
    return kind, layers[layer], prefix


def head_factors(model: nn.Module, layer: int, head: int, fold_ln: bool = False) -> HeadFactors:
    """Extracts the augmented query/key factors of one head.

    Source: ``utils.py`` of the authors' earlier ``gaabrielfranco/sparse-attention-decomposition``
    (biases as an extra row); HF weight layouts are engineering.

    Args:
        model: a GPT-2 or Llama-style causal LM (or its base model).
        layer, head: the head.
        fold_ln: fold the pre-attention norm's gain/bias into the factors (module docstring); the
            matching inputs are ``head_inputs(..., fold_ln=True)``.

    Returns:
        :class:`HeadFactors`.

    Raises:
        TypeError: on an unsupported architecture.
        ValueError: on out-of-range indices or per-head q/k normalisation.
    """
    if not isinstance(fold_ln, bool):
        raise TypeError(f"fold_ln must be bool, got {type(fold_ln).__name__}")
    f = _raw_head_factors(model, layer, head)
    if fold_ln:
        f.A, f.B = fold_norm(model, f.input_module, f.A), fold_norm(model, f.input_module, f.B)
    return f


def norm_module(model: nn.Module, name: str) -> tuple[nn.Module, bool, float]:
    """``(module, centres, eps)`` of the pre-attention norm ``name``: LayerNorm centres, RMSNorm not.

    Source: engineering (HF module names), not in the paper.
    """
    mod = dict(model.named_modules())[name]
    eps = getattr(mod, "eps", None)
    if eps is None:
        eps = getattr(mod, "variance_epsilon", None)
    if eps is None or getattr(mod, "weight", None) is None:
        raise TypeError(
            f"cannot fold {type(mod).__name__} at {name!r}: expected a LayerNorm/RMSNorm"
        )
    return mod, isinstance(mod, nn.LayerNorm), float(eps)


def fold_norm(model: nn.Module, norm_name: str, F: torch.Tensor) -> torch.Tensor:
    """Folds the norm at ``norm_name`` into an augmented factor ``F = [W; b^T]`` (``[d+1, k]``).

    Source: ``utils.py`` of ``gaabrielfranco/sparse-attention-decomposition`` (the authors' earlier
    paper's code; LN folded into the weights, as TransformerLens).

    ``W <- diag(γ) W`` (minus its mean over ``d`` for LayerNorm, as TransformerLens'
    ``center_weights``), ``b <- b + β W``.
    """
    mod, centres, _ = norm_module(model, norm_name)
    W, b = F[:-1].float(), F[-1].float()
    g = mod.weight.detach().float()
    beta = getattr(mod, "bias", None)
    if beta is not None:
        b = b + beta.detach().float() @ W
    W = g[:, None] * W
    if centres:
        W = W - W.mean(0, keepdim=True)
    return torch.cat([W, b[None]], 0)


def normalise_without_affine(model: nn.Module, norm_name: str, x: torch.Tensor) -> torch.Tensor:
    """``x̂``: the norm at ``norm_name`` applied to the residual ``x`` without its gain and bias.

    Source: ``utils.py`` of ``gaabrielfranco/sparse-attention-decomposition`` (the authors' earlier
    paper's code; ``ln1.hook_normalized``).
    """
    _, centres, eps = norm_module(model, norm_name)
    x = x.float()
    if centres:
        x = x - x.mean(-1, keepdim=True)
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def _raw_head_factors(model: nn.Module, layer: int, head: int) -> HeadFactors:
    kind, blk, prefix = _check_index(model, layer, head)
    cfg = model.config
    if kind == "gpt2":
        d = cfg.n_embd
        dh = d // cfg.n_head
        w = blk.attn.c_attn.weight.detach()  # Conv1D [d, 3d]: y = x @ w + b
        b = blk.attn.c_attn.bias.detach()
        sl_q = slice(head * dh, (head + 1) * dh)
        sl_k = slice(d + head * dh, d + (head + 1) * dh)
        A = torch.cat([w[:, sl_q], b[sl_q][None]], 0)
        B = torch.cat([w[:, sl_k], b[sl_k][None]], 0)
        scale = dh**-0.5 if getattr(cfg, "scale_attn_weights", True) else 1.0
        if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
            scale /= float(layer + 1)
        return HeadFactors(A, B, scale, False, f"{prefix}.{layer}.ln_1")
    if kind == "neox":
        attn = blk.attention
        n_heads = cfg.num_attention_heads
        dh = cfg.hidden_size // n_heads
        w = attn.query_key_value.weight.detach()  # [3d, d], rows per head: q | k | v
        b = attn.query_key_value.bias
        b = w.new_zeros(w.shape[0]) if b is None else b.detach()
        base = head * 3 * dh
        sl_q, sl_k = slice(base, base + dh), slice(base + dh, base + 2 * dh)
        A = torch.cat([w[sl_q].T, b[sl_q][None]], 0)
        B = torch.cat([w[sl_k].T, b[sl_k][None]], 0)
        scale = float(getattr(attn, "scaling", dh**-0.5))
        return HeadFactors(A, B, scale, True, f"{prefix}.{layer}.input_layernorm")
    attn = blk.self_attn
    if getattr(attn, "q_norm", None) is not None or getattr(attn, "k_norm", None) is not None:
        raise ValueError(
            "this model normalises q/k per head (q_norm/k_norm): the attention logit is not bilinear "
            "in the residual stream, so the SVD decomposition does not apply"
        )
    n_heads = cfg.num_attention_heads
    n_kv = getattr(cfg, "num_key_value_heads", None) or n_heads
    dh = getattr(attn, "head_dim", None) or cfg.hidden_size // n_heads
    kv = head // (n_heads // n_kv)
    wq = attn.q_proj.weight.detach()[head * dh : (head + 1) * dh]  # [dh, d]: y = x @ w.T + b
    wk = attn.k_proj.weight.detach()[kv * dh : (kv + 1) * dh]
    bq = attn.q_proj.bias
    bk = attn.k_proj.bias
    bq = torch.zeros(dh) if bq is None else bq.detach()[head * dh : (head + 1) * dh]
    bk = torch.zeros(dh) if bk is None else bk.detach()[kv * dh : (kv + 1) * dh]
    A = torch.cat([wq.T, bq[None].to(wq)], 0)
    B = torch.cat([wk.T, bk[None].to(wk)], 0)
    scale = float(getattr(attn, "scaling", dh**-0.5))
    return HeadFactors(A, B, scale, True, f"{prefix}.{layer}.input_layernorm")


def rope_rotations(model: nn.Module, positions: torch.Tensor) -> torch.Tensor:
    """Rotation matrices ``R_p [P, d_head, d_head]`` with ``rope(q, p) = R_p q`` (HF rotate-half).

    Source: ``rope.py`` of ``gaabrielfranco/accpp-tracer``; paper App. D (RoPE).

    Built from the model's own ``rotary_emb`` (so scaling variants are respected): ``R_p = diag(cos_p)
    + diag(sin_p) M`` with ``M x = rotate_half(x) = [-x_2, x_1]``.
    """
    base = getattr(model, "model", None) or getattr(model, "gpt_neox", None) or model
    rot = getattr(base, "rotary_emb", None)
    if rot is None:
        raise TypeError(f"{type(model).__name__} has no rotary_emb: not a rotary model")
    dev = next(model.parameters()).device
    positions = torch.as_tensor(positions, device=dev).long().flatten()
    cfg = model.config
    dh = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dummy = torch.zeros(1, positions.numel(), dh, dtype=torch.float32, device=dev)
    cos, sin = rot(dummy, positions[None])
    cos, sin = cos[0].float(), sin[0].float()  # [P, rd]; rd < dh for partial rotary (GPT-NeoX)
    rd = cos.shape[-1]
    half = rd // 2
    M = cos.new_zeros(rd, rd)
    M[torch.arange(half), torch.arange(half) + half] = -1.0
    M[torch.arange(half) + half, torch.arange(half)] = 1.0
    R = torch.eye(dh, device=cos.device).repeat(positions.numel(), 1, 1)
    R[:, :rd, :rd] = torch.diag_embed(cos) + torch.diag_embed(sin) @ M
    return R


def qk_matrix(
    model: nn.Module | None = None,
    layer: int | None = None,
    head: int | None = None,
    *,
    W_Q: torch.Tensor | None = None,
    W_K: torch.Tensor | None = None,
    b_Q: torch.Tensor | None = None,
    b_K: torch.Tensor | None = None,
    augmented: bool = True,
    delta: int | None = None,
) -> torch.Tensor:
    """The (augmented) QK matrix ``Omega~`` of a head, from a model or raw weights.

    Source: ``utils.py`` of ``gaabrielfranco/sparse-attention-decomposition`` (the authors' earlier
    paper's code; augmented Ω̃ with biases).

    ``x~_i^T Omega~ x~_j`` is the pre-scaling attention logit. For rotary models pass ``delta = j - i``
    (``Omega~(delta) = A R_0^T R_delta B^T``); the position-independent matrix does not exist there.

    Args:
        model, layer, head: a supported HF model and the head; or
        W_Q, W_K: raw factors ``[d, d_head]`` with optional biases ``b_Q, b_K [d_head]``.
        augmented: append the bias row/column (``[d+1, d+1]``); if False return ``W_Q W_K^T``.
        delta: relative offset ``j - i`` for rotary models.

    Returns:
        ``[d+1, d+1]`` (augmented) or ``[d, d]``.

    Raises:
        ValueError: on shape mismatches, missing ``delta`` for a rotary model, or ``delta`` given for a
            non-rotary one.
    """
    A, B, rotary = _factors(model, layer, head, W_Q, W_K, b_Q, b_K)
    if rotary:
        if delta is None:
            raise ValueError(
                "rotary model: the QK matrix depends on the relative position; pass delta=j-i"
            )
        R = rope_rotations(model, torch.tensor([0, int(delta)]))
        core = R[0].T @ R[1]
        om = A @ core @ B.T
    else:
        if delta is not None:
            raise ValueError("delta is only meaningful for rotary models")
        om = A @ B.T
    return om if augmented else om[:-1, :-1]


def _factors(model, layer, head, W_Q, W_K, b_Q, b_K):
    if model is not None:
        if layer is None or head is None:
            raise ValueError("layer and head are required with a model")
        f = head_factors(model, layer, head)
        return f.A.float(), f.B.float(), f.rotary
    if W_Q is None or W_K is None:
        raise ValueError("pass either model+layer+head or W_Q and W_K")
    if W_Q.ndim != 2 or W_Q.shape != W_K.shape:
        raise ValueError(
            f"W_Q {tuple(W_Q.shape)} and W_K {tuple(W_K.shape)} must be 2-D of equal shape"
        )
    dh = W_Q.shape[1]
    for name, bias in (("b_Q", b_Q), ("b_K", b_K)):
        if bias is not None and bias.shape != (dh,):
            raise ValueError(f"{name} must have shape ({dh},), got {tuple(bias.shape)}")
    bq = torch.zeros(dh) if b_Q is None else b_Q
    bk = torch.zeros(dh) if b_K is None else b_K
    return torch.cat([W_Q, bq[None]], 0), torch.cat([W_K, bk[None]], 0), False


def ov_matrix(model: nn.Module, layer: int, head: int, fold_ln: bool = False) -> torch.Tensor:
    """The head's OV matrix ``W_V W_O [d, d]``: the head writes ``x_j @ OV`` (times attention).

    Source: ``decomposition.py`` of the authors' tracer ``gaabrielfranco/accpp-tracer`` (OV
    singular vectors); not part of the paper's SAD test.

    ``fold_ln=True`` folds the pre-attention norm's gain into ``W_V`` (centred for LayerNorm).

    Raises:
        TypeError / ValueError: as :func:`head_factors`.
    """
    wv, wo = ov_factors(model, layer, head, fold_ln)
    return wv @ wo


def ov_svd(
    model: nn.Module, layer: int, head: int, fold_ln: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin SVD of the OV circuit, ``W_V W_O = U diag(S) Vh`` (rank <= ``d_head``).

    Source: ``decomposition.py`` of ``gaabrielfranco/accpp-tracer`` (OV singular vectors); the thin
    SVD from the factors is engineering.

    Row ``u_k`` is an input (read) direction of the source token, ``vh_k`` the output (write)
    direction into the residual stream; computed from the factors (QR + ``d_head x d_head`` SVD).

    Returns:
        ``U [d, d_head]``, ``S [d_head]`` (descending), ``Vh [d_head, d]``.
    """
    wv, wo = ov_factors(model, layer, head, fold_ln)
    return factored_svd(wv.float(), wo.T.float())


def ov_factors(
    model: nn.Module, layer: int, head: int, fold_ln: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W_V [d, d_head], W_O [d_head, d])`` of one head (row-vector convention).

    Source: engineering (HF weight layouts), not in the paper.
    """
    if not isinstance(fold_ln, bool):
        raise TypeError(f"fold_ln must be bool, got {type(fold_ln).__name__}")
    wv, wo = _raw_ov_factors(model, layer, head)
    if fold_ln:
        name = _raw_head_factors(model, layer, head).input_module
        zero = wv.new_zeros(1, wv.shape[1], dtype=torch.float32)
        wv = fold_norm(model, name, torch.cat([wv.float(), zero], 0))[:-1]
    return wv, wo


def _raw_ov_factors(model: nn.Module, layer: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
    kind, blk, _ = _check_index(model, layer, head)
    cfg = model.config
    if kind == "gpt2":
        d = cfg.n_embd
        dh = d // cfg.n_head
        w = blk.attn.c_attn.weight.detach()
        wv = w[:, 2 * d + head * dh : 2 * d + (head + 1) * dh]  # [d, dh]
        wo = blk.attn.c_proj.weight.detach()[head * dh : (head + 1) * dh]  # [dh, d]
        return wv, wo
    if kind == "neox":
        dh = cfg.hidden_size // cfg.num_attention_heads
        w = blk.attention.query_key_value.weight.detach()
        wv = w[head * 3 * dh + 2 * dh : (head + 1) * 3 * dh].T  # [d, dh]
        wo = blk.attention.dense.weight.detach()[:, head * dh : (head + 1) * dh].T  # [dh, d]
        return wv, wo
    attn = blk.self_attn
    n_heads = cfg.num_attention_heads
    n_kv = getattr(cfg, "num_key_value_heads", None) or n_heads
    dh = getattr(attn, "head_dim", None) or cfg.hidden_size // n_heads
    kv = head // (n_heads // n_kv)
    wv = attn.v_proj.weight.detach()[kv * dh : (kv + 1) * dh].T  # [d, dh]
    wo = attn.o_proj.weight.detach()[:, head * dh : (head + 1) * dh].T  # [dh, d]
    return wv, wo


def factored_svd(
    A: torch.Tensor, B: torch.Tensor, core: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thin SVD of ``A core B^T`` without forming the ``[n, n]`` product (rank <= ``d_head``).

    Source: engineering (thin SVD from the factors, exact), not in the paper.

    Args:
        A, B: ``[n, k]`` factors; core: optional ``[..., k, k]`` (e.g. a batch of RoPE cores).

    Returns:
        ``U [..., n, k]``, ``S [..., k]`` (descending), ``Vh [..., k, n]``.
    """
    if A.ndim != 2 or A.shape != B.shape:
        raise ValueError(f"A {tuple(A.shape)} and B {tuple(B.shape)} must be 2-D of equal shape")
    qa, ra = torch.linalg.qr(A.double())
    qb, rb = torch.linalg.qr(B.double())
    mid = ra @ rb.T if core is None else ra @ core.double() @ rb.T
    uc, s, vch = torch.linalg.svd(mid)
    return (qa @ uc).to(A.dtype), s.to(A.dtype), (vch @ qb.T).to(A.dtype)
