"""Latent activation volumes (paper §4.1): stacked residual states over a layer window × all tokens.

``hidden_states[0]`` of an HF causal LM is the embedding output and ``hidden_states[i]`` the output of
decoder block ``i - 1``; the last entry (index ``num_hidden_layers``) has the final norm applied, so a
window may only contain it when ``allow_final_norm=True``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def check_window(window: Sequence[int], num_hidden_layers: int, allow_final_norm: bool = False):
    """Validates an end-exclusive layer window ``(l_s, l_e)`` into ``output_hidden_states``.

    Engineering: transformers' ``hidden_states`` indexing; windows as in official ``configs.py``.

    Raises:
        ValueError: if the window is malformed, empty, out of range, or holds the final-norm index.
    """
    if len(window) != 2 or not all(isinstance(v, int) for v in window):
        raise ValueError(f"window must be two ints (start, end), got {window!r}")
    start, end = window
    if end <= start:
        raise ValueError(f"window must be non-empty (end > start), got {window!r}")
    top = num_hidden_layers + 1 if allow_final_norm else num_hidden_layers
    if start < 0 or end > top:
        hint = "" if allow_final_norm else " (index num_hidden_layers carries the final norm; pass "
        hint += "" if allow_final_norm else "allow_final_norm=True to include it)"
        raise ValueError(f"window must lie in [0, {top}), got {tuple(window)}{hint}")
    return int(start), int(end)


def _per_prompt(value, n: int, name: str) -> list:
    """A single injection (or None) for all prompts, or one per prompt."""
    if value is None or isinstance(value, str):
        return [value] * n
    value = list(value)
    if len(value) != n:
        raise ValueError(f"{name} must be a string or one entry per prompt ({n}), got {len(value)}")
    return value


def build_chat(
    tokenizer,
    prompt: str,
    suffix: str | None = None,
    prefill: str | None = None,
    suffix_sep: str = "",
) -> list[int]:
    """Token ids of a one-turn chat prompt with an optional attack injection (paper §4.1).

    A GCG-style ``suffix`` is appended to the user content as ``prompt + suffix_sep + suffix``; the
    default ``suffix_sep=""`` is the official concatenation (``eval_attacks.py`` of Exbilar/SALO:
    ``row["prompt"] + injection``), so an injection carries its own leading space when it has one
    (GCG suffixes are optimised for exact tokens). ``suffix_sep=" "`` is the old join of this package.
    A ``prefill`` is appended after the assistant header (forced decoding). The templated text is
    tokenised with ``add_special_tokens=False``.

    Raises:
        ValueError: on an empty prompt or a tokenizer without a chat template.
        TypeError: when ``suffix_sep`` is not a string.
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"prompt must be a non-empty string, got {prompt!r}")
    if not isinstance(suffix_sep, str):
        raise TypeError(f"suffix_sep must be a string, got {type(suffix_sep).__name__}")
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("tokenizer must have a chat_template (apply_chat_template is used)")
    content = prompt if not suffix else prompt + suffix_sep + suffix
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    if prefill:
        text = text + prefill
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _limit_lengths(ids: list[list[int]], limit: int | None, truncate: bool) -> list[list[int]]:
    """Raises on a prompt longer than ``limit`` tokens, or cuts it when ``truncate``."""
    for i, row in enumerate(ids):
        if limit is not None and len(row) > limit:
            if not truncate:
                raise ValueError(
                    f"prompt {i} has {len(row)} tokens > max_length {limit}; pass truncate=True"
                )
            ids[i] = row[:limit]
    return ids


def _right_pad(chunk: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids [b, t], attention_mask [b, t])``, right-padded with ``pad``."""
    t = max(len(r) for r in chunk)
    input_ids = torch.full((len(chunk), t), pad, dtype=torch.long)
    attn = torch.zeros(len(chunk), t, dtype=torch.long)
    for j, r in enumerate(chunk):  # right padding
        input_ids[j, : len(r)] = torch.tensor(r)
        attn[j, : len(r)] = 1
    return input_ids, attn


@torch.no_grad()
def collect_volumes(
    model: nn.Module,
    tokenizer,
    prompts: Sequence[str],
    layers: Sequence[int],
    *,
    suffix: str | None = None,
    prefill: str | None = None,
    batch_size: int = 16,
    max_length: int | None = None,
    truncate: bool = False,
    allow_final_norm: bool = False,
    dtype: torch.dtype = torch.float32,
    suffix_sep: str = "",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Volumes ``X = stack(hidden_states[l_s:l_e])`` for many prompts, right-padded and masked.

    Each prompt is templated with :func:`build_chat`, batches are right-padded (causal attention leaves
    the valid positions unchanged), and padded positions are zeroed so they carry no signal.

    Args:
        model: an HF causal LM (``output_hidden_states=True`` is used, no hand-written hooks).
        tokenizer: its tokenizer, with a chat template.
        prompts: user prompts.
        layers: end-exclusive window ``(l_s, l_e)`` into ``hidden_states``.
        suffix / prefill: an attack injection for every prompt, or a list with one per prompt.
        suffix_sep: the text between prompt and suffix (default ``""``: official concatenation).
        batch_size: prompts per forward pass.
        max_length: the longest allowed prompt (default: the model's ``max_position_embeddings``).
        truncate: cut longer prompts to ``max_length`` instead of raising.
        allow_final_norm: let the window include index ``num_hidden_layers``.
        dtype: dtype of the returned volumes (activations are checked for finiteness first).

    Returns:
        ``(X, mask)``: ``X`` is ``[n, L_w, T_max, D]`` with zeros at padding, ``mask`` is ``[n, T_max]``
        bool.

    Raises:
        ValueError: on empty prompts, a bad window, an over-long prompt (unless ``truncate``), or
            non-finite activations.
    """
    if len(prompts) == 0:
        raise ValueError("prompts must not be empty")
    n_layers = model.config.num_hidden_layers
    start, end = check_window(layers, n_layers, allow_final_norm)
    limit = max_length or getattr(model.config, "max_position_embeddings", None)
    sfx, pre = (
        _per_prompt(suffix, len(prompts), "suffix"),
        _per_prompt(prefill, len(prompts), "prefill"),
    )
    ids = _limit_lengths(
        [
            build_chat(tokenizer, p, suffix=s, prefill=f, suffix_sep=suffix_sep)
            for p, s, f in zip(prompts, sfx, pre, strict=True)
        ],
        limit,
        truncate,
    )
    device = next(model.parameters()).device
    t_max = max(len(r) for r in ids)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out_x = torch.zeros(len(ids), end - start, t_max, model.config.hidden_size, dtype=dtype)
    out_m = torch.zeros(len(ids), t_max, dtype=torch.bool)
    for b0 in range(0, len(ids), batch_size):
        chunk = ids[b0 : b0 + batch_size]
        input_ids, attn = _right_pad(chunk, pad)
        t = input_ids.shape[1]
        hs = model(
            input_ids=input_ids.to(device),
            attention_mask=attn.to(device),
            output_hidden_states=True,
        ).hidden_states  # (L+1) x [b, t, D]
        vol = torch.stack(hs[start:end], dim=1).float()  # [b, L_w, t, D]
        if not torch.isfinite(
            vol[attn.bool().to(device)[:, None].expand(-1, vol.shape[1], -1)]
        ).all():
            raise ValueError("non-finite activations (fp16 overflow?); load the model in bf16/fp32")
        vol = vol * attn.to(vol)[:, None, :, None]  # zero the padding
        out_x[b0 : b0 + len(chunk), :, :t] = vol.cpu().to(dtype)
        out_m[b0 : b0 + len(chunk), :t] = attn.bool()
    return out_x, out_m


def extract_volume(model, tokenizer, prompt: str, *, window, suffix=None, prefill=None, **kw):
    """One prompt's volume ``[L_w, T, D]`` without padding (see :func:`collect_volumes`).

    The latent activation volume of paper §4.1, as official ``salo/train.py::predict`` builds it.
    """
    x, _ = collect_volumes(model, tokenizer, [prompt], window, suffix=suffix, prefill=prefill, **kw)
    return x[0]


def pad_collate(volumes: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pads ``[L, T_i, D]`` volumes with zeros into ``([B, L, T_max, D], mask [B, T_max])``.

    Official ``salo/train.py::padding_collate_fn`` (without the labels).

    Raises:
        ValueError: on an empty list or volumes with different ``L`` or ``D``.
    """
    if len(volumes) == 0:
        raise ValueError("volumes must not be empty")
    n_l, _, d = volumes[0].shape
    if any(v.shape[0] != n_l or v.shape[2] != d for v in volumes):
        raise ValueError("volumes must share the layer count and hidden size")
    t_max = max(v.shape[1] for v in volumes)
    x = volumes[0].new_zeros(len(volumes), n_l, t_max, d)
    mask = torch.zeros(len(volumes), t_max, dtype=torch.bool)
    for i, v in enumerate(volumes):
        x[i, :, : v.shape[1]] = v
        mask[i, : v.shape[1]] = True
    return x, mask
