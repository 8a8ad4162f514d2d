"""Static baselines (the paper's static RepE-style baselines; official ``salo/train.py::train_repe``): last-token probe, mean-pooled MLP, RepE direction, the LM's refusal."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from methods.salo.volume import _per_prompt, build_chat


def _last_valid(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """State of the last valid token per row: ``[B, L, T, D] -> [B, L, D]``."""
    if not mask.any(dim=1).all():
        raise ValueError("every mask row needs at least one valid token (all-zero row)")
    idx = mask.long().cumsum(dim=1).argmax(dim=1)  # last True position: [B]
    return x[torch.arange(x.shape[0]), :, idx]  # [B, L, D]


def _mask_or_ones(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if x.ndim != 4:
        raise ValueError(f"x must be [B, L, T, D], got shape {tuple(x.shape)}")
    if mask is None:
        return torch.ones(x.shape[0], x.shape[2], dtype=torch.bool)
    if mask.shape != (x.shape[0], x.shape[2]):
        raise ValueError(f"mask must be [B, T], got {tuple(mask.shape)} for x {tuple(x.shape)}")
    return mask.bool()


class LastTokenProbe(nn.Module):
    """BatchNorm1d + Linear on the last valid token of the window's last layer (repo linear probe).

    Official ``salo/model.py::linearProbe``, fed as in ``salo/train.py::train_probe``.
    """

    def __init__(self, hidden_dim: int) -> None:
        super().__init__()
        if hidden_dim <= 0:
            raise ValueError(f"hidden_dim must be > 0, got {hidden_dim}")
        self.config = dict(hidden_dim=hidden_dim)
        self.hidden_dim = hidden_dim
        self.norm = nn.BatchNorm1d(hidden_dim)
        self.head = nn.Linear(hidden_dim, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``[B]`` from ``x`` ``[B, L, T, D]``."""
        mask = _mask_or_ones(x, mask)
        if x.shape[-1] != self.hidden_dim:
            raise ValueError(f"x hidden size {x.shape[-1]} != probe hidden_dim {self.hidden_dim}")
        h = _last_valid(x.float(), mask)[:, -1]  # [B, D]
        return self.head(self.norm(h)).squeeze(-1)


class MeanPoolMLP(nn.Module):
    """Sequence-level pooled MLP (repo baseline): masked token mean per layer, flattened, 512-ReLU-1.

    ``x`` ``[B, L, T, D]`` -> mean over the valid tokens -> ``[B, L·D]`` -> Linear(L·D, hidden) -> ReLU
    -> Linear(hidden, 1). The mean divides by the real token count (the official mean divides by the padded length).

    Args:
        hidden_dim: the LLM hidden size ``D``.
        n_layers: the window length ``L_w`` (the flattened input is ``L_w · D``).
        mlp_dim: width of the hidden layer (repo: 512).

    Raises:
        ValueError: on non-positive sizes.
    """

    def __init__(self, hidden_dim: int, n_layers: int, mlp_dim: int = 512) -> None:
        super().__init__()
        if hidden_dim <= 0 or n_layers <= 0 or mlp_dim <= 0:
            raise ValueError(
                f"hidden_dim, n_layers, mlp_dim must be > 0, got {hidden_dim}, {n_layers}, {mlp_dim}"
            )
        self.config = dict(hidden_dim=hidden_dim, n_layers=n_layers, mlp_dim=mlp_dim)
        self.hidden_dim, self.n_layers = hidden_dim, n_layers
        self.net = nn.Sequential(
            nn.Linear(n_layers * hidden_dim, mlp_dim), nn.ReLU(), nn.Linear(mlp_dim, 1)
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits ``[B]`` from ``x`` ``[B, L, T, D]``."""
        mask = _mask_or_ones(x, mask)
        if x.shape[-1] != self.hidden_dim or x.shape[1] != self.n_layers:
            raise ValueError(
                f"x is [B, {x.shape[1]}, T, {x.shape[-1]}], probe expects L={self.n_layers}, "
                f"D={self.hidden_dim}"
            )
        if not mask.any(dim=1).all():
            raise ValueError("every mask row needs at least one valid token (all-zero row)")
        m = mask[:, None, :, None].to(x.device, torch.float32)  # [B, 1, T, 1]
        pooled = (x.float() * m).sum(dim=2) / m.sum(dim=2)  # [B, L, D]
        return self.net(pooled.flatten(1)).squeeze(-1)


class RepEDirection:
    """Static RepE-style refusal direction ``d = (μ_h − μ_b)/‖μ_h − μ_b‖`` (the paper's static RepE-style baselines; official ``salo/train.py::train_repe``).

    ``mode="roi_mean"`` pools by the mean over valid tokens then layers; ``"roi_last_token"`` takes the last
    valid token averaged over the window's layers. The score is ``(pool(x) − μ_b)·d``.
    """

    def __init__(self, mode: str = "roi_mean") -> None:
        if mode not in ("roi_mean", "roi_last_token"):
            raise ValueError(f"mode must be 'roi_mean' or 'roi_last_token', got {mode!r}")
        self.mode = mode
        self.direction: torch.Tensor | None = None
        self.mu_benign: torch.Tensor | None = None

    def pool(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Pooled vectors ``[B, D]`` (masked: the mean divides by the real token count)."""
        mask = _mask_or_ones(x, mask)
        x = x.float()
        if self.mode == "roi_last_token":
            return _last_valid(x, mask).mean(dim=1)
        if not mask.any(dim=1).all():
            raise ValueError("every mask row needs at least one valid token (all-zero row)")
        m = mask[:, None, :, None].to(x)  # [B, 1, T, 1]
        return ((x * m).sum(dim=2) / m.sum(dim=2)).mean(dim=1)  # [B, D]

    def fit(
        self, x: torch.Tensor, mask: torch.Tensor | None, labels: torch.Tensor
    ) -> RepEDirection:
        """Fits the class means; ``labels`` 1 = harmful.

        Raises:
            ValueError: if ``labels`` does not hold both classes or mismatches ``x``.
        """
        y = torch.as_tensor(labels).long().flatten()
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"labels has {y.shape[0]} rows, x has {x.shape[0]}")
        if not ((y == 1).any() and (y == 0).any()):
            raise ValueError("labels must contain both classes (0 benign, 1 harmful)")
        p = self.pool(x, mask)
        mu_h, mu_b = p[y == 1].mean(0), p[y == 0].mean(0)
        diff = mu_h - mu_b
        self.direction = diff / diff.norm().clamp_min(1e-12)
        self.mu_benign = mu_b
        return self

    def score(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Projection scores ``[B]``."""
        if self.direction is None:
            raise ValueError("RepEDirection.score called before fit")
        return (self.pool(x, mask) - self.mu_benign) @ self.direction


@torch.no_grad()
def refusal_score(
    model: nn.Module,
    tokenizer,
    prompts: Sequence[str],
    refusal_token_ids: Sequence[int],
    *,
    suffix: str | None = None,
    prefill: str | None = None,
    batch_size: int = 32,
) -> torch.Tensor:
    """The LM's own terminal refusal signal: ``log Σ_r p(r | prompt)`` at the last position ``[n]``.

    Our inference of the abstract's "terminal-state" baseline (not in the official code).

    ``refusal_token_ids`` are the first tokens of the model's refusals ("I'm sorry", "I cannot").

    Raises:
        ValueError: on empty prompts or refusal ids.
    """
    if len(prompts) == 0:
        raise ValueError("prompts must not be empty")
    if len(refusal_token_ids) == 0:
        raise ValueError("refusal_token_ids must not be empty")
    sfx, pre = (
        _per_prompt(suffix, len(prompts), "suffix"),
        _per_prompt(prefill, len(prompts), "prefill"),
    )
    ids = [
        build_chat(tokenizer, p, suffix=s, prefill=f)
        for p, s, f in zip(prompts, sfx, pre, strict=True)
    ]
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rid = torch.tensor(list(refusal_token_ids), device=device)
    out = []
    for b0 in range(0, len(ids), batch_size):
        chunk = ids[b0 : b0 + batch_size]
        t = max(len(r) for r in chunk)
        input_ids = torch.full((len(chunk), t), pad, dtype=torch.long)
        attn = torch.zeros(len(chunk), t, dtype=torch.long)
        for j, r in enumerate(chunk):
            input_ids[j, : len(r)] = torch.tensor(r)
            attn[j, : len(r)] = 1
        logits = model(input_ids=input_ids.to(device), attention_mask=attn.to(device)).logits
        last = attn.sum(1).to(device) - 1
        logp = logits[torch.arange(len(chunk), device=device), last].float().log_softmax(-1)
        out.append(logp[:, rid].logsumexp(-1).cpu())
    return torch.cat(out)
