"""Causal tracing of the refusal trajectory (paper §3.2, Fig. 1).

For each (decoder block ``l``, token ``i``) the benign twin is re-run with the block outputs of layers
``l − ⌊w/2⌋ .. l + ⌊w/2⌋`` at position ``i`` overwritten by those of the harmful run (an interchange
intervention), and the change in the refusal log-probability at the last position is recorded. Patching
shows *sufficiency*, not necessity (paper §7).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from methods.salo.volume import build_chat


def _blocks(model: nn.Module) -> nn.ModuleList:
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise TypeError(f"expected an HF decoder with .model.layers, got {type(model).__name__}")
    return layers


def _refusal_logprob(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return logits[:, -1].float().log_softmax(-1)[:, ids].logsumexp(-1)  # [B]


def _block_outputs(model: nn.Module, blocks, h_ids: torch.Tensor) -> list[torch.Tensor]:
    """The raw output ``[T, D]`` of every decoder block on the harmful prompt (the last hidden
    state carries the final norm, so the last block's output is captured by a hook)."""
    hs = model(input_ids=h_ids, output_hidden_states=True).hidden_states  # (L+1) x [1, T, D]
    harm_out = [hs[j + 1][0] for j in range(len(blocks))]  # output of block j
    raw = {}
    handle = blocks[-1].register_forward_hook(
        lambda _m, _i, out: raw.__setitem__("x", (out[0] if isinstance(out, tuple) else out)[0])
    )
    try:
        model(input_ids=h_ids)
    finally:
        handle.remove()
    harm_out[-1] = raw["x"]
    return harm_out


def _patched_logprob(model, blocks, patched, harm_out, batch: torch.Tensor, rid) -> torch.Tensor:
    """Refusal log-prob ``[T]`` of the benign batch with row ``r``'s token ``r`` patched from the
    harmful run in every block of ``patched`` (Meng et al. 2022 causal tracing, window of layers)."""
    t = batch.shape[1]
    handles = []
    for j in patched:

        def hook(_m, _i, out, j=j):
            x = out[0] if isinstance(out, tuple) else out
            x = x.clone()
            pos = torch.arange(t, device=x.device)
            x[pos, pos] = harm_out[j][pos].to(x)  # row r patches token r
            return (x, *out[1:]) if isinstance(out, tuple) else x

        handles.append(blocks[j].register_forward_hook(hook))
    try:
        return _refusal_logprob(model(input_ids=batch).logits, rid)  # [T]
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def causal_trace(
    model: nn.Module,
    tokenizer,
    harmful: str,
    benign: str,
    refusal_token_ids: Sequence[int],
    window: int = 3,
    normalize: bool = False,
) -> torch.Tensor:
    """Refusal efficacy map ``E[l, i]`` over decoder blocks × tokens for one minimal pair.

    ``E[l, i] = log p(refusal | benign, patched at (l±⌊w/2⌋, i)) − log p(refusal | benign)``; with
    ``normalize`` it is divided by the full effect ``log p(refusal | harmful) − log p(refusal | benign)``.

    Args:
        model: an HF causal LM with ``.model.layers``.
        tokenizer: its chat tokenizer; both prompts are templated with ``build_chat``.
        harmful / benign: the minimal pair (same token length after templating).
        refusal_token_ids: first tokens of the model's refusals.
        window: layers patched together (odd, ≥ 1; paper: 3).

    Returns:
        ``[num_hidden_layers, T]`` float tensor.

    Raises:
        ValueError: on different token lengths, an even/non-positive window or empty refusal ids.
    """
    if window < 1 or window % 2 == 0:
        raise ValueError(f"window must be a positive odd int, got {window}")
    if len(refusal_token_ids) == 0:
        raise ValueError("refusal_token_ids must not be empty")
    h_ids = torch.tensor([build_chat(tokenizer, harmful)])
    b_ids = torch.tensor([build_chat(tokenizer, benign)])
    if h_ids.shape != b_ids.shape:
        raise ValueError(
            f"harmful and benign must tokenize to the same length, got {h_ids.shape[1]} vs "
            f"{b_ids.shape[1]}"
        )
    device = next(model.parameters()).device
    h_ids, b_ids = h_ids.to(device), b_ids.to(device)
    rid = torch.tensor(list(refusal_token_ids), device=device)
    blocks = _blocks(model)
    n_layers, t = len(blocks), h_ids.shape[1]
    harm_out = _block_outputs(model, blocks, h_ids)
    harm_lp = _refusal_logprob(model(input_ids=h_ids).logits, rid)[0]
    base_lp = _refusal_logprob(model(input_ids=b_ids).logits, rid)[0]
    half = window // 2
    eff = torch.zeros(n_layers, t)
    batch = b_ids.expand(t, -1)  # one row per patched position
    for layer in range(n_layers):
        patched = range(max(0, layer - half), min(n_layers, layer + half + 1))
        lp = _patched_logprob(model, blocks, patched, harm_out, batch, rid)  # [T]
        eff[layer] = (lp - base_lp).cpu()
    if normalize:
        full = float(harm_lp - base_lp)
        if abs(full) < 1e-8:
            raise ValueError(
                "harmful and benign runs have the same refusal log-prob; cannot normalize"
            )
        eff = eff / full
    return eff
