"""Toy D: does sparse attention decomposition emerge with training?

A one-layer GPT-2 (built from a config, random init) learns a "find the matching key" task: positions
``0..T-2`` hold tokens of distinct classes (``class = token % n_classes``), the last position holds a
query token whose class matches exactly one earlier position ``j*``, and the model must output the token
at ``j*``. The head that solves it attends from the last position to ``j*``. We measure the Rolls-Tovee
sparseness and ``N_recon`` of the relative contributions of edge ``(T-1, j*)`` at initialisation and
after training, in the singular basis and in a random-rotation basis (the control).
"""

from __future__ import annotations

import torch
from transformers import GPT2LMHeadModel

from common.tiny import tiny_causal_lm
from common.train_loop import train_steps
from methods.sv_features.config import MatchTaskConfig
from methods.sv_features.sad import sparse_attention_decomposition


def sample_match_batch(
    cfg: MatchTaskConfig, batch: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids [B, T], target token [B], matching position j* [B])``."""
    C, K, T = cfg.n_classes, cfg.tokens_per_class, cfg.seq_len
    classes = torch.stack([torch.randperm(C, generator=generator)[: T - 1] for _ in range(batch)])
    member = torch.randint(0, K, (batch, T - 1), generator=generator)
    ctx = member * C + classes  # token id, class = id % C
    jstar = torch.randint(0, T - 1, (batch,), generator=generator)
    q_member = torch.randint(0, K, (batch,), generator=generator)
    query = q_member * C + classes[torch.arange(batch), jstar]
    ids = torch.cat([ctx, query[:, None]], 1)
    return ids, ctx[torch.arange(batch), jstar], jstar


def build_model(cfg: MatchTaskConfig) -> GPT2LMHeadModel:
    """One-layer GPT-2 (biases on, no dropout) with vocabulary ``n_classes * tokens_per_class``, in
    train mode; the global RNG continues from the seeded init."""
    model, _ = tiny_causal_lm(
        "gpt2",
        hidden_size=cfg.d_model,
        num_hidden_layers=1,
        num_attention_heads=cfg.n_heads,
        max_position_embeddings=cfg.seq_len,
        seed=cfg.seed,
        vocab_size=cfg.n_classes * cfg.tokens_per_class,
        fork_rng=False,
        record=False,
        train=True,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return model


def measure(
    model: GPT2LMHeadModel, cfg: MatchTaskConfig, seed: int, dists: dict | None = None
) -> dict[str, float]:
    """Accuracy and SAD statistics of edge ``(T-1, j*)`` for the head attending most to ``j*``.

    With ``dists``, the per-edge sparseness values are stored there under ``"sparseness"`` and
    ``"sparseness_control"`` (for plots).
    """
    g = torch.Generator().manual_seed(seed)
    ids, tgt, jstar = sample_match_batch(cfg, cfg.n_eval, g)
    model.eval()
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, -1]
    acc = float((logits.argmax(-1) == tgt).float().mean())
    T = cfg.seq_len
    best = None
    for h in range(cfg.n_heads):
        res = sparse_attention_decomposition(
            model, ids, 0, h, firing_thresh=0.0, exclude_first=False, tau=cfg.tau, seed=seed
        )
        sel = (res.edges[:, 1] == T - 1) & (res.edges[:, 2] == jstar[res.edges[:, 0]])
        p = torch.softmax(res.all_logits[:, T - 1] * res.scale, -1)[torch.arange(len(ids)), jstar]
        if best is None or p.mean() > best[0]:
            best = (float(p.mean()), h, res, sel)
    attn, h, res, sel = best
    rel = res.relative[sel]
    positive = res.rel_logits[sel] > 0
    if dists is not None:
        dists["sparseness"] = res.sparseness[sel].tolist()
        dists["sparseness_control"] = res.sparseness_control[sel].tolist()
    return {
        "accuracy": acc,
        "attn_to_match": attn,
        "head": float(h),
        "sparseness": float(res.sparseness[sel].median()),
        "sparseness_control": float(res.sparseness_control[sel].median()),
        "n_recon": float(res.n_recon[sel][positive].float().median()) if positive.any() else 0.0,
        "n_recon_control": float(res.n_recon_control[sel][positive].float().median())
        if positive.any()
        else 0.0,
        "rank": float(rel.shape[1]),
    }


def run_match_toy(
    cfg: MatchTaskConfig,
    history: list | None = None,
    measure_every: int = 0,
    dists: dict | None = None,
) -> dict[str, dict[str, float]]:
    """Trains the one-layer model and returns ``{"init": ..., "trained": ...}`` measurements.

    Args:
        cfg: task and model sizes.
        history: if given, receives ``{"step", **measure(...)}`` every ``measure_every`` steps (the
            analogue of the paper's S(v)-over-checkpoints curve).
        measure_every: steps between history rows (0 = init and end only).
        dists: if given, receives per-edge sparseness lists under ``"init"`` and ``"trained"``.
    """
    model = build_model(cfg)
    d0: dict | None = {} if dists is not None else None
    before = measure(model, cfg, cfg.seed + 100, d0)
    if history is not None:
        history.append({"step": 0.0, **before})
    g = torch.Generator().manual_seed(cfg.seed + 1)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)

    def loss_fn(_i: int) -> torch.Tensor:
        ids, tgt, _ = sample_match_batch(cfg, cfg.batch, g)
        return torch.nn.functional.cross_entropy(model(input_ids=ids).logits[:, -1], tgt)

    def record(i: int, _loss: float) -> None:
        step = i + 1  # steps counted from 1, as in the history rows
        if history is not None and measure_every and step % measure_every == 0 and step < cfg.steps:
            history.append({"step": float(step), **measure(model, cfg, cfg.seed + 100)})
            model.train()

    train_steps(model, loss_fn, cfg.steps, optimizer=opt, desc="sv_features SAD", callback=record)
    d1: dict | None = {} if dists is not None else None
    after = measure(model, cfg, cfg.seed + 100, d1)
    if history is not None:
        history.append({"step": float(cfg.steps), **after})
    if dists is not None:
        dists.update(init=d0, trained=d1)
    return {"init": before, "trained": after}
