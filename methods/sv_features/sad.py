"""Sparse attention decomposition (SAD): per-singular-vector logit contributions.

Sources: the paper's SAD signature (known through third-party explainers; the full text was not
read) and the bookkeeping of ``utils.py`` / ``full_tracing_data_collection.py`` in the authors'
earlier ``gaabrielfranco/sparse-attention-decomposition``.

For a head with augmented QK matrix ``Omega~ = U diag(S) Vh`` (per relative offset for RoPE), the
pre-scaling logit from destination ``i`` to source ``j`` splits exactly as
``l_ij = sum_k a_k(i, j)``, ``a_k(i, j) = S_k (x~_i . u_k)(x~_j . v_k)``. Relative contributions
``a~_k(j) = a_k(i, j) - mean_{j' != j} a_k(i, j')`` sum to the relative logit ``l~_j``; their
Rolls-Tovee sparseness and the number of terms needed to reconstruct ``l~_j`` (``N_recon``) are the
paper's SAD signature. A random rotation of the singular bases is the control.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from common.activations import capture
from methods.sv_features.heads import (
    factored_svd,
    head_factors,
    normalise_without_affine,
    rope_rotations,
)
from methods.sv_features.sparseness import n_recon, relative_contributions, rolls_tovee

ROPE_BASES = ("per_offset", "fixed")


def random_rotation_basis(
    U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Haar-random rotation of the singular bases: ``U' = U R_U``, ``Sigma' = R_U^T S R_V``, ``Vh' = R_V^T Vh``.

    Source: the paper's random-rotation control (via explainers); the Haar construction is
    our inference.

    ``U' Sigma' Vh' = U diag(S) Vh`` exactly; only the basis changes ( control).
    Works on a leading batch axis (one rotation pair shared by the batch).
    """
    r = S.shape[-1]

    def haar() -> torch.Tensor:
        q, rr = torch.linalg.qr(torch.randn(r, r, generator=generator, dtype=torch.float64))
        return (q * torch.sign(torch.diagonal(rr))).to(U.dtype)

    RU, RV = haar(), haar()
    return U @ RU, RU.T @ torch.diag_embed(S) @ RV, RV.T @ Vh


def sv_contributions(
    x_dest: torch.Tensor, X_src: torch.Tensor, U: torch.Tensor, S: torch.Tensor, Vh: torch.Tensor
) -> torch.Tensor:
    """``a [m, r]`` with ``a[j, k] = S_k (x_dest . u_k)(x_src_j . v_k)``; rows sum to the logits.

    Source: the paper's SAD terms (via explainers), as ``utils.py`` of the authors' earlier
    ``gaabrielfranco/sparse-attention-decomposition`` (per-singular-vector contributions).

    ``S`` may also be a dense ``[r, r]`` core (rotated basis): then
    ``a[j, k] = (x_dest . u'_k) [Sigma' Vh' x_src_j]_k``.
    """
    q = x_dest @ U  # [r]
    k = X_src @ Vh.T  # [m, r]
    if S.ndim == 1:
        return q * S * k
    return q * (k @ S.T)


@dataclass
class SADResult:
    """Output of :func:`sparse_attention_decomposition` for one head.

    Per analysed edge ``e`` (batch ``b``, dest ``i``, source ``j``):

    Attributes:
        edges: ``[E, 3]`` (b, i, j).
        contributions: ``[E, r]`` raw ``a_k(i, j)`` (sum = ``logits``).
        relative: ``[E, r]`` ``a~_k(j)`` (sum = ``rel_logits``).
        logits: ``[E]`` pre-scaling logits; ``rel_logits``: ``[E]``; ``probs``: ``[E]`` attention.
        sparseness, n_recon: ``[E]`` on ``relative``.
        sparseness_control, n_recon_control: the same in a random-rotation basis (or None).
        all_logits: ``[B, T, T]`` pre-scaling logits of all pairs (masked entries -inf).
        scale: the model's logit scale.
    """

    edges: torch.Tensor
    contributions: torch.Tensor
    relative: torch.Tensor
    logits: torch.Tensor
    rel_logits: torch.Tensor
    probs: torch.Tensor
    sparseness: torch.Tensor
    n_recon: torch.Tensor
    sparseness_control: torch.Tensor | None
    n_recon_control: torch.Tensor | None
    all_logits: torch.Tensor
    scale: float
    extra: dict = field(default_factory=dict)


def head_inputs(
    model: nn.Module,
    input_ids: torch.Tensor,
    layer: int,
    attention_mask: torch.Tensor | None = None,
    fold_ln: bool = False,
) -> torch.Tensor:
    """``x~ [B, T, d+1]``: the head's normalised input with a constant 1 appended.

    Source: ``utils.py`` of ``gaabrielfranco/sparse-attention-decomposition`` (the authors' earlier
    paper's code; ``x~ = [ln1-normalised residual; 1]``).

    ``fold_ln=False``: the output of the model's pre-attention norm, ``LN(x)`` (gain and bias
    included). ``fold_ln=True``: the normalised stream without gain/bias, ``x̂`` (TransformerLens
    ``ln1.hook_normalized`` after ``fold_ln``), to pair with ``head_factors(..., fold_ln=True)``.
    """
    f = head_factors(model, layer, 0)
    what = "input" if fold_ln else "output"
    with torch.no_grad(), capture(model, [f.input_module], what=what) as store:
        model(input_ids=input_ids, attention_mask=attention_mask)
    x = store[f.input_module][0].float()
    if fold_ln:
        x = normalise_without_affine(model, f.input_module, x)
    return torch.cat([x, torch.ones(*x.shape[:-1], 1)], -1)


def decompose_pairs(
    X: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    rot: torch.Tensor | None = None,
    control_generator: torch.Generator | None = None,
    rope_basis: str = "per_offset",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """All-pairs contributions ``a [Bt, T(dest), T(src), r]`` for inputs ``X [Bt, T, d+1]``.

    Source: the paper's SAD terms and App. D (RoPE), via explainers; ``per_offset`` is our choice.

    Args:
        X: augmented inputs.
        A, B: augmented factors ``[d+1, d_head]``.
        rot: rotary matrices ``R_p [T, d_head, d_head]`` for positions ``0..T-1`` (None: no RoPE).
        control_generator: if given, also return contributions in a random-rotation basis (one
            rotation pair per offset, or one in total for ``rope_basis="fixed"``).
        rope_basis: rotary models only. ``"per_offset"``: the exact singular basis of
            ``Omega~(delta) = A R_0^T R_delta B^T``, one SVD per offset ``delta = j - i`` (``R_i^T R_j``
            depends only on ``delta``). ``"fixed"``: the authors' tracer (gaabrielfranco/accpp-tracer
            ``tracing.py::trace_firing``): one SVD of ``Omega = W_Q W_K^T`` for every pair, the rotation
            and the biases moved into the inputs, ``q_i = (x_i + c_Q) W_Q R_i^T W_Q^+``,
            ``k_j = (x_j + c_K) W_K R_j^T W_K^+`` with ``c = b W^+``; ``a_k = (q_i.u_k) s_k (k_j.v_k)``.
            Both sum to the same logits; their terms (and hence the sparse edges) differ.

    Returns:
        ``(a, a_control)``.
    """
    if rope_basis not in ROPE_BASES:
        raise ValueError(f"rope_basis must be one of {ROPE_BASES}, got {rope_basis!r}")
    if rot is not None and rope_basis == "fixed":
        return _decompose_fixed_basis(X, A, B, rot, control_generator)
    Bt, T, _ = X.shape
    r = min(A.shape)
    out = torch.zeros(Bt, T, T, r, dtype=X.dtype)
    ctl = torch.zeros_like(out) if control_generator is not None else None
    if rot is None:
        U, S, Vh = factored_svd(A, B)
        q = X @ U  # [Bt, T, r]
        k = X @ Vh.transpose(-1, -2)
        out = q[:, :, None, :] * S * k[:, None, :, :]
        if ctl is not None:
            U2, C2, Vh2 = random_rotation_basis(U, S, Vh, control_generator)
            q2 = X @ U2
            k2 = (X @ Vh2.T) @ C2.T
            ctl = q2[:, :, None, :] * k2[:, None, :, :]
        return out, ctl
    deltas = torch.arange(T)
    cores = (
        rot[0].T[None] @ rot[deltas]
    )  # R_0^T R_delta, delta = 0..T-1 (equal to R_i^T R_{i+delta})
    cores_neg = rot[deltas].transpose(-1, -2) @ rot[0][None]  # R_delta^T R_0: offset -delta
    for sign, cs in ((1, cores), (-1, cores_neg)):
        U, S, Vh = factored_svd(A, B, cs)  # batched over offsets
        for dlt in range(T):
            if sign == -1 and dlt == 0:
                continue
            off = sign * dlt
            i_idx = torch.arange(max(0, -off), min(T, T - off))
            j_idx = i_idx + off
            q = X[:, i_idx] @ U[dlt]  # [Bt, n, r]
            k = X[:, j_idx] @ Vh[dlt].T
            out[:, i_idx, j_idx] = q * S[dlt] * k
            if ctl is not None:
                U2, C2, Vh2 = random_rotation_basis(U[dlt], S[dlt], Vh[dlt], control_generator)
                ctl[:, i_idx, j_idx] = (X[:, i_idx] @ U2) * ((X[:, j_idx] @ Vh2.T) @ C2.T)
    return out, ctl


def _decompose_fixed_basis(
    X: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    rot: torch.Tensor,
    control_generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The accpp-tracer decomposition for rotary heads: one basis, rotations in the inputs."""
    T = X.shape[1]
    x = X[..., :-1]  # [Bt, T, d]
    W_Q, b_Q, W_K, b_K = A[:-1], A[-1], B[:-1], B[-1]
    pq, pk = torch.linalg.pinv(W_Q.double()).float(), torch.linalg.pinv(W_K.double()).float()
    c_q, c_k = b_Q @ pq, b_K @ pk  # [d]: bias offsets with c W = b
    R = rot[:T]  # [T, dh, dh]
    qh = torch.einsum("btd,ted->bte", (x + c_q) @ W_Q, R)  # rope(q_i) = R_i q_i, [Bt, T, dh]
    kh = torch.einsum("btd,ted->bte", (x + c_k) @ W_K, R)
    q_vec, k_vec = qh @ pq, kh @ pk  # back in d_model: (x + c) W R^T W^+, [Bt, T, d]
    U, S, Vh = factored_svd(W_Q, W_K)  # Omega = W_Q W_K^T, position independent
    qc, kc = q_vec @ U, k_vec @ Vh.T  # [Bt, T, r]
    out = qc[:, :, None, :] * S * kc[:, None, :, :]
    ctl = None
    if control_generator is not None:
        U2, C2, Vh2 = random_rotation_basis(U, S, Vh, control_generator)
        ctl = (q_vec @ U2)[:, :, None, :] * ((k_vec @ Vh2.T) @ C2.T)[:, None, :, :]
    return out, ctl


def _check_sad_inputs(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    firing_thresh: float,
    rope_basis: str,
) -> torch.Tensor:
    """Validates the arguments of :func:`sparse_attention_decomposition`; returns the mask."""
    if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2:
        raise ValueError("input_ids must be a [B, T] tensor")
    if not 0.0 <= firing_thresh <= 1.0:
        raise ValueError(f"firing_thresh must be in [0, 1], got {firing_thresh}")
    if input_ids.shape[1] < 2:
        raise ValueError("need at least 2 positions")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if attention_mask.shape != input_ids.shape:
        raise ValueError("attention_mask must have the shape of input_ids")
    if rope_basis not in ROPE_BASES:
        raise ValueError(f"rope_basis must be one of {ROPE_BASES}, got {rope_basis!r}")
    return attention_mask


def _firing_edges(
    logits: torch.Tensor,
    attention_mask: torch.Tensor,
    scale: float,
    firing_thresh: float,
    exclude_first: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The "firing" edges (attention probability ``>= firing_thresh`` and logit
    ``> 0``; the sink position 0 skipped when ``exclude_first``; destinations that see at least two
    positions). Returns ``(masked logits [B, T, T], probs [B, T, T], edges [E, 3], safe_vis)``."""
    T = logits.shape[-1]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    visible = causal[None] & attention_mask.bool()[:, None, :] & attention_mask.bool()[:, :, None]
    masked = logits.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(masked * scale, -1).nan_to_num(0.0)
    m = visible.sum(-1)  # [B, T]
    ok_dest = m >= 2
    fire = visible & (probs >= firing_thresh) & (logits > 0) & ok_dest[..., None]
    if exclude_first:
        fire[:, :, 0] = False
    edges = torch.nonzero(fire)  # [E, 3]
    vis_d = visible & ok_dest[..., None]
    safe_vis = vis_d | ~ok_dest[..., None]  # rows with m < 2 are never used; avoid raising on them
    return masked, probs, edges, safe_vis


def sparse_attention_decomposition(
    model: nn.Module,
    input_ids: torch.Tensor,
    layer: int,
    head: int,
    attention_mask: torch.Tensor | None = None,
    firing_thresh: float = 0.5,
    tau: float = 0.9,
    exclude_first: bool = True,
    control: bool = True,
    seed: int = 0,
    fold_ln: bool = False,
    rope_basis: str = "per_offset",
) -> SADResult:
    """SAD of one head on a batch of sequences (paper §3.3).

    Analyses "firing" edges: attention probability ``>= firing_thresh`` and pre-softmax logit ``> 0``,
    source ``j != 0`` if ``exclude_first`` (attention sink). Positions are ``0..T-1`` (right padding or
    no padding; padded tokens are excluded through ``attention_mask``). RoPE is handled exactly with
    one SVD per relative offset (``rope_basis="per_offset"``) or in the tracer's fixed basis.

    Args:
        model: GPT-2 or Llama-style HF causal LM (Qwen2 biases included).
        input_ids: ``[B, T]``.
        layer, head: the head.
        attention_mask: ``[B, T]`` 1 = token, 0 = padding.
        firing_thresh: minimum attention probability; use 0 to analyse every visible edge.
        tau: ``N_recon`` fraction.
        exclude_first: skip source position 0.
        control: also compute the random-rotation control.
        seed: seeds the control rotations.
        fold_ln: fold the pre-attention norm into the head's weights (TransformerLens default, as
            the authors' pipeline); changes the singular basis, not the logits.
        rope_basis: ``"per_offset"`` (exact SVD per relative offset) or ``"fixed"`` (the authors'
            tracer: one SVD of ``W_Q W_K^T``); see :func:`decompose_pairs`.

    Returns:
        :class:`SADResult`.

    Raises:
        ValueError: on bad shapes or thresholds; TypeError on unsupported models.
    """
    attention_mask = _check_sad_inputs(input_ids, attention_mask, firing_thresh, rope_basis)
    T = input_ids.shape[1]
    f = head_factors(model, layer, head, fold_ln=fold_ln)
    X = head_inputs(model, input_ids, layer, attention_mask, fold_ln=fold_ln)
    if not torch.isfinite(X).all():
        raise ValueError("non-finite activations at the head's input")
    rot = rope_rotations(model, torch.arange(T)) if f.rotary else None
    gen = torch.Generator().manual_seed(seed) if control else None
    a, a_ctl = decompose_pairs(X, f.A.float(), f.B.float(), rot, gen, rope_basis)
    logits = a.sum(-1)  # [B, T, T]
    masked, probs, edges, safe_vis = _firing_edges(
        logits, attention_mask, f.scale, firing_thresh, exclude_first
    )
    rel_all = relative_contributions(a, safe_vis)
    b, i, j = edges.unbind(-1) if len(edges) else (edges[:, 0], edges[:, 0], edges[:, 0])
    rel = rel_all[b, i, j]
    res = SADResult(
        edges=edges,
        contributions=a[b, i, j],
        relative=rel,
        logits=logits[b, i, j],
        rel_logits=rel.sum(-1),
        probs=probs[b, i, j],
        sparseness=rolls_tovee(rel, nan_on_zero=True) if len(edges) else torch.empty(0),
        n_recon=n_recon(rel, tau=tau) if len(edges) else torch.empty(0, dtype=torch.long),
        sparseness_control=None,
        n_recon_control=None,
        all_logits=masked,
        scale=f.scale,
    )
    if a_ctl is not None:
        relc = relative_contributions(a_ctl, safe_vis)[b, i, j]
        res.extra["relative_control"] = relc
        res.sparseness_control = (
            rolls_tovee(relc, nan_on_zero=True) if len(edges) else torch.empty(0)
        )
        res.n_recon_control = (
            n_recon(relc, tau=tau) if len(edges) else torch.empty(0, dtype=torch.long)
        )
    return res
