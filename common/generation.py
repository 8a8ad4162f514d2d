"""Sampling completions with per-token log-probabilities.

Every method that samples from a policy (RL, best-of-n, self-consistency) goes through a
:class:`Generator`: ``generate(prompts, n, params) -> list[list[Completion]]``, one inner list of
``n`` samples per prompt. Two implementations:

* :class:`HFGenerator` — plain ``transformers`` ``generate`` on any causal LM (CPU or GPU). The
  default everywhere, and the one the tests pin.
* :class:`VLLMGenerator` — a thin adapter over vLLM's offline ``LLM`` engine for paper-scale runs.
  ``vllm`` is imported only when the class is instantiated; install it with
  ``pip install icml26[vllm]``.

Log-probabilities (the choice, stated once): ``Completion.logprobs[t]`` is the log-probability of
token ``t`` under the distribution it was *actually sampled from*, i.e. after temperature scaling
and top-k / top-p truncation (``log_softmax`` of the processed scores transformers samples from).
With ``temperature == 1``, ``top_k == 0`` and ``top_p == 1`` this is exactly the model's own
log-probability, equal to a teacher-forced forward pass. With ``temperature == 0`` (greedy) no
warping is applied and the log-probs are those of the model at temperature 1.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch

logger = logging.getLogger(__name__)

__all__ = [
    "Completion",
    "Generator",
    "HFGenerator",
    "Prompt",
    "SamplingParams",
    "VLLMGenerator",
    "render_prompts",
]

# A prompt is either raw text or a chat conversation (list of {"role", "content"} dicts).
Prompt = str | Sequence[Mapping[str, Any]]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample.

    Args:
        max_new_tokens: Maximum number of generated tokens per sample (>= 1).
        temperature: Softmax temperature; ``0`` means greedy decoding.
        top_p: Nucleus-sampling mass in ``(0, 1]``; ``1`` disables it.
        top_k: Keep only the ``top_k`` most likely tokens; ``0`` disables it.
        seed: Seeds torch's global RNG before sampling when given (reproducible draws).
    """

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0 disables it), got {self.top_k!r}")

    @property
    def greedy(self) -> bool:
        """Whether this setting decodes greedily (``temperature == 0``)."""
        return self.temperature == 0


@dataclass
class Completion:
    """One sampled continuation.

    Attributes:
        text: Decoded continuation (special tokens removed).
        token_ids: Generated token ids, padding stripped; ends with eos if ``finish_reason == "stop"``.
        logprobs: One log-probability per entry of ``token_ids`` (see the module docstring).
        finish_reason: ``"stop"`` (eos produced) or ``"length"`` (hit ``max_new_tokens``).
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str = "length"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def sum_logprob(self) -> float:
        """Log-probability of the whole continuation."""
        return float(sum(self.logprobs))


@runtime_checkable
class Generator(Protocol):
    """Anything that samples ``n`` completions per prompt."""

    def generate(
        self, prompts: Sequence[Prompt], n: int = 1, params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        """Return ``n`` completions for each prompt, in prompt order."""
        ...


def _check_prompts(prompts: Sequence[Prompt], n: int) -> None:
    if isinstance(prompts, str) or not isinstance(prompts, Sequence):
        raise TypeError(
            "prompts must be a list of strings or of chat conversations, "
            f"got {type(prompts).__name__}; wrap a single prompt as [prompt]"
        )
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            continue
        if isinstance(p, Sequence) and p and all(isinstance(m, Mapping) for m in p):
            if not all("role" in m and "content" in m for m in p):
                raise ValueError(f"prompts[{i}]: every chat message needs 'role' and 'content'")
            continue
        raise TypeError(
            f"prompts[{i}] must be a str or a non-empty list of chat messages, got {p!r:.80}"
        )


def render_prompts(tokenizer: Any, prompts: Sequence[Prompt]) -> list[str]:
    """Turn chat conversations into text with the tokenizer's chat template; leave strings alone.

    Raises:
        ValueError: A chat prompt was given but the tokenizer has no chat template.
    """
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            out.append(p)
            continue
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"prompts[{i}] is a chat conversation but the tokenizer has no chat_template; "
                "pass plain strings or set tokenizer.chat_template"
            )
        out.append(
            tokenizer.apply_chat_template(
                [dict(m) for m in p], tokenize=False, add_generation_prompt=True
            )
        )
    return out


class HFGenerator:
    """Sample with ``transformers``' ``generate`` and return per-token log-probs.

    Args:
        model: A causal LM (``PreTrainedModel`` with ``generate``).
        tokenizer: Its tokenizer; needs a pad or eos token. Prompts are left-padded.
        batch_size: Maximum number of sequences (prompts x ``n``) per ``generate`` call.

    Example:
        >>> gen = HFGenerator(model, tokenizer)
        >>> outs = gen.generate(["1+1="], n=4, params=SamplingParams(max_new_tokens=8, seed=0))
        >>> outs[0][0].token_ids, outs[0][0].logprobs
    """

    def __init__(self, model: Any, tokenizer: Any, batch_size: int = 16) -> None:
        if not hasattr(model, "generate"):
            raise TypeError(f"model must have a .generate method, got {type(model).__name__}")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if tokenizer.pad_token_id is None and tokenizer.eos_token_id is None:
            raise ValueError("tokenizer needs a pad_token or an eos_token")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    @property
    def _eos_ids(self) -> set[int]:
        ids: set[int] = set()
        for src in (getattr(self.model, "generation_config", None), self.tokenizer):
            eos = getattr(src, "eos_token_id", None)
            if eos is None:
                continue
            ids.update([eos] if isinstance(eos, int) else list(eos))
        return ids

    def generate(
        self, prompts: Sequence[Prompt], n: int = 1, params: SamplingParams | None = None
    ) -> list[list[Completion]]:
        """Sample ``n`` completions per prompt.

        Returns:
            ``out[i][j]`` is sample ``j`` of prompt ``i``.
        """
        params = params or SamplingParams()
        _check_prompts(prompts, n)
        if not prompts:
            return []
        texts = render_prompts(self.tokenizer, prompts)
        # Plain strings get the tokenizer's special tokens (e.g. BOS); a chat template already
        # wrote its own, so rendered conversations are tokenized without adding more.
        special = [isinstance(p, str) for p in prompts]
        if params.seed is not None:
            torch.manual_seed(params.seed)
        per_call = max(1, self.batch_size // n)
        out: list[list[Completion]] = []
        for start in range(0, len(texts), per_call):
            sl = slice(start, start + per_call)
            out.extend(self._generate_chunk(texts[sl], special[sl], n, params))
        return out

    @torch.no_grad()
    def _generate_chunk(
        self, texts: list[str], special: list[bool], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        tok = self.tokenizer
        ids = [tok(t, add_special_tokens=sp)["input_ids"] for t, sp in zip(texts, special)]
        old_side = tok.padding_side
        tok.padding_side = "left"
        try:
            enc = tok.pad({"input_ids": ids}, padding=True, return_tensors="pt")
        finally:
            tok.padding_side = old_side
        device = next(self.model.parameters()).device
        enc = {k: v.to(device) for k, v in enc.items()}
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        eos_ids = self._eos_ids
        gen_kwargs: dict[str, Any] = dict(
            max_new_tokens=params.max_new_tokens,
            num_return_sequences=n,
            return_dict_in_generate=True,
            output_scores=True,
            pad_token_id=pad_id,
            eos_token_id=sorted(eos_ids) if eos_ids else None,
            # Neutralise sampling defaults a checkpoint's generation_config may carry, so the
            # distribution sampled from is exactly the one SamplingParams describes.
            repetition_penalty=1.0,
            top_k=params.top_k if not params.greedy else None,
            top_p=params.top_p if not params.greedy else None,
            min_new_tokens=0,
        )
        if params.greedy:
            gen_kwargs.update(do_sample=False, temperature=None)
        else:
            gen_kwargs.update(do_sample=True, temperature=params.temperature)
        result = self.model.generate(**enc, **gen_kwargs)
        prompt_len = enc["input_ids"].shape[1]
        new_tokens = result.sequences[:, prompt_len:]  # (B*n, T)
        # result.scores: T tensors (B*n, V) = the processed logits sampled from.
        scores = torch.stack(result.scores, dim=1).float()  # (B*n, T, V)
        logp = torch.log_softmax(scores, dim=-1)
        tok_logp = logp.gather(-1, new_tokens[:, : scores.shape[1]].unsqueeze(-1)).squeeze(-1)

        out: list[list[Completion]] = []
        for b in range(len(texts)):
            samples = []
            for j in range(n):
                row = b * n + j
                ids = new_tokens[row].tolist()
                lps = tok_logp[row].tolist()
                finish = "length"
                for t, tid in enumerate(ids):
                    if tid in eos_ids:
                        ids, lps, finish = ids[: t + 1], lps[: t + 1], "stop"
                        break
                text = tok.decode(ids, skip_special_tokens=True)
                samples.append(Completion(text, ids, lps, finish))
            out.append(samples)
        return out


class VLLMGenerator:
    """Adapter over vLLM's offline engine (paper-scale sampling on GPUs).

    ``vllm`` is imported here, not at module import. vLLM reports log-probs of its own configured
    ``logprobs_mode`` (by default the raw model distribution, before temperature); pass
    ``logprobs_mode="processed_logprobs"`` in ``engine_kwargs`` to match :class:`HFGenerator`.

    Args:
        model_id: Hub id or local path of the model.
        **engine_kwargs: Forwarded to ``vllm.LLM`` (e.g. ``tensor_parallel_size``).

    Raises:
        ImportError: ``vllm`` is not installed (``pip install icml26[vllm]``).
    """

    def __init__(self, model_id: str, **engine_kwargs: Any) -> None:
        try:
            import vllm  # noqa: PLC0415
        except ImportError as err:  # pragma: no cover - exercised via monkeypatch in tests
            raise ImportError(
                "VLLMGenerator needs the optional 'vllm' extra: pip install icml26[vllm] "
                "(GPU only; use HFGenerator on CPU)"
            ) from err
        self._vllm = vllm
        self.model_id = model_id
        self.llm = vllm.LLM(model=model_id, **engine_kwargs)

    def generate(
        self, prompts: Sequence[Prompt], n: int = 1, params: SamplingParams | None = None
    ) -> list[list[Completion]]:  # pragma: no cover - needs a GPU and vllm
        """Sample ``n`` completions per prompt with vLLM."""
        params = params or SamplingParams()
        _check_prompts(prompts, n)
        texts = render_prompts(self.llm.get_tokenizer(), prompts)
        sp = self._vllm.SamplingParams(
            n=n,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_new_tokens,
            seed=params.seed,
            logprobs=0,
        )
        outs = self.llm.generate(texts, sp)
        result = []
        for req in outs:
            samples = []
            for c in req.outputs:
                ids = list(c.token_ids)
                lps = [float(step[t].logprob) for step, t in zip(c.logprobs or [], ids)]
                finish = "stop" if c.finish_reason == "stop" else "length"
                samples.append(Completion(c.text, ids, lps, finish))
            result.append(samples)
        return result
