"""Trie-packed SFT on TRL's ``SFTTrainer`` (§3.3, App. B).

:class:`TrieSFTTrainer` changes two things relative to ``trl.SFTTrainer``: batches come from
:class:`TrieCollator` (ancestor mask + depth positions) and the loss is the exact parent-gather loss
(the official code uses the shifted flat loss, which mis-targets the first token of every extra
branch; see the doc's deviations). Examples are :class:`Packed` tries or dicts with ``"units"``;
TRL's own dataset preparation is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import trl

from common.config import CheckpointingNames, checkpointing_kwargs

from .config import check_mask_impl, knob
from .trie import Packed, TrieCollator, packed_forward, parent_gather_loss

__all__ = ["SFT_MODES", "TrieSFTConfig", "TrieSFTTrainer", "packed_dataset", "trie_sft_config"]

#: ``trie``: every orchestrator request packed in one trie (§3.3); ``ar``: the plain
#: autoregressive baseline of the official ``sft_autoregressive.py`` (the full trajectory only,
#: causal attention, loss on the response; the tags are ordinary tokens of the text).
SFT_MODES = ("trie", "ar")


@dataclass
class TrieSFTConfig(CheckpointingNames, trl.SFTConfig):
    """``SFTConfig`` with the ThreadWeaver SFT knobs (App. B defaults; saved with the run).

    ``max_length`` is the packed (trie) length: a trace whose full trajectory is longer is dropped,
    never cut mid-unit (App. B: 40,960).
    """

    sft_mode: str = knob(
        "trie",
        "'trie': trie packing + parent-gather loss (§3.3); 'ar': the plain "
        "autoregressive baseline (official sft_autoregressive.py).",
    )
    mask_impl: str = knob(
        "dense",
        "Trie mask: 'dense' additive [B,1,N,N] or 'flex' FlexAttention "
        "BlockMask (App. B; the run config's method.mask_impl sets it).",
    )
    learning_rate: float = knob(1e-5, "App. B: 1e-5 peak.")
    lr_scheduler_type: str = knob("cosine", "App. B: cosine to 0.")
    warmup_ratio: float = knob(0.05, "App. B: 5% warm-up.")
    weight_decay: float = knob(0.01, "App. B (official script 1e-4).")
    adam_beta2: float = knob(0.95, "App. B: β = (0.9, 0.95).")
    num_train_epochs: float = knob(8.0, "App. B: 8 (stage 1), 1 (2).")
    max_length: int | None = knob(40960, "App. B: packed length.")
    remove_unused_columns: bool = knob(False, "Trie columns reach the collator.")
    report_to: str | list[str] = knob("none", "No tracker.")

    def __post_init__(self):
        if self.sft_mode not in SFT_MODES:
            raise ValueError(f"sft_mode must be one of {SFT_MODES}, got {self.sft_mode!r}")
        check_mask_impl(self.mask_impl)
        if self.dataset_kwargs is None:
            self.dataset_kwargs = {"skip_prepare_dataset": True}
        super().__post_init__()


def packed_dataset(packs: list[Packed]):
    """A ``datasets.Dataset`` with one :meth:`Packed.to_dict` row per trie.

    Source: paper Section 3.3 (trie-packed training sequences); engineering.
    """
    from datasets import Dataset

    return Dataset.from_list([p.to_dict() for p in packs])


def trie_sft_config(**kwargs) -> trl.SFTConfig:
    """An ``SFTConfig`` with the settings trie batches need (no TRL preprocessing, keep columns).

    Source: engineering, not in the paper.
    """
    kwargs.setdefault("remove_unused_columns", False)
    kwargs.setdefault("dataset_kwargs", {"skip_prepare_dataset": True})
    kwargs.setdefault("report_to", "none")
    kwargs.setdefault("save_strategy", "no")
    return trl.SFTConfig(**checkpointing_kwargs(trl.SFTConfig, kwargs))


class TrieSFTTrainer(trl.SFTTrainer):
    """``SFTTrainer`` with trie packing and the parent-gather loss; everything else is TRL's."""

    def __init__(self, *args, pad_token_id: int | None = None, mask_impl: str | None = None,
                 **kwargs):  # fmt: skip
        if mask_impl is None:
            mask_impl = getattr(kwargs.get("args"), "mask_impl", "dense")
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
        """Next-token loss of a packed trie batch (paper Section 3.3, App. B;
        official ``threadweaver_sft/src/sft_threadweaver.py``).
        """
        logits = packed_forward(model, inputs)
        loss = parent_gather_loss(
            logits, inputs["input_ids"], inputs["parent"], inputs["loss_mask"]
        )
        return (loss, {"logits": logits}) if return_outputs else loss
