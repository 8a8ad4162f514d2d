"""Register the control tags as single tokens and initialise their embeddings (§3.1).

Following the official code, each new tag's input embedding (and the LM-head row when untied) is the
mean of the embeddings of the sub-tokens of its name without ``<``/``>`` (e.g. ``"Parallel"``,
``"/Parallel"``), and the embedding matrix is padded to a multiple of 64.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import torch

from .format import TAGS

logger = logging.getLogger(__name__)

__all__ = ["add_threadweaver_tokens"]


def add_threadweaver_tokens(model, tokenizer, tags: Sequence[str] = TAGS) -> dict[str, int]:
    """Add ``tags`` as additional special tokens; resize and mean-initialise new embeddings.

    Source: paper Section 3.1; official ``threadweaver_sft/src/utils.py``
    (``add_and_init_special_tokens``).

    Tags the tokenizer already encodes to one id (Qwen3's ``<think>``) are left untouched.

    Returns:
        tag -> token id.

    Raises:
        ValueError: if a tag still does not encode to exactly one id afterwards.
    """

    def enc(s: str) -> list[int]:
        return tokenizer(s, add_special_tokens=False)["input_ids"]

    new = [t for t in tags if len(enc(t)) != 1]
    name_ids = {t: enc(t.strip("<>")) for t in new}  # sub-tokens before the tag exists
    if new:
        tokenizer.add_special_tokens(
            {"additional_special_tokens": new}, replace_extra_special_tokens=False
        )
        if model is not None:
            model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)
            emb_in = model.get_input_embeddings().weight
            emb_out = model.get_output_embeddings()
            tied = emb_out is None or emb_out.weight.data_ptr() == emb_in.data_ptr()
            with torch.no_grad():
                for t in new:
                    tid = tokenizer.convert_tokens_to_ids(t)
                    sub = name_ids[t] or [tokenizer.eos_token_id or 0]
                    emb_in[tid] = emb_in[sub].mean(0)
                    if not tied:
                        emb_out.weight[tid] = emb_out.weight[sub].mean(0)
        logger.info("add_threadweaver_tokens: added %d tags", len(new))
    ids = {}
    for t in tags:
        e = enc(t)
        if len(e) != 1:
            raise ValueError(f"tag {t!r} encodes to {len(e)} ids {e} after registration")
        ids[t] = e[0]
    return ids
