"""lm-evaluation-harness front end for the paper-scale runs.

``generate_text`` turns one harness request (a few-shot context and stop sequences) into a Swordsman or
Fast-dLLM decode and returns the text plus the throughput statistics the paper reports (tokens per second
counting generated tokens up to the stop sequence, excluding EOS; latency; NFE). ``register_lm_eval``
registers the model name ``swordsman_dlm`` with lm-eval (imported lazily: it is the optional ``eval``
extra); the request handling itself lives in ``SwordsmanHarnessLM`` and runs without lm-eval.
Run through the paper stage: ``icml26 experiment=swordsman_paper`` (methods/swordsman/paper.py).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from methods.swordsman.adapters import DLMAdapter, DreamAdapter, HFMaskedLMAdapter, LLaDAAdapter
from methods.swordsman.config import SwordsmanConfig
from methods.swordsman.decoder import fixed_block_generate, swordsman_generate

logger = logging.getLogger(__name__)


def generate_text(
    adapter: DLMAdapter,
    tokenizer: Any,
    context: str,
    cfg: SwordsmanConfig,
    until: list[str] | None = None,
    chat_template: bool = False,
    add_bos: bool = False,
    baseline: str | None = None,
) -> dict[str, Any]:
    """Decode one prompt; returns ``{"text", "tokens", "nfe", "seconds"}`` (the paper's evaluation:
    batch size 1, greedy, stop-sequence truncation as in lm-evaluation-harness ``generate_until``).

    Args:
        adapter: model adapter.
        tokenizer: the model's tokenizer (``encode``/``decode``, optional chat template).
        context: the prompt text (few-shot examples included).
        cfg: decoder configuration (``gen_length``, cache, thresholds).
        until: stop sequences; the text is cut at the first one.
        chat_template: wrap the context as a user turn (official ``llada/eval_llada.py``: only for
            "instruct" checkpoints such as LLaDA-8B-Instruct).
        add_bos: prepend the BOS token (official ``dream/eval.py``: the Dream base model).
        baseline: None for Swordsman, ``"fixed"`` for Fast-dLLM (``max_block_len`` blocks, τ = tau_max).
    """
    if chat_template:
        msgs = [{"role": "user", "content": context}]
        context = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    ids = tokenizer.encode(context, add_special_tokens=False)
    if add_bos and tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id, *ids]
    model = getattr(adapter, "model", None)
    tensors = [*model.parameters(), *model.buffers()] if model is not None else []
    device = tensors[0].device if tensors else "cpu"
    prompt = torch.tensor([ids], dtype=torch.long, device=device)
    start = time.perf_counter()
    if baseline == "fixed":
        res = fixed_block_generate(
            adapter, prompt, cfg.gen_length, cfg.max_block_len, cfg.tau_max, cfg.cache
        )
    elif baseline is None:
        res = swordsman_generate(adapter, prompt, cfg)
    else:
        raise ValueError(f"baseline must be None or 'fixed', got {baseline!r}")
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    gen = res.generated.tolist()
    cut = next((i for i, t in enumerate(gen) if t in adapter.eos_ids), len(gen))
    text = tokenizer.decode(gen[:cut], skip_special_tokens=True)
    for stop in until or []:
        if stop and stop in text:
            text = text[: text.index(stop)]
    n_tokens = len(tokenizer.encode(text, add_special_tokens=False)) if text else 0
    return {"text": text, "tokens": n_tokens, "nfe": res.nfe, "seconds": seconds}


class SwordsmanHarnessLM:
    """The lm-evaluation-harness model logic, usable without lm-eval installed.

    Source: official ``llada/eval_llada.py`` and ``dream/eval.py`` (``generate_until`` over lm-eval).

    Implements ``generate_until`` over harness requests (objects whose ``.args`` is ``(context,
    gen_kwargs)``; ``gen_kwargs["until"]`` are the stop sequences) and records per-request throughput
    statistics. ``register_lm_eval`` mixes it into ``lm_eval.api.model.LM`` as ``swordsman_dlm``.

    Args:
        adapter: model adapter (``LLaDAAdapter`` / ``DreamAdapter`` / any ``DLMAdapter``).
        tokenizer: the model's tokenizer.
        cfg: decoder configuration; ``cfg.cache`` switches the KV cache (``"none"``, ``"prefix"`` or
            ``"dual"``; dual needs a modeling file with ``replace_position``).
        chat_template: wrap each context as a user turn (the repo does so for instruct models).
        add_bos: prepend BOS (the repo does so for Dream).
        baseline: None for Swordsman, ``"fixed"`` for Fast-dLLM.
    """

    def __init__(
        self,
        adapter: DLMAdapter,
        tokenizer: Any,
        cfg: SwordsmanConfig,
        chat_template: bool = False,
        add_bos: bool = False,
        baseline: str | None = None,
    ) -> None:
        if baseline not in (None, "fixed"):
            raise ValueError(f"baseline must be None or 'fixed', got {baseline!r}")
        if cfg.cache not in adapter.supports:
            raise ValueError(
                f"cache={cfg.cache!r} is not supported by this model (supports "
                f"{sorted(adapter.supports)}); use cache=none or a modeling file with KV-cache support"
            )
        self.adapter, self.tok, self.cfg = adapter, tokenizer, cfg
        self.chat, self.add_bos, self.baseline = bool(chat_template), bool(add_bos), baseline
        self.stats: list[dict[str, Any]] = []

    @staticmethod
    def load(
        model_path: str,
        family: str = "auto",
        dtype: str = "bfloat16",
        device: str | None = None,
        mask_id: int | None = None,
    ) -> tuple[DLMAdapter, Any, bool, bool]:
        """Load a LLaDA/Dream checkpoint; returns ``(adapter, tokenizer, chat_template, add_bos)``.

        Source: engineering; chat template and BOS as official ``llada/eval_llada.py`` /
        ``dream/eval.py``.

        ``family="auto"`` picks Dream when the path contains "dream", else LLaDA; the chat template is
        used only when the path contains "instruct" (as in the official evaluation scripts).
        """
        family = _family(model_path) if family == "auto" else family
        if family not in ("llada", "dream", "masked_lm"):
            raise ValueError(
                f"family must be 'auto', 'llada', 'dream' or 'masked_lm', got {family!r}"
            )
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if family == "masked_lm":  # any *ForMaskedLM with a mask token (tests, small MDMs)
            from transformers import AutoModelForMaskedLM, AutoTokenizer

            torch_dtype = getattr(torch, dtype) if dtype != "auto" else None
            from common.models import weights_hint

            with weights_hint(model_path):
                model = AutoModelForMaskedLM.from_pretrained(model_path, dtype=torch_dtype)
                tok = AutoTokenizer.from_pretrained(model_path)
            model = model.to(device)
            if tok.mask_token_id is None:
                raise ValueError(f"{model_path}: the tokenizer has no mask token")
            eos = {int(tok.eos_token_id)} if tok.eos_token_id is not None else set()
            mid = int(mask_id if mask_id is not None else tok.mask_token_id)
            adapter = HFMaskedLMAdapter(model.eval(), mask_id=mid, eos_ids=eos)
        else:
            cls = DreamAdapter if family == "dream" else LLaDAAdapter
            adapter, tok = cls.from_pretrained(
                model_path, dtype=dtype, device=device, mask_id=mask_id
            )
        from common.tracking import record_model_load

        record_model_load(model_path, cls=type(adapter.model).__name__, dtype=dtype)
        return adapter, tok, "instruct" in model_path.lower(), family == "dream"

    @classmethod
    def from_pretrained(
        cls,
        model_path: str,
        family: str = "auto",
        baseline: str | None = None,
        dtype: str = "bfloat16",
        device: str | None = None,
        **decoder_kwargs: Any,
    ) -> SwordsmanHarnessLM:
        """Load by hub id or path; ``decoder_kwargs`` (strings allowed) are ``SwordsmanConfig`` fields.

        Source: engineering, not in the paper.
        """
        adapter, tok, chat, bos = cls.load(model_path, family, dtype, device)
        cfg = SwordsmanConfig(**_coerce(decoder_kwargs))
        return cls(adapter, tok, cfg, chat, bos, baseline or None)

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Decode every request; returns the generated texts cut at the stop sequences.

        Source: official ``llada/eval_llada.py`` (lm-eval ``generate_until``).
        """
        out = []
        for req in requests:
            context, gen_kwargs = req.args
            until = gen_kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            r = generate_text(
                self.adapter,
                self.tok,
                context,
                self.cfg,
                until,
                self.chat,
                self.add_bos,
                self.baseline,
            )
            self.stats.append({k: r[k] for k in ("tokens", "nfe", "seconds")})
            out.append(r["text"])
        return out

    def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False):
        """Not supported (raises); engineering, not in the paper."""
        raise NotImplementedError("swordsman_dlm supports generate_until tasks only")

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False):
        """Not supported (raises); engineering, not in the paper."""
        raise NotImplementedError("swordsman_dlm supports generate_until tasks only")

    def throughput(self) -> dict[str, float]:
        """TPS, mean latency and NFE over the requests decoded so far (``summarize``).

        Source: our inference (TPS counting rule not stated; rebuttal Tables 5-6 report TPS and
        latency).
        """
        return summarize(self.stats)


_REGISTERED: dict[str, type] = {}


def register_lm_eval() -> type:
    """Register ``swordsman_dlm`` with lm-evaluation-harness (imported lazily) and return the class.

    Source: engineering, not in the paper.

    Raises:
        ImportError: when lm-eval is not installed (``pip install 'icml26[eval]'``).
    """
    if "swordsman_dlm" in _REGISTERED:
        return _REGISTERED["swordsman_dlm"]
    try:
        from lm_eval.api.model import LM
        from lm_eval.api.registry import register_model
    except ImportError as err:  # GPU-side optional dependency
        raise ImportError(
            "lm-eval is required for the paper-scale evaluation: pip install 'icml26[eval]' "
            "(lm-eval>=0.4.8)"
        ) from err

    @register_model("swordsman_dlm")
    class SwordsmanLM(SwordsmanHarnessLM, LM):
        """lm-eval model ``swordsman_dlm`` (``--model_args model_path=...,cache=dual,...``)."""

        def __init__(
            self,
            model_path: str,
            family: str = "auto",
            baseline: str | None = None,
            dtype: str = "bfloat16",
            **decoder_kwargs: Any,
        ):
            import os

            LM.__init__(self)
            # Data parallel under `accelerate launch`: one replica per GPU, lm-eval shards by rank.
            self._rank = int(os.environ.get("RANK", 0))
            self._world_size = int(os.environ.get("WORLD_SIZE", 1))
            if self._world_size > 1:
                from accelerate import Accelerator

                self.accelerator = Accelerator()
            local = int(os.environ.get("LOCAL_RANK", 0))
            device = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
            adapter, tok, chat, bos = self.load(model_path, family, dtype, device)
            cfg = SwordsmanConfig(**_coerce(decoder_kwargs))
            SwordsmanHarnessLM.__init__(self, adapter, tok, cfg, chat, bos, baseline or None)

    _REGISTERED["swordsman_dlm"] = SwordsmanLM
    return SwordsmanLM


def _family(model_path: str) -> str:
    """Dream if the id says so; a local ``*ForMaskedLM`` folder is ``masked_lm``; else LLaDA."""
    cfg = Path(model_path) / "config.json"
    if cfg.is_file():
        archs = json.loads(cfg.read_text()).get("architectures") or []
        if any(a.endswith("ForMaskedLM") for a in archs):
            return "masked_lm"
    return "dream" if "dream" in model_path.lower() else "llada"


def _coerce(kw: dict[str, Any]) -> dict[str, Any]:
    """lm-eval passes model_args as strings: cast them to the SwordsmanConfig field types."""
    types = {k: type(v) for k, v in SwordsmanConfig().__dict__.items()}
    out = {}
    for k, v in kw.items():
        if k not in types:
            raise ValueError(f"unknown decoder argument {k!r}; valid: {sorted(types)}")
        t = types[k]
        if t is bool and isinstance(v, str):
            v = v.lower() in ("1", "true", "yes")
        elif t in (int, float) and isinstance(v, str):
            v = t(v)
        out[k] = v
    return out


def summarize(stats: list[dict[str, Any]]) -> dict[str, float]:
    """Throughput over a run: TPS = Σ tokens / Σ seconds, mean latency and NFE (the paper's TPS and
    latency at batch size 1, rebuttal Tables 5-6; which tokens count, up to the stop sequence and
    without EOS, is our inference, deviations table "TPS token count")."""
    if not stats:
        return {"tps": float("nan"), "latency_s": float("nan"), "nfe": float("nan")}
    secs = sum(s["seconds"] for s in stats)
    return {
        "tps": sum(s["tokens"] for s in stats) / max(secs, 1e-9),
        "latency_s": secs / len(stats),
        "nfe": sum(s["nfe"] for s in stats) / len(stats),
    }
