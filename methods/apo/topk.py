"""Reference Top-K ("safe manifold") extraction by teacher forcing (paper: the safe manifold
M_safe(s_t) = TopK(π_ref(·|s_t)), as restated second-hand).

Shape letters: B sequences, L prompt + completion length, T completion tokens (``logits_to_keep``),
V vocabulary, K Top-K size.
"""

from __future__ import annotations

import torch

__all__ = ["reference_topk", "topk_from_logits"]


def topk_from_logits(
    logits: torch.Tensor, k: int, temperature: float = 1.0, chunk_size: int = 512
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-K ids and log-probs of ``softmax(logits / temperature)``, chunked over positions.

    The log-softmax is taken in fp32 (bf16 flips near-ties in the Top-K; our choice).

    Args:
        logits: [B, T, V].
        k: Top-K size, 1 ≤ k < V.
        temperature: softmax temperature (> 0), the one used for the policy log-probs.
        chunk_size: positions per chunk (bounds the fp32 copy to B·chunk·V).

    Returns:
        ``(ids int64 [B, T, K], logp float32 [B, T, K])`` sorted by decreasing probability.
    """
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, T, V], got {tuple(logits.shape)}")
    vocab = logits.shape[-1]
    if not isinstance(k, int) or not 1 <= k < vocab:
        raise ValueError(f"k must be an int in [1, V) with V={vocab}, got {k!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    ids, logps = [], []
    for start in range(0, logits.shape[1], chunk_size):
        chunk = logits[:, start : start + chunk_size]  # [B, c, V]
        chunk = chunk.to(torch.promote_types(chunk.dtype, torch.float32)) / temperature
        lp = torch.log_softmax(chunk, dim=-1)
        top_lp, top_ids = lp.topk(k, dim=-1)  # [B, c, K]
        ids.append(top_ids)
        logps.append(top_lp)
    if not ids:
        b = logits.shape[0]
        return logits.new_zeros((b, 0, k), dtype=torch.long), logits.new_zeros((b, 0, k)).float()
    return torch.cat(ids, dim=1), torch.cat(logps, dim=1)


def _check_reference_args(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    gather_ids: torch.Tensor | None,
) -> None:
    """Shape checks of :func:`reference_topk`, naming the argument."""
    if input_ids.dim() != 2 or attention_mask.shape != input_ids.shape:
        raise ValueError(
            "input_ids and attention_mask must both be [B, L], got "
            f"{tuple(input_ids.shape)} and {tuple(attention_mask.shape)}"
        )
    if not isinstance(logits_to_keep, int) or not 1 <= logits_to_keep < input_ids.shape[1]:
        raise ValueError(
            f"logits_to_keep must be an int in [1, L) with L={input_ids.shape[1]}, "
            f"got {logits_to_keep!r}"
        )
    if gather_ids is not None and tuple(gather_ids.shape) != (input_ids.shape[0], logits_to_keep):
        raise ValueError(
            f"gather_ids must be [B, T]={[input_ids.shape[0], logits_to_keep]}, "
            f"got {tuple(gather_ids.shape)}"
        )


def _logps_at(
    logits: torch.Tensor, ids: torch.Tensor, temperature: float, chunk_size: int
) -> torch.Tensor:
    """fp32 log-softmax(logits / temperature) at ``ids`` [b, T], logsumexp chunked over T."""
    lse = torch.cat(
        [torch.logsumexp(c.float() / temperature, dim=-1) for c in logits.split(chunk_size, dim=1)],
        dim=1,
    )  # [b, T]
    return logits.gather(-1, ids.long()[..., None]).squeeze(-1).float() / temperature - lse


@torch.no_grad()
def reference_topk(
    ref_model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    logits_to_keep: int,
    k: int = 8,
    temperature: float = 1.0,
    chunk_size: int = 512,
    batch_size: int | None = None,
    expected_vocab_size: int | None = None,
    gather_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor] | tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Teacher-force prompt + completion through π_ref and keep its Top-K per completion position.

    Implements the paper's safe manifold M_safe(s_t) = TopK(π_ref(·|s_t)). Position t of the
    output predicts completion token t (the logits of the previous position), aligned with the
    completion mask used by the loss. Padded completion positions get id 0 and log-prob −inf, so
    their reference mass is exactly 0.

    Args:
        ref_model: a frozen causal LM (the initial policy; with PEFT, the model under
            ``disable_adapter()``).
        input_ids: prompt + completion ids, [B, L].
        attention_mask: [B, L].
        logits_to_keep: number of completion tokens T at the end of ``input_ids``.
        k: Top-K size (paper default 8).
        temperature: temperature applied to the reference logits (our default 1.0; the paper's is not known).
        chunk_size: positions per log-softmax/top-k chunk.
        batch_size: rows per forward pass (None: all at once).
        expected_vocab_size: the policy's vocabulary size; a mismatch raises.
        gather_ids: optional completion ids [B, T]; if given, their reference log-probs are
            returned too (the KL-on-Wrong baseline needs them), from the same forward pass.

    Returns:
        ``(topk_ids int64 [B, T, K], topk_logp_ref float32 [B, T, K])``, plus
        ``ref_logp_gathered float32 [B, T]`` when ``gather_ids`` is given.

    Raises:
        ValueError: on bad shapes, k or a vocabulary mismatch.
    """
    _check_reference_args(input_ids, attention_mask, logits_to_keep, gather_ids)
    bsz = batch_size or input_ids.shape[0]
    ids_out, lp_out, gathered = [], [], []
    for start in range(0, input_ids.shape[0], bsz):
        ids_b = input_ids[start : start + bsz]
        am_b = attention_mask[start : start + bsz]
        # one extra position: logits at position i predict token i + 1
        logits = ref_model(
            input_ids=ids_b, attention_mask=am_b, logits_to_keep=logits_to_keep + 1
        ).logits[:, :-1]  # [b, T, V]
        vocab = logits.shape[-1]
        if expected_vocab_size is not None and vocab != expected_vocab_size:
            raise ValueError(
                f"reference vocabulary size {vocab} != policy vocabulary size "
                f"{expected_vocab_size} (expected_vocab_size): Top-K ids would index the wrong "
                "tokens; use a reference with the policy's tokenizer"
            )
        top_ids, top_lp = topk_from_logits(logits, k, temperature, chunk_size)  # [b, T, K]
        if gather_ids is not None:
            g_ids = gather_ids[start : start + bsz]
            gathered.append(_logps_at(logits, g_ids, temperature, chunk_size))
        del logits
        pad = am_b[:, -logits_to_keep:] == 0  # [b, T]
        top_ids = top_ids.masked_fill(pad[..., None], 0)
        top_lp = top_lp.masked_fill(pad[..., None], float("-inf"))
        ids_out.append(top_ids)
        lp_out.append(top_lp)
    if gather_ids is not None:
        return torch.cat(ids_out), torch.cat(lp_out), torch.cat(gathered)
    return torch.cat(ids_out), torch.cat(lp_out)
