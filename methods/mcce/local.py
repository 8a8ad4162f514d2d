"""The trainable local model at paper scale (official `model/LLM.py`, paper setting): Qwen2.5-7B-Instruct behind a ``ChatLLM``.

Generation goes through vLLM when ``use_vllm`` (the engine is rebuilt from the new weights after each
DPO round, as the official code reloads its HF model) or through ``common.generation.HFGenerator``.
Sampling follows the official code: temperature 0.7, top-p 0.95, 128 new tokens, chat template with
the generation prompt.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)


class TrainableChat:
    """``ChatLLM`` over a trainable HF model, with an optional vLLM engine reloaded after updates.

    Official ``model/LLM.py`` (sampling, reload after each DPO round); wraps transformers / vLLM.

    Args:
        model: the policy (trained in place by the preference rounds).
        tokenizer: its tokenizer; must have a chat template.
        temperature / top_p / max_new_tokens: sampling (repo: 0.7 / 0.95 / 128).
        use_vllm: serve generation with vLLM (GPU); weights are exported to ``export_dir`` on reload.
        export_dir: folder for the exported policy read by vLLM.
        vllm_kwargs: engine arguments (e.g. ``gpu_memory_utilization``).
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        temperature: float = 0.7,
        top_p: float = 0.95,
        max_new_tokens: int = 128,
        use_vllm: bool = False,
        export_dir: str = "outputs/mcce/local_policy",
        vllm_kwargs: dict[str, Any] | None = None,
    ) -> None:
        from common.generation import HFGenerator, SamplingParams

        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("tokenizer must have a chat_template for the local model")
        self.model, self.tokenizer = model, tokenizer
        self.params = SamplingParams(
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p
        )
        self.use_vllm, self.export_dir = use_vllm, export_dir
        self.vllm_kwargs = dict(vllm_kwargs or {})
        self.hf = HFGenerator(model, tokenizer)
        self.engine = None
        if use_vllm:  # pragma: no cover - GPU only
            self.reload()

    def reload(self, *_: Any) -> None:  # pragma: no cover - GPU only
        """Export the current weights and rebuild the vLLM engine (after each DPO round)."""
        if not self.use_vllm:
            return
        from common.generation import VLLMGenerator

        os.makedirs(self.export_dir, exist_ok=True)
        self.model.save_pretrained(self.export_dir)
        self.tokenizer.save_pretrained(self.export_dir)
        if self.engine is not None:
            del self.engine
            import gc

            import torch

            gc.collect()
            torch.cuda.empty_cache()
        self.engine = VLLMGenerator(self.export_dir, **self.vllm_kwargs)
        logger.info("vLLM engine reloaded from %s", self.export_dir)

    def chat(self, messages: list[dict], **kw: Any) -> str:
        return self.chat_batch([messages], **kw)[0]

    def chat_batch(self, batch: Sequence[list[dict]], **kw: Any) -> list[str]:
        gen = self.engine if self.engine is not None else self.hf
        outs = gen.generate(list(batch), n=1, params=self.params)
        return [o[0].text for o in outs]
