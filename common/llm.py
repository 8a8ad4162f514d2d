"""Chat clients for a frozen helper LLM (judge, teacher, coder).

One protocol, :class:`ChatLLM` (``chat(messages) -> str`` and ``chat_batch``), four
implementations:

* :class:`OpenAIChat` — any OpenAI-compatible ``/chat/completions`` endpoint (OpenAI itself,
  ``vllm serve``, llama.cpp server ...), through the ``openai`` package: API key read from an environment
  variable at request time (never stored in reprs, logs or errors), a timeout, and retries with
  exponential backoff on HTTP 429 / 5xx and connection errors.
* :class:`HFChat` — a local ``transformers`` model through its chat template
  (:class:`common.generation.HFGenerator`).
* :class:`VLLMChat` — vLLM's offline engine (``vllm.LLM.chat``) on GPUs; vllm is imported only
  when the class is instantiated (the ``vllm`` extra).
* :class:`ScriptedChat` — deterministic canned replies for tests; records every call.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from common.generation import HFGenerator, SamplingParams

logger = logging.getLogger(__name__)

__all__ = [
    "ChatLLM",
    "ChatLLMError",
    "HFChat",
    "Messages",
    "OpenAIChat",
    "ScriptedChat",
    "VLLMChat",
    "validate_messages",
]

Messages = Sequence[Mapping[str, Any]]
_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class ChatLLMError(RuntimeError):
    """A chat request failed (after retries) or the server sent an unusable answer."""


@runtime_checkable
class ChatLLM(Protocol):
    """A chat model: a conversation in, the assistant's reply text out."""

    def chat(self, messages: Messages, **kwargs: Any) -> str:
        """Reply to one conversation (list of ``{"role", "content"}`` dicts)."""
        ...

    def chat_batch(self, batch: Sequence[Messages], **kwargs: Any) -> list[str]:
        """Reply to several conversations, in order."""
        ...


def validate_messages(messages: Messages, name: str = "messages") -> list[dict[str, Any]]:
    """Check a chat conversation and return it as a list of plain dicts.

    Raises:
        TypeError: ``messages`` is not a list of mappings.
        ValueError: It is empty or a message lacks ``role``/``content``.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(
            f"{name} must be a list of {{'role', 'content'}} dicts, got {type(messages).__name__}"
        )
    if not messages:
        raise ValueError(f"{name} must contain at least one message")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise TypeError(f"{name}[{i}] must be a dict, got {type(m).__name__}")
        if "role" not in m or "content" not in m:
            raise ValueError(f"{name}[{i}] needs 'role' and 'content' keys, got {sorted(m)}")
        out.append(dict(m))
    return out


class OpenAIChat:
    """Client for an OpenAI-compatible chat-completions endpoint.

    Args:
        model: Model name sent in the request (e.g. ``"gpt-4o"`` or the id ``vllm serve`` uses).
        base_url: API root including ``/v1``; default ``$OPENAI_BASE_URL`` when set (as the ``openai``
            package reads it), else ``https://api.openai.com/v1``.
        api_key_env: Environment variable holding the key, read at each request. If unset the
            request carries no ``Authorization`` header (fine for a local ``vllm serve``).
        timeout: Seconds per HTTP attempt.
        max_retries: Extra attempts after the first on 429/5xx/connection errors.
        backoff: Base delay in seconds; attempt ``k`` waits ``backoff * 2**k`` (capped at
            ``max_backoff``), or the server's ``Retry-After`` when that is larger.
        max_backoff: Upper bound on one wait.
        max_workers: Threads used by :meth:`chat_batch`.
        **defaults: Request fields sent with every call (``temperature``, ``seed``, ``max_tokens``...).

    Example:
        >>> llm = OpenAIChat("gpt-4o", temperature=0.0, seed=42)
        >>> llm.chat([{"role": "user", "content": "Say hi"}])
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60,
        max_retries: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        max_workers: int = 4,
        **defaults: Any,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"max_retries must be an int >= 0, got {max_retries!r}")
        if backoff < 0 or max_backoff < 0:
            raise ValueError(f"backoff and max_backoff must be >= 0, got {backoff}, {max_backoff}")
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be an int >= 1, got {max_workers!r}")
        self.model = model
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_workers = max_workers
        self.defaults = defaults
        self.n_requests = 0  # HTTP attempts made, retries included

    def __repr__(self) -> str:
        # Names the env var, never its value.
        return (
            f"OpenAIChat(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key_env={self.api_key_env!r}, timeout={self.timeout})"
        )

    def _key(self) -> str | None:
        return os.environ.get(self.api_key_env) or None

    def _redact(self, text: str, key: str | None) -> str:
        return text.replace(key, "***") if key else text

    def _sleep_for(self, attempt: int, retry_after: str | None) -> float:
        delay = min(self.max_backoff, self.backoff * (2**attempt))
        if retry_after:
            with contextlib.suppress(ValueError):
                delay = max(delay, min(self.max_backoff, float(retry_after)))
        return delay

    def _client(self, key: str | None):
        """An ``openai.OpenAI`` client for one call (the key is read per call, never stored)."""
        import openai

        return openai.OpenAI(
            api_key=key or "unused",
            base_url=self.base_url,
            timeout=self.timeout,
            max_retries=0,  # retries are ours: logged, with Retry-After and a capped backoff
        )

    def chat(self, messages: Messages, **kwargs: Any) -> str:
        """Send one conversation; return the first choice's message content.

        The request goes through the ``openai`` package (any OpenAI-compatible server:
        OpenAI, ``vllm serve``, ...). Fields other than ``model`` and ``messages`` travel as the
        request body's extra fields, so server-specific ones (``top_k``) pass unchanged.

        Raises:
            ChatLLMError: Non-retryable HTTP error, retries exhausted, or a malformed body.
        """
        import openai

        body = {**self.defaults, **kwargs}
        msgs = validate_messages(messages)
        url = f"{self.base_url}/chat/completions"
        key = self._key()
        client = self._client(key)
        last_err = ""
        try:
            for attempt in range(self.max_retries + 1):
                self.n_requests += 1
                retry_after = None
                try:
                    resp = client.chat.completions.with_raw_response.create(
                        model=self.model,
                        messages=msgs,
                        extra_body=body,
                        extra_headers=None if key else {"Authorization": openai.Omit()},
                    )
                    return self._parse(resp.http_response.content, key)
                except openai.APIStatusError as err:
                    detail = self._redact(err.response.text[:300], key)
                    last_err = f"HTTP {err.status_code}: {detail}"
                    if err.status_code not in _RETRY_STATUS:
                        raise ChatLLMError(f"{url} answered {last_err}") from None
                    retry_after = err.response.headers.get("Retry-After")
                except openai.APIConnectionError as err:  # timeouts included
                    cause = err.__cause__ or err
                    last_err = self._redact(f"{type(cause).__name__}: {cause}", key)
                if attempt < self.max_retries:
                    delay = self._sleep_for(attempt, retry_after)
                    logger.warning(
                        "chat request to %s failed (%s); retry %d/%d in %.2fs",
                        url,
                        last_err,
                        attempt + 1,
                        self.max_retries,
                        delay,
                    )
                    time.sleep(delay)
        finally:
            client.close()
        raise ChatLLMError(
            f"{url} failed after {self.max_retries + 1} attempts; last error: {last_err}"
        )

    def _parse(self, raw: bytes, key: str | None) -> str:
        try:
            data = json.loads(raw)
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as err:
            snippet = self._redact(raw[:200].decode("utf-8", "replace"), key)
            raise ChatLLMError(
                "malformed chat-completions response (expected JSON with "
                f"choices[0].message.content): {type(err).__name__}; body starts {snippet!r}"
            ) from None
        if content is None:
            return ""
        if not isinstance(content, str):
            raise ChatLLMError(f"choices[0].message.content is not a string: {content!r:.80}")
        return content

    def chat_batch(self, batch: Sequence[Messages], **kwargs: Any) -> list[str]:
        """Send several conversations concurrently (``max_workers`` threads), keep order."""
        batch = list(batch)
        if len(batch) <= 1 or self.max_workers == 1:
            return [self.chat(m, **kwargs) for m in batch]
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(batch))) as pool:
            return list(pool.map(lambda m: self.chat(m, **kwargs), batch))


class HFChat:
    """A local ``transformers`` chat model (applies the tokenizer's chat template).

    Args:
        model: Causal LM.
        tokenizer: Its tokenizer, with a ``chat_template``.
        max_new_tokens: Reply length cap.
        temperature: ``0`` = greedy (deterministic).
        batch_size: Sequences per ``generate`` call in :meth:`chat_batch`.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_new_tokens: int = 128,
        temperature: float = 0.0,
        batch_size: int = 8,
    ) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("tokenizer has no chat_template; HFChat needs one")
        self.generator = HFGenerator(model, tokenizer, batch_size=batch_size)
        self.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature)

    def chat(self, messages: Messages, **kwargs: Any) -> str:
        """Reply to one conversation."""
        return self.chat_batch([messages], **kwargs)[0]

    def chat_batch(self, batch: Sequence[Messages], **kwargs: Any) -> list[str]:
        """Reply to several conversations; ``kwargs`` override :class:`SamplingParams` fields."""
        convs = [validate_messages(m, f"batch[{i}]") for i, m in enumerate(batch)]
        if not convs:
            return []
        params = self.params
        if kwargs:
            fields = {**params.__dict__, **kwargs}
            params = SamplingParams(**fields)
        outs = self.generator.generate(convs, n=1, params=params)
        return [o[0].text for o in outs]


class VLLMChat:
    """``ChatLLM`` over vLLM's offline engine (``vllm.LLM.chat``); vllm is imported lazily.

    Args:
        model: hub id or local path.
        temperature / max_tokens: decoding (greedy, 512 new tokens by default).
        **engine_kwargs: forwarded to ``vllm.LLM`` (``tensor_parallel_size``, ``max_model_len``,
            ``gpu_memory_utilization``, ...).

    Raises:
        ImportError: if vllm is not installed.
    """

    def __init__(
        self, model: str, temperature: float = 0.0, max_tokens: int = 512, **engine_kwargs: Any
    ) -> None:
        try:
            import vllm  # optional GPU dependency
        except ImportError as err:
            raise ImportError(
                "VLLMChat needs vllm (GPU only): pip install icml26[vllm]; on CPU use "
                "OpenAIChat against a server, or HFChat"
            ) from err
        self.llm = vllm.LLM(model=model, **engine_kwargs)
        self.params = vllm.SamplingParams(temperature=temperature, top_p=1.0, max_tokens=max_tokens)

    def chat(self, messages: list[dict], **kw: Any) -> str:  # pragma: no cover - GPU only
        return self.chat_batch([messages], **kw)[0]

    def chat_batch(self, batch: list[list[dict]], **kw: Any) -> list[str]:  # pragma: no cover
        outs = self.llm.chat(batch, self.params, use_tqdm=False)
        return [o.outputs[0].text for o in outs]


class ScriptedChat:
    """Deterministic chat stand-in for tests.

    Args:
        responses: Either a list of replies returned in order (running out raises
            :class:`ChatLLMError`), or a function ``messages -> reply``.

    Attributes:
        calls: Deep copies of every conversation received, in order.
    """

    def __init__(self, responses: Sequence[str] | Callable[[list[dict[str, Any]]], str]) -> None:
        if callable(responses):
            self._fn: Callable[[list[dict[str, Any]]], str] | None = responses
            self._queue: list[str] = []
        elif isinstance(responses, Sequence) and not isinstance(responses, str):
            if not all(isinstance(r, str) for r in responses):
                raise TypeError("responses must all be strings")
            self._fn = None
            self._queue = list(responses)
        else:
            raise TypeError(
                f"responses must be a list of strings or a callable, got {type(responses).__name__}"
            )
        self.calls: list[list[dict[str, Any]]] = []

    def __repr__(self) -> str:
        return f"ScriptedChat(calls={len(self.calls)}, remaining={len(self._queue)})"

    @property
    def remaining(self) -> int:
        """Scripted replies not consumed yet (0 for a callable script)."""
        return len(self._queue)

    def chat(self, messages: Messages, **kwargs: Any) -> str:
        """Record the conversation and return the next scripted reply."""
        msgs = validate_messages(messages)
        self.calls.append(copy.deepcopy(msgs))
        if self._fn is not None:
            reply = self._fn(msgs)
            if not isinstance(reply, str):
                raise TypeError(f"scripted function must return str, got {type(reply).__name__}")
            return reply
        if not self._queue:
            raise ChatLLMError(
                f"ScriptedChat ran out of responses after {len(self.calls) - 1} calls"
            )
        return self._queue.pop(0)

    def chat_batch(self, batch: Sequence[Messages], **kwargs: Any) -> list[str]:
        """Reply to each conversation in order."""
        return [self.chat(m, **kwargs) for m in batch]
