"""LESS gradient features (the paper's
gradient representation; Xia et al. 2024; official ``representation/less/``): the
Rademacher projection, Adam-preconditioned candidate gradients and plain query gradients at the
warm-up checkpoints, combined across checkpoints with LR weights.

Shapes: N pool examples, M queries, P trainable parameters, k projection dim.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from common.train_loop import train_steps

from .representations import Row, _query_parts, _rows, _segments

logger = logging.getLogger(__name__)

GRAD_MODES: tuple[str, ...] = ("train", "eval")
FEATURE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def rademacher_projection(
    X: torch.Tensor, proj_dim: int, seed: int = 0, block: int = 4096
) -> torch.Tensor:
    """Johnson–Lindenstrauss projection ``X R / sqrt(k)`` with ``R ∈ {±1}^{P×k}`` (LESS, Xia et al. 2024).

    The gradient projection of the LESS baseline the paper compares against.

    ``R`` is generated block by block from ``seed`` and the block index, so it is never stored and
    the same ``(P, k, seed)`` always gives the same map; ``E⟨Rᵀx, Rᵀy⟩/k = ⟨x, y⟩``.

    Args:
        X: ``[n, P]``.
        proj_dim: ``k``.
        seed: projection seed.
        block: rows of ``R`` generated at once.

    Returns:
        ``[n, k]`` float32.
    """
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D [n, P], got shape {tuple(X.shape)}")
    if proj_dim < 1:
        raise ValueError(f"proj_dim must be >= 1, got {proj_dim}")
    X = X.float()
    out = torch.zeros(X.shape[0], proj_dim)
    for b, start in enumerate(range(0, X.shape[1], block)):
        g = torch.Generator().manual_seed(seed * 1_000_003 + b)
        n_rows = min(block, X.shape[1] - start)
        R = torch.randint(0, 2, (n_rows, proj_dim), generator=g).float() * 2 - 1  # [p, k]
        out += X[:, start : start + n_rows] @ R
    return out / proj_dim**0.5


@dataclass
class LESSCheckpoint:
    """One LoRA warm-up checkpoint: trainable parameters and their Adam moments, by name.

    Attributes:
        params: ``name -> value`` of every trainable parameter (the LoRA weights).
        exp_avg: ``name -> m_t``; None if the checkpoint has no optimizer state.
        exp_avg_sq: ``name -> v_t``.
        lr: the mean learning rate of the epoch ending here (its LR weight ``η̄_t``).
    """

    params: dict[str, torch.Tensor]
    exp_avg: dict[str, torch.Tensor] | None
    exp_avg_sq: dict[str, torch.Tensor] | None
    lr: float


def adam_direction(
    g: torch.Tensor,
    m: torch.Tensor,
    v: torch.Tensor,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
) -> torch.Tensor:
    """LESS's Adam-preconditioned gradient ``Γ = m' / sqrt(v' + ε)`` with one more Adam step.

    ``m' = β₁ m + (1 − β₁) g``, ``v' = β₂ v + (1 − β₂) g²`` (official
    ``compute_less_embeds.py::obtain_gradients_with_adam``; no bias correction).
    """
    m2 = betas[0] * m + (1 - betas[0]) * g
    v2 = betas[1] * v + (1 - betas[1]) * g * g
    return m2 / torch.sqrt(v2 + eps)


def special_prefix(tokenizer) -> list[int]:
    """The ids a tokenizer puts before a text with ``add_special_tokens=True`` (e.g. Llama's BOS).

    The official code tokenizes each whole example with the tokenizer's defaults
    (``common/data.py``), so a BOS-adding tokenizer starts every example with BOS; we tokenize by
    segment and prepend these ids instead.
    """
    probe = "a"
    plain = tokenizer(probe, add_special_tokens=False)["input_ids"]
    full = tokenizer(probe, add_special_tokens=True)["input_ids"]
    for k in range(len(full) - len(plain) + 1):
        if full[k : k + len(plain)] == plain:
            return list(full[:k])
    return []


def _supervised_ids(
    segments: Sequence[tuple[str, bool]],
    tokenizer,
    max_length: int,
    prefix: Sequence[int] = (),
) -> tuple[list[int], list[int]]:
    ids: list[int] = list(prefix)
    labels: list[int] = [-100] * len(prefix)
    for text, sup in segments:
        t = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += t
        labels += t if sup else [-100] * len(t)
    return ids[:max_length], labels[:max_length]


class LESSFeaturizer:
    """LESS gradient features at warm-up checkpoints (official ``representation/less/``).

    Candidates get the Adam-preconditioned per-example gradient of the LoRA parameters, queries the
    plain gradient; both are projected with ``rademacher_projection`` and L2-normalised per
    checkpoint. The similarity is ``Σ_t η̄_t cos(∇ℓ(q; θ_t), Γ(z; θ_t))`` with ``Σ_t η̄_t = 1``.

    Args:
        model: the model with LoRA adapters; its ``requires_grad`` parameters are the features.
        tokenizer: its tokenizer.
        ckpts: the warm-up checkpoints (parameter names must match the trainable ones).
        proj_dim: projection dimension ``k`` (paper: 8192).
        seed: projection seed (paper: 0); also seeds torch before each pass over the examples, so
            the dropout masks of ``grad_mode="train"`` are reproducible (official
            ``collect_grads`` calls ``torch.random.manual_seed(0)``).
        max_length: truncation in tokens.
        grad_mode: ``"train"`` (official ``compute_less_embeds.py::collect_grads``: the model in
            train mode, so the LoRA dropout of the warm-up config, 0.1, is active) or ``"eval"``
            (deterministic gradients without dropout).
        add_special_tokens: start every example with the tokenizer's special prefix (BOS for
            Llama), as the official tokenization does; False drops it.
        feature_dtype: dtype of the normalised projected features and of each checkpoint's cosine
            (accumulated over checkpoints in float32). None: the model's parameter dtype, as the
            official projector (bf16 at paper scale); ``"float32"`` keeps full precision.

    Raises:
        ValueError: on no checkpoints, a parameter name/shape mismatch, or ``proj_dim`` not below
            the gradient dimension.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        ckpts: Sequence[LESSCheckpoint],
        proj_dim: int = 8192,
        seed: int = 0,
        max_length: int = 2048,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        grad_mode: str = "train",
        add_special_tokens: bool = True,
        feature_dtype: str | None = None,
    ) -> None:
        if grad_mode not in GRAD_MODES:
            raise ValueError(f"grad_mode must be one of {GRAD_MODES}, got {grad_mode!r}")
        if feature_dtype is not None and feature_dtype not in FEATURE_DTYPES:
            raise ValueError(
                f"feature_dtype must be None or one of {sorted(FEATURE_DTYPES)}, got {feature_dtype!r}"
            )
        if not ckpts:
            raise ValueError("ckpts must hold at least one LESSCheckpoint")
        self.model, self.tokenizer, self.ckpts = model, tokenizer, list(ckpts)
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        shapes = {n: p.shape for n, p in model.named_parameters() if p.requires_grad}
        n_params = sum(p.numel() for p in shapes.values())
        if not self.names:
            raise ValueError("the model has no trainable parameters (attach LoRA adapters first)")
        if proj_dim >= n_params:
            raise ValueError(f"proj_dim={proj_dim} must be < the gradient dimension {n_params}")
        for t, c in enumerate(self.ckpts):
            for field_name in ("params", "exp_avg", "exp_avg_sq"):
                d = getattr(c, field_name)
                if d is None:
                    continue
                # The official code pairs optimizer state with parameters by order; match by name.
                bad = [n for n in self.names if n not in d or d[n].shape != shapes[n]]
                if bad:
                    raise ValueError(f"ckpts[{t}].{field_name} lacks or misshapes {bad[:3]}")
        self.proj_dim, self.seed, self.max_length = proj_dim, seed, max_length
        self.betas, self.eps = betas, eps
        self.grad_mode = grad_mode
        self.prefix = special_prefix(tokenizer) if add_special_tokens else []
        if feature_dtype is None:
            self.feature_dtype = next(p for p in model.parameters() if p.requires_grad).dtype
        else:
            self.feature_dtype = FEATURE_DTYPES[feature_dtype]

    @property
    def lr_weights(self) -> np.ndarray:
        w = np.array([c.lr for c in self.ckpts], dtype=np.float64)
        if not (w > 0).all():
            raise ValueError(f"checkpoint learning rates must be > 0, got {w}")
        return w / w.sum()

    def _load(self, ckpt: LESSCheckpoint) -> None:
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for n in self.names:
                params[n].copy_(ckpt.params[n])

    def example_gradient(self, ids: list[int], labels: list[int]) -> torch.Tensor:
        """Flat gradient ``[P]`` of the mean token loss of one example (names in model order)."""
        params = [p for n, p in self.model.named_parameters() if p.requires_grad]
        x = torch.tensor([ids])
        y = torch.tensor([labels])
        loss = self.model(input_ids=x, labels=y).loss
        grads = torch.autograd.grad(loss, params)
        return torch.cat([g.reshape(-1) for g in grads])

    def _features(self, items: list[tuple[list[int], list[int]]], adam: bool) -> list[torch.Tensor]:
        was_training = self.model.training
        self.model.train(self.grad_mode == "train")  # official: train mode, LoRA dropout on
        out = []
        try:
            for c in self.ckpts:
                self._load(c)
                torch.manual_seed(self.seed)  # reproducible dropout masks
                G = torch.stack([self.example_gradient(i, lab) for i, lab in items])  # [n, P]
                if adam:
                    if c.exp_avg is None or c.exp_avg_sq is None:
                        raise ValueError("Adam features need checkpoints with optimizer state")
                    m = torch.cat([c.exp_avg[n].reshape(-1) for n in self.names])  # [P]
                    v = torch.cat([c.exp_avg_sq[n].reshape(-1) for n in self.names])  # [P]
                    G = adam_direction(G, m, v, self.betas, self.eps)
                F = rademacher_projection(G, self.proj_dim, self.seed)  # [n, k]
                out.append(torch.nn.functional.normalize(F, dim=-1).to(self.feature_dtype))
        finally:
            self.model.train(was_training)
        return out

    def encode_pool(self, ds: Iterable[Row]) -> list[torch.Tensor]:
        """Per-checkpoint Adam features ``T × [N, k]``; rows with no supervised token raise."""
        eos = self.tokenizer.eos_token or ""
        items = []
        for r in _rows(ds):
            ids, labels = _supervised_ids(
                _segments(r["messages"], eos), self.tokenizer, self.max_length, self.prefix
            )
            if all(lab == -100 for lab in labels):
                raise ValueError("a pool example has no supervised token after truncation; drop it")
            items.append((ids, labels))
        return self._features(items, adam=True)

    def encode_queries(self, ds: Iterable[Row]) -> list[torch.Tensor]:
        """Per-checkpoint SGD features ``T × [M, k]`` (loss on the label only)."""
        eos = self.tokenizer.eos_token or ""
        items = []
        for r in _rows(ds):
            p, lab = _query_parts(r)
            items.append(
                _supervised_ids(
                    [(p, False), (lab + eos, True)], self.tokenizer, self.max_length, self.prefix
                )
            )
        return self._features(items, adam=False)

    def similarity(
        self, q_feats: Sequence[torch.Tensor], x_feats: Sequence[torch.Tensor]
    ) -> np.ndarray:
        """``S = Σ_t η̄_t Q_t X_tᵀ`` ``[M, N]`` from per-checkpoint normalised features.

        Each ``Q_t X_tᵀ`` is computed in the features' dtype and accumulated in float32, as the
        official ``compute_less_similarity.py`` does (``inf_matrix += avg_lr * out``).
        """
        if len(q_feats) != len(self.ckpts) or len(x_feats) != len(self.ckpts):
            raise ValueError(f"need one feature matrix per checkpoint ({len(self.ckpts)})")
        S = torch.zeros(len(q_feats[0]), len(x_feats[0]), dtype=torch.float32)  # [M, N]
        for w, q, x in zip(self.lr_weights, q_feats, x_feats):
            S += torch.tensor(w, dtype=torch.float32) * (q @ x.T)
        return S.numpy()


def less_warmup(
    model: nn.Module,
    tokenizer,
    rows: Sequence[Row],
    epochs: int = 4,
    lr: float = 2e-5,
    batch_size: int = 8,
    seed: int = 0,
    max_length: int = 2048,
) -> list[LESSCheckpoint]:
    """A small LoRA warm-up loop with AdamW that snapshots parameters and moments each epoch.

    Stands in for the paper's HF-Trainer warm-up (``save_strategy="epoch"``) at toy scale. The
    model's ``requires_grad`` parameters are trained; the LR is constant (its epoch mean is ``lr``).
    """
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    eos = tokenizer.eos_token or ""
    prefix = special_prefix(tokenizer)  # official training data carries the tokenizer's BOS too
    items = [
        _supervised_ids(_segments(r["messages"], eos), tokenizer, max_length, prefix) for r in rows
    ]
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW([p for _, p in named], lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    if not items:
        raise ValueError("rows must hold at least one training example")
    ckpts = []
    per_epoch = -(-len(items) // batch_size)  # batches per epoch (the last may be short)
    perm = [np.arange(0)]  # the current epoch's order, drawn at its first batch

    def loss_fn(step: int) -> torch.Tensor:
        b = step % per_epoch
        if b == 0:
            perm[0] = rng.permutation(len(items))
        batch = [items[i] for i in perm[0][b * batch_size : (b + 1) * batch_size]]
        T = max(len(i) for i, _ in batch)
        ids = torch.tensor([i + [pad] * (T - len(i)) for i, _ in batch])  # [b, T]
        lab = torch.tensor([y + [-100] * (T - len(y)) for _, y in batch])  # [b, T]
        att = torch.tensor([[1] * len(i) + [0] * (T - len(i)) for i, _ in batch])
        return model(input_ids=ids, attention_mask=att, labels=lab).loss

    def snapshot(step: int, _loss: float) -> None:  # parameters and AdamW moments per epoch
        if (step + 1) % per_epoch == 0:
            ckpts.append(
                LESSCheckpoint(
                    params={n: p.detach().clone() for n, p in named},
                    exp_avg={n: opt.state[p]["exp_avg"].clone() for n, p in named},
                    exp_avg_sq={n: opt.state[p]["exp_avg_sq"].clone() for n, p in named},
                    lr=lr,
                )
            )

    train_steps(
        model, loss_fn, epochs * per_epoch, optimizer=opt, desc="LESS warm-up", callback=snapshot
    )
    model.eval()
    return ckpts
