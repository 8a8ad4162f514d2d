"""Trie-packed SFT on TRL's ``SFTTrainer`` (§3.3, App. B).

:class:`TrieSFTTrainer` changes two things relative to ``trl.SFTTrainer``: batches come from
:class:`TrieCollator` (ancestor mask + depth positions) and the loss is the exact parent-gather loss
(the official code uses the shifted flat loss, which mis-targets the first token of every extra
branch; spec §9.5). Examples are :class:`Packed` tries or dicts with ``"units"``; TRL's own dataset
preparation is skipped.
"""

from __future__ import annotations

import trl

from .trie import Packed, TrieCollator, packed_forward, parent_gather_loss

__all__ = ["TrieSFTTrainer", "packed_dataset", "trie_sft_config"]


def packed_dataset(packs: list[Packed]):
    """A ``datasets.Dataset`` with one :meth:`Packed.to_dict` row per trie."""
    from datasets import Dataset

    return Dataset.from_list([p.to_dict() for p in packs])


def trie_sft_config(**kwargs) -> trl.SFTConfig:
    """An ``SFTConfig`` with the settings trie batches need (no TRL preprocessing, keep columns)."""
    kwargs.setdefault("remove_unused_columns", False)
    kwargs.setdefault("dataset_kwargs", {"skip_prepare_dataset": True})
    kwargs.setdefault("report_to", "none")
    kwargs.setdefault("save_strategy", "no")
    return trl.SFTConfig(**kwargs)


class TrieSFTTrainer(trl.SFTTrainer):
    """``SFTTrainer`` with trie packing and the parent-gather loss; everything else is TRL's."""

    def __init__(self, *args, pad_token_id: int | None = None, mask_impl: str = "dense", **kwargs):
        if kwargs.get("data_collator") is None:
            tok = kwargs.get("processing_class")
            pad = pad_token_id if pad_token_id is not None else getattr(tok, "pad_token_id", None)
            if pad is None:
                raise ValueError(
                    "pad_token_id is required (or a processing_class with a pad token)"
                )
            kwargs["data_collator"] = TrieCollator(int(pad), mask_impl=mask_impl)
        super().__init__(*args, **kwargs)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        logits = packed_forward(model, inputs)
        loss = parent_gather_loss(
            logits, inputs["input_ids"], inputs["parent"], inputs["loss_mask"]
        )
        return (loss, {"logits": logits}) if return_outputs else loss
