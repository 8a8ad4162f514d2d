"""The generic in-context lookup (induction) task on random token ids, and a warm-up on it.

Tiny causal LMs trained from scratch on a toy whose answer is copied from the context form the copy
circuit much faster on random tokens than on the toy's grammar; the epicache, webworld and weasel toys
warm their models up here first (our engineering for the CPU toys; no paper's method). Re-exported by
:mod:`common.tiny`.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from transformers import PreTrainedModel

from common.train_loop import train_steps

logger = logging.getLogger(__name__)


def induction_batch(
    rng: np.random.Generator, batch: int, n_ctx: int, lo: int, hi: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of the generic in-context lookup task on random token ids.

    A row is ``n_ctx`` random ids in ``[lo, hi)`` followed by ``n_ctx - 1`` query tokens, each a
    context token (at a shuffled position ``j < n_ctx - 1``); the target at query ``i`` is the
    context token right after the query's first occurrence, ``ctx[j + 1]`` (attention can pick only
    one occurrence when a token repeats). This is the induction-head task without any grammar.

    Returns:
        ``ids`` ``LongTensor[batch, 2 * n_ctx - 1]`` and ``targets`` ``LongTensor[batch, n_ctx - 1]``
        (the targets of the query positions ``n_ctx ... 2 * n_ctx - 2``).
    """
    if n_ctx < 2 or hi - lo < 2 or batch < 1:
        raise ValueError(
            f"need n_ctx >= 2, hi - lo >= 2 and batch >= 1; got n_ctx={n_ctx}, lo={lo}, hi={hi}, "
            f"batch={batch}"
        )
    ctx = rng.integers(lo, hi, size=(batch, n_ctx))
    perm = np.stack([rng.permutation(n_ctx - 1) for _ in range(batch)])
    queries = np.take_along_axis(ctx, perm, axis=1)
    first = np.array(
        [
            [int(np.flatnonzero(row[: n_ctx - 1] == q)[0]) for q in qs]
            for row, qs in zip(ctx, queries, strict=True)
        ]
    )
    targets = np.take_along_axis(ctx, first + 1, axis=1)
    return torch.from_numpy(np.concatenate([ctx, queries], 1)), torch.from_numpy(targets)


def induction_warmup(
    model: PreTrainedModel,
    lo: int,
    hi: int,
    steps: int = 800,
    batch: int = 32,
    n_ctx: int = 40,
    lr: float = 3e-3,
    seed: int = 0,
) -> dict[str, float]:
    """Pre-trains a random-init causal LM on :func:`induction_batch` (AdamW, clip 1.0), through
    :func:`common.train_loop.train_steps`.

    Tiny models trained from scratch on a toy whose answer must be copied from the context (a value
    after its key, a page title from the clicked link) tend to sit on a "copy any plausible token"
    plateau for thousands of steps: the toy's fixed grammar offers a class-level shortcut. The same
    models form the lookup (induction) circuit in a few hundred steps on random tokens, and then
    reuse it. Used by the epicache and webworld toys; the model is left in eval mode.

    Returns:
        ``{"induction_loss", "induction_acc"}``: exponential moving averages (0.9) at the end.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if not 0 <= lo < hi <= model.get_input_embeddings().num_embeddings:
        raise ValueError(
            f"need 0 <= lo < hi <= vocab size ({model.get_input_embeddings().num_embeddings}), "
            f"got lo={lo}, hi={hi}"
        )
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98))
    ema = {"loss": float("nan"), "acc": 0.0, "last_acc": 0.0}

    def loss_fn(_step: int) -> torch.Tensor:
        ids, targets = induction_batch(rng, batch, n_ctx, lo, hi)
        logits = model(input_ids=ids.to(model.device), use_cache=False).logits[:, n_ctx:]
        gold = targets.to(model.device)
        ema["last_acc"] = float((logits.argmax(-1) == gold).float().mean())
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), gold.reshape(-1)
        )

    def track(step: int, loss: float) -> None:
        ema["loss"] = loss if step == 0 else 0.9 * ema["loss"] + 0.1 * loss
        ema["acc"] = 0.9 * ema["acc"] + 0.1 * ema["last_acc"]
        if step % 100 == 0:
            logger.info(
                "induction warm-up step %d loss %.3f acc %.3f", step, ema["loss"], ema["acc"]
            )

    train_steps(
        model,
        loss_fn,
        steps,
        optimizer=opt,
        grad_clip=1.0,
        desc="induction warm-up",
        callback=track,
    )
    model.eval()
    return {"induction_loss": ema["loss"], "induction_acc": ema["acc"]}
