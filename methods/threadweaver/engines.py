"""Completion engines of the fork/join orchestrator (§3.2): the protocol and two backends.

:class:`CompletionEngine` is what :class:`~methods.threadweaver.orchestrator.ParallelOrchestrator`
needs: token prompts in, completions cut at the first stop id out (the stop token kept).
:class:`HFGenerateEngine` runs ``transformers`` ``generate``; :class:`VLLMEngine` runs vLLM with prefix
caching (GPU extra). Source: engineering; the paper runs its orchestrator on vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import torch

__all__ = ["CompletionEngine", "EngineCompletion", "HFGenerateEngine", "VLLMEngine"]


@dataclass
class EngineCompletion:
    """One engine answer: ``ids`` (the stop token kept if it stopped on one) and why it ended."""

    ids: list[int]
    finish_reason: Literal["stop", "length"]
    stop_id: int | None = None


@runtime_checkable
class CompletionEngine(Protocol):
    """Token-in/token-out completion API (the only thing the orchestrator needs)."""

    def complete(
        self,
        prompts: list[list[int]],
        stop_ids: list[int],
        max_tokens: list[int],
        temperature: float = 1.0,
        top_p: float = 1.0,
    ) -> list[EngineCompletion]:
        """Complete each prompt up to a stop id or its token budget.

        Source: paper Section 3.2 (the orchestrator only needs request -> completion with prefix
        caching); the token-level interface is engineering.
        """
        ...


def _cut_at_stop(ids: list[int], stop_ids: Sequence[int], max_tokens: int) -> EngineCompletion:
    stops = set(stop_ids)
    for j, t in enumerate(ids[:max_tokens]):
        if t in stops:
            return EngineCompletion(ids[: j + 1], "stop", t)
    return EngineCompletion(ids[:max_tokens], "length")


class HFGenerateEngine:
    """:class:`CompletionEngine` on ``transformers`` ``generate`` (left padding, batched).

    Stop ids are passed as ``eos_token_id`` so each row stops at its first stop token.
    ``temperature == 0`` means greedy decoding.
    """

    def __init__(self, model, pad_token_id: int, batch_size: int = 64, seed: int | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model, self.pad, self.batch_size, self.seed = (
            model,
            int(pad_token_id),
            batch_size,
            seed,
        )

    @torch.no_grad()
    def complete(self, prompts, stop_ids, max_tokens, temperature=1.0, top_p=1.0):
        """Batched HF ``generate`` completions cut at the first stop id; engineering,
        not in the paper.
        """
        if len(prompts) != len(max_tokens):
            raise ValueError(f"got {len(prompts)} prompts but {len(max_tokens)} max_tokens")
        if self.seed is not None:
            torch.manual_seed(self.seed)
        out: list[EngineCompletion] = []
        dev = next(self.model.parameters()).device
        for s in range(0, len(prompts), self.batch_size):
            chunk, mt = prompts[s : s + self.batch_size], max_tokens[s : s + self.batch_size]
            budget = max(mt)
            if budget <= 0:
                out += [EngineCompletion([], "length") for _ in chunk]
                continue
            n = max(len(p) for p in chunk)
            ids = torch.full((len(chunk), n), self.pad, dtype=torch.long)
            att = torch.zeros((len(chunk), n), dtype=torch.long)
            for i, p in enumerate(chunk):
                ids[i, n - len(p) :], att[i, n - len(p) :] = torch.tensor(p), 1
            kw = (
                {"do_sample": False}
                if temperature == 0
                else {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}
            )
            gen = self.model.generate(
                input_ids=ids.to(dev),
                attention_mask=att.to(dev),
                max_new_tokens=budget,
                eos_token_id=list(stop_ids),
                pad_token_id=self.pad,
                **kw,
            )[:, n:]
            for i, row in enumerate(gen.tolist()):
                out.append(_cut_at_stop(row, stop_ids, mt[i]))
        return out


class VLLMEngine:
    """:class:`CompletionEngine` on vLLM (``pip install -e ".[vllm]"``; GPU only, imported lazily).

    Uses token prompts, ``stop_token_ids`` and prefix caching (the orchestrator re-sends the shared
    context of every thread). Untested on CPU: vLLM cannot be installed here.
    Source: engineering; the paper runs its orchestrator (§3.2) on vLLM.
    """

    def __init__(self, model: str, **engine_kwargs):
        try:
            from vllm import LLM
        except ImportError as e:  # pragma: no cover - GPU extra
            raise ImportError('VLLMEngine needs vllm: pip install -e ".[vllm]"') from e
        engine_kwargs.setdefault("enable_prefix_caching", True)
        self.llm = LLM(model=model, **engine_kwargs)

    @classmethod
    def from_llm(cls, llm) -> VLLMEngine:
        """Wrap an existing ``vllm.LLM`` (e.g. one whose weights a trainer keeps in sync).

        Source: engineering, not in the paper.
        """
        obj = cls.__new__(cls)
        obj.llm = llm
        return obj

    @classmethod
    def from_trainer(cls, trainer) -> VLLMEngine:
        """Wrap TRL's colocated vLLM (``GRPOConfig(use_vllm=True, vllm_mode="colocate")``).

        Source: engineering, not in the paper.
        """
        gen = getattr(trainer, "vllm_generation", None)
        if gen is None or getattr(gen, "llm", None) is None:
            raise ValueError(
                "trainer has no colocated vLLM; set use_vllm=True, vllm_mode='colocate'"
            )
        return cls.from_llm(gen.llm)

    def complete(
        self, prompts, stop_ids, max_tokens, temperature=1.0, top_p=1.0
    ):  # pragma: no cover
        """vLLM completions of token prompts cut at the first stop id; engineering, not in the paper."""
        from vllm import SamplingParams, TokensPrompt

        params = [
            SamplingParams(max_tokens=max(1, m), temperature=temperature, top_p=top_p,
                           stop_token_ids=list(stop_ids), skip_special_tokens=False)
            for m in max_tokens
        ]  # fmt: skip
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params)
        res = []
        for o, m in zip(outs, max_tokens):
            c = o.outputs[0]
            ids = list(c.token_ids)[: max(0, m)]
            if isinstance(c.stop_reason, int) and (not ids or ids[-1] != c.stop_reason):
                ids.append(c.stop_reason)  # keep the stop token, as the protocol requires
            res.append(_cut_at_stop(ids, stop_ids, len(ids)))
        return res
