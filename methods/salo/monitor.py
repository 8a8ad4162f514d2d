"""Pre-generation guard: one extra forward with hidden states, then SALO."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch import nn

from methods.salo.volume import collect_volumes


class SALOMonitor:
    """Scores prompts with a trained detector and guards a generation function.

    Our construction around the paper's detector and its fixed XSTest-calibrated threshold (abstract);
    the scoring follows official ``salo/train.py::predict``.

    Args:
        model / tokenizer: the chat LLM whose hidden states are read.
        detector: a trained ``SALO`` (or any ``detector(x, mask) -> logits``).
        window: the layer window the detector was trained on.
        tau: the calibrated threshold on ``σ(logit)`` (see ``calibrate_threshold``).
        refusal: the text returned by ``guard`` for flagged prompts.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        detector: nn.Module,
        window: Sequence[int],
        tau: float = 0.5,
        refusal: str = "I'm sorry, but I can't help with that.",
    ) -> None:
        if not 0.0 <= tau <= 1.0:
            raise ValueError(f"tau must lie in [0, 1] (a probability threshold), got {tau}")
        self.model, self.tokenizer, self.detector = model, tokenizer, detector.eval()
        self.window, self.tau, self.refusal = tuple(window), tau, refusal

    @torch.no_grad()
    def score(self, prompt: str, suffix: str | None = None, prefill: str | None = None) -> float:
        """``σ(SALO(X))`` for one prompt, with an optional suffix (user side) or prefill."""
        x, mask = collect_volumes(
            self.model, self.tokenizer, [prompt], self.window, suffix=suffix, prefill=prefill
        )
        return float(torch.sigmoid(self.detector(x, mask))[0])

    def flagged(self, prompt: str, **kw) -> bool:
        return self.score(prompt, **kw) >= self.tau

    def guard(self, generate_fn: Callable[..., str]) -> Callable[..., str]:
        """Wraps ``generate_fn(prompt, **kw) -> str``: flagged prompts get ``self.refusal``."""

        @functools.wraps(generate_fn)
        def wrapped(prompt: str, *args, suffix=None, prefill=None, **kw):
            if self.flagged(prompt, suffix=suffix, prefill=prefill):
                return self.refusal
            extra = {k: v for k, v in (("suffix", suffix), ("prefill", prefill)) if v is not None}
            return generate_fn(prompt, *args, **extra, **kw)

        return wrapped
