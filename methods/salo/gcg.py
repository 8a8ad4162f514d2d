"""A small Greedy Coordinate Gradient (GCG) suffix attack (Zou et al. 2023), optionally detector-aware.

Used to *generate* suffix attack sets on a local model (GCG is regenerated per model, as the official attack CSVs are per model; an
adaptive GCG adds ``λ · detector logit`` to the target loss). One step: the gradient of the loss with
respect to the one-hot suffix tokens gives, per position, the ``topk`` most promising replacements;
``n_candidates`` single-token swaps are drawn from them and evaluated exactly, and the best one is kept.
The suffix goes into the user turn exactly as :func:`methods.salo.volume.build_chat` places it
(``prompt + suffix``, the official concatenation), and the target follows the assistant header; the
returned ``suffix`` string starts with ``suffix_sep`` so that ``prompt + suffix`` is the optimised text.

This is a compact re-implementation for small models and tests; for 7-8B models ``nanogcg`` is faster.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from common.tracking import progress

logger = logging.getLogger(__name__)
_SLOT = "\x00SUFFIX\x00"


@dataclass
class GCGResult:
    """The best suffix found, its token ids, and the best objective after each step."""

    suffix: str
    suffix_ids: list[int]
    losses: list[float] = field(default_factory=list)
    target_loss: float = float("nan")


def _segments(
    tokenizer, prompt: str, target: str, suffix_sep: str = ""
) -> tuple[list[int], list[int], list[int]]:
    """Token ids before the suffix slot, after it (template tail), and of the target."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt + suffix_sep + _SLOT}],
        tokenize=False,
        add_generation_prompt=True,
    )
    before, after = text.split(_SLOT)
    enc = lambda s: list(tokenizer(s, add_special_tokens=False)["input_ids"])  # noqa: E731
    return enc(before), enc(after), enc(target)


def _check_gcg_args(n_tokens, steps, topk, n_candidates, target, detector, window, suffix_sep):
    """Raises on bad sizes, an empty target, a detector without a window, a non-string separator."""
    if n_tokens < 1 or steps < 0 or topk < 1 or n_candidates < 1:
        raise ValueError(
            f"n_tokens, topk, n_candidates must be >= 1 and steps >= 0, got {n_tokens}, {topk}, "
            f"{n_candidates}, {steps}"
        )
    if not target:
        raise ValueError("target must be a non-empty string")
    if detector is not None and window is None:
        raise ValueError("window is required when a detector is given")
    if not isinstance(suffix_sep, str):
        raise TypeError(f"suffix_sep must be a string, got {type(suffix_sep).__name__}")


def _allowed(tokenizer, allowed_token_ids, vocab: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(allowed ids [A], blocked mask [V])``; default every non-special id below ``vocab``."""
    if allowed_token_ids is None:
        special = set(tokenizer.all_special_ids)
        allowed_token_ids = [i for i in range(len(tokenizer)) if i not in special and i < vocab]
    allowed = torch.tensor(sorted(set(allowed_token_ids)), device=device)
    if allowed.numel() == 0:
        raise ValueError("allowed_token_ids must not be empty")
    block = torch.ones(vocab, dtype=torch.bool, device=device)
    block[allowed] = False
    return allowed, block


def _objective(model, t0: int, tgt_ids: torch.Tensor, detector, window, detector_weight: float):
    """GCG's loss (Zou et al. 2023, Alg. 1: target cross-entropy), plus the adaptive detector term
    ``detector_weight * detector(volume)`` (the paper's adaptive attack; docs/methods/salo.md deviations)."""

    def objective(embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[C, S, D]`` input embeddings -> (objective [C], target loss [C])."""
        out = model(inputs_embeds=embeds, output_hidden_states=detector is not None)
        logits = out.logits[:, t0 - 1 : t0 - 1 + len(tgt_ids)].float()  # predict the targets
        ce = nn.functional.cross_entropy(
            logits.transpose(1, 2), tgt_ids.expand(embeds.shape[0], -1), reduction="none"
        ).mean(1)
        if detector is None or detector_weight == 0.0:
            return ce, ce
        vol = torch.stack(out.hidden_states[window[0] : window[1]], dim=1)[:, :, :t0]  # [C,L,T,D]
        return ce + detector_weight * detector(vol.float()), ce

    return objective


def _candidates(suffix, grad, block, k: int, n_candidates: int, gen) -> torch.Tensor:
    """GCG's candidate batch (Zou et al. 2023, Alg. 1): per candidate one random position takes one
    of the top-``k`` tokens by negative gradient. ``[n_candidates, n_tokens]``."""
    device = suffix.device
    n_tokens = suffix.shape[0]
    grad = grad.masked_fill(block, float("inf"))
    top = (-grad).topk(k, dim=1).indices  # [n, k]
    pos = torch.randint(0, n_tokens, (n_candidates,), generator=gen).to(device)
    pick = torch.randint(0, top.shape[1], (n_candidates,), generator=gen).to(device)
    cands = suffix.expand(n_candidates, -1).clone()
    cands[torch.arange(n_candidates, device=device), pos] = top[pos, pick]
    return cands


def _one_hot_embeds(embed, pre, post, suffix) -> tuple[torch.Tensor, torch.Tensor]:
    """The suffix as a differentiable one-hot ``[n, V]`` and the input embeddings ``[1, S, D]``
    (GCG's token gradients, Zou et al. 2023, Alg. 1)."""
    n_tokens, vocab = suffix.shape[0], embed.weight.shape[0]
    one_hot = torch.zeros(n_tokens, vocab, device=suffix.device, dtype=embed.weight.dtype)
    one_hot[torch.arange(n_tokens), suffix] = 1.0
    one_hot.requires_grad_(True)
    full = torch.cat([embed(pre), one_hot @ embed.weight, embed(post)], dim=0).unsqueeze(0)
    return one_hot, full


def _embeds_for(embed, pre, post, suffixes: torch.Tensor) -> torch.Tensor:
    """``[C, n]`` candidate suffixes -> ``[C, S, D]`` input embeddings."""
    c = suffixes.shape[0]
    return embed(torch.cat([pre.expand(c, -1), suffixes, post.expand(c, -1)], dim=1))


def gcg_attack(
    model: nn.Module,
    tokenizer,
    prompt: str,
    target: str,
    *,
    n_tokens: int = 8,
    steps: int = 50,
    topk: int = 32,
    n_candidates: int = 64,
    allowed_token_ids: Sequence[int] | None = None,
    init_ids: Sequence[int] | None = None,
    detector: nn.Module | None = None,
    window: tuple[int, int] | None = None,
    detector_weight: float = 0.0,
    seed: int = 0,
    suffix_sep: str = "",
) -> GCGResult:
    """Optimises a user-turn suffix so that the model's reply starts with ``target``.

    GCG (Zou et al. 2023), our own compact re-implementation; the detector term is the abstract's
    adaptive (detector-aware) attack, its objective our inference.

    Objective: mean cross-entropy of the ``target`` tokens after the assistant header, plus
    ``detector_weight · detector(volume)`` (the detector's logit on the prompt's hidden-state volume
    ``hidden_states[window[0]:window[1]]``; causal masking keeps it independent of the target tokens).

    Args:
        model, tokenizer: an HF causal LM and its chat tokenizer.
        prompt: the harmful request (user turn); target: the wanted reply prefix.
        n_tokens: suffix length in tokens; steps: GCG iterations.
        topk: replacements per position from the gradient; n_candidates: swaps evaluated per step.
        allowed_token_ids: the vocabulary the suffix may use (default: all non-special tokens).
        init_ids: initial suffix ids (default: ``n_tokens`` copies of the first allowed id).
        detector, window, detector_weight: the adaptive (detector-aware) term.
        seed: seeds the candidate sampling.
        suffix_sep: text between the prompt and the optimised tokens (``""`` as in nanoGCG's
            ``prompt + "{optim_str}"``; a word-level vocabulary needs ``" "``).

    Returns:
        :class:`GCGResult` with the best suffix over all steps; its ``suffix`` string is
        ``suffix_sep + decode(suffix_ids)``, ready for ``prompt + suffix`` (re-tokenisation of the
        string is not guaranteed for BPE vocabularies).

    Raises:
        ValueError: on bad sizes, an empty target, or a detector without a window.
    """
    _check_gcg_args(n_tokens, steps, topk, n_candidates, target, detector, window, suffix_sep)
    before, after, tgt = _segments(tokenizer, prompt, target, suffix_sep)
    embed = model.get_input_embeddings()
    vocab = embed.weight.shape[0]
    device = embed.weight.device
    allowed, block = _allowed(tokenizer, allowed_token_ids, vocab, device)
    suffix = torch.tensor(
        list(init_ids) if init_ids is not None else [int(allowed[0])] * n_tokens, device=device
    )
    if suffix.numel() != n_tokens:
        raise ValueError(f"init_ids must have n_tokens={n_tokens} ids, got {suffix.numel()}")
    pre = torch.tensor(before, device=device)
    post = torch.tensor(after + tgt, device=device)
    t0 = len(before) + n_tokens + len(after)  # first target position
    tgt_ids = torch.tensor(tgt, device=device)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    objective = _objective(model, t0, tgt_ids, detector, window, detector_weight)

    best_ids, best_obj, best_ce, history = suffix.clone(), float("inf"), float("nan"), []
    was_training = model.training
    model.eval()
    if detector is not None:
        detector.eval()
    for step in progress(range(steps + 1), desc="salo GCG", unit="step"):
        one_hot, full = _one_hot_embeds(embed, pre, post, suffix)
        obj, ce = objective(full)
        if float(obj.detach()) < best_obj:
            best_obj, best_ce, best_ids = float(obj.detach()), float(ce.detach()), suffix.clone()
        history.append(best_obj)
        if step == steps:
            break
        (grad,) = torch.autograd.grad(obj.sum(), one_hot)  # [n, V]
        cands = _candidates(suffix, grad, block, min(topk, allowed.numel()), n_candidates, gen)
        with torch.no_grad():
            c_obj, _ = objective(_embeds_for(embed, pre, post, cands))
        suffix = cands[int(c_obj.argmin())]
        logger.debug("gcg step %d best %.4f", step, best_obj)
    model.train(was_training)
    ids = best_ids.tolist()
    return GCGResult(suffix_sep + tokenizer.decode(ids), ids, history, best_ce)


def target_loss(
    model: nn.Module,
    tokenizer,
    prompt: str,
    suffix_ids: Sequence[int],
    target: str,
    suffix_sep: str = "",
) -> float:
    """Mean cross-entropy of ``target`` after the chat prompt with ``suffix_ids`` in the user turn.

    The GCG target loss (Zou et al. 2023), our own re-implementation.
    """
    before, after, tgt = _segments(tokenizer, prompt, target, suffix_sep)
    ids = torch.tensor([before + list(suffix_ids) + after + tgt])
    t0 = ids.shape[1] - len(tgt)
    with torch.no_grad():
        logits = model(input_ids=ids.to(next(model.parameters()).device)).logits[0].float().cpu()
    return float(nn.functional.cross_entropy(logits[t0 - 1 : -1], torch.tensor(tgt)))
