"""lm-evaluation-harness front end for the paper-scale runs (spec §5, §7).

``generate_text`` turns one harness request (a few-shot context and stop sequences) into a Swordsman or
Fast-dLLM decode and returns the text plus the throughput statistics the paper reports (tokens per second
counting generated tokens up to the stop sequence, excluding EOS; latency; NFE). ``register_lm_eval``
registers the model name ``swordsman_dlm`` with lm-eval (imported lazily: it is a GPU-side dependency).
Command line: ``python -m methods.swordsman.eval_harness --model GSAI-ML/LLaDA-8B-Instruct --task gsm8k``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import torch

from methods.swordsman.adapters import DLMAdapter, DreamAdapter, LLaDAAdapter
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
    """Decode one prompt; returns ``{"text", "tokens", "nfe", "seconds"}``.

    Args:
        adapter: model adapter.
        tokenizer: the model's tokenizer (``encode``/``decode``, optional chat template).
        context: the prompt text (few-shot examples included).
        cfg: decoder configuration (``gen_length``, cache, thresholds).
        until: stop sequences; the text is cut at the first one.
        chat_template: wrap the context as a user turn (LLaDA-8B-Instruct in the repo).
        add_bos: prepend the BOS token (Dream base model in the repo).
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


def register_lm_eval():
    """Register ``swordsman_dlm`` with lm-evaluation-harness and return the class."""
    try:
        from lm_eval.api.model import LM
        from lm_eval.api.registry import register_model
    except ImportError as err:  # GPU-side optional dependency
        raise ImportError("lm-eval is required: pip install 'lm-eval>=0.4.8'") from err

    @register_model("swordsman_dlm")
    class SwordsmanLM(LM):
        """lm-eval model: generate_until only (the paper's tasks are all generative)."""

        def __init__(
            self,
            model_path: str,
            family: str = "auto",
            baseline: str | None = None,
            dtype: str = "bfloat16",
            **decoder_kwargs,
        ):
            super().__init__()
            import os

            family = _family(model_path) if family == "auto" else family
            cls = DreamAdapter if family == "dream" else LLaDAAdapter
            # Data parallel under `accelerate launch`: one replica per GPU, lm-eval shards by rank.
            self._rank = int(os.environ.get("RANK", 0))
            self._world_size = int(os.environ.get("WORLD_SIZE", 1))
            if self._world_size > 1:
                from accelerate import Accelerator

                self.accelerator = Accelerator()
            local = int(os.environ.get("LOCAL_RANK", 0))
            device = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
            self.adapter, self.tok = cls.from_pretrained(model_path, dtype=dtype, device=device)
            self.cfg = SwordsmanConfig(**_coerce(decoder_kwargs))
            self.chat = "instruct" in model_path.lower()  # repo: template only for instruct models
            self.add_bos = family == "dream"
            self.baseline = baseline or None
            self.stats: list[dict[str, Any]] = []

        def generate_until(self, requests):
            out = []
            for req in requests:
                context, gen_kwargs = req.args
                r = generate_text(
                    self.adapter,
                    self.tok,
                    context,
                    self.cfg,
                    gen_kwargs.get("until"),
                    self.chat,
                    self.add_bos,
                    self.baseline,
                )
                self.stats.append({k: r[k] for k in ("tokens", "nfe", "seconds")})
                out.append(r["text"])
            return out

        def loglikelihood(self, requests):
            raise NotImplementedError("swordsman_dlm supports generate_until tasks only")

        def loglikelihood_rolling(self, requests):
            raise NotImplementedError("swordsman_dlm supports generate_until tasks only")

    return SwordsmanLM


def _family(model_path: str) -> str:
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
    """Throughput over a run: TPS = Σ tokens / Σ seconds, mean latency and NFE (spec §5)."""
    if not stats:
        return {"tps": float("nan"), "latency_s": float("nan"), "nfe": float("nan")}
    secs = sum(s["seconds"] for s in stats)
    return {
        "tps": sum(s["tokens"] for s in stats) / max(secs, 1e-9),
        "latency_s": secs / len(stats),
        "nfe": sum(s["nfe"] for s in stats) / len(stats),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True, help="hub id or path (LLaDA or Dream)")
    p.add_argument("--task", required=True)
    p.add_argument("--num_fewshot", type=int, default=0)
    p.add_argument("--baseline", choices=["fixed"], default=None)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--out", default="outputs/swordsman_paper")
    p.add_argument("--decoder", nargs="*", default=[], help="key=value SwordsmanConfig fields")
    a = p.parse_args(argv)
    import lm_eval

    cls = register_lm_eval()
    kw = dict(item.split("=", 1) for item in a.decoder)
    lm = cls(a.model, baseline=a.baseline, **kw)
    res = lm_eval.simple_evaluate(
        model=lm,
        tasks=[a.task],
        num_fewshot=a.num_fewshot,
        batch_size=1,
        limit=a.limit,
        confirm_run_unsafe_code=True,
    )
    if res is None:  # non-zero ranks get no results under data parallel
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    payload = {"results": res["results"], "throughput": summarize(lm.stats), "args": vars(a)}
    name = f"{a.model.replace('/', '_')}_{a.task}_{a.baseline or 'swordsman'}.json"
    (out / name).write_text(json.dumps(payload, indent=2, default=str))
    logger.info("wrote %s", out / name)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
