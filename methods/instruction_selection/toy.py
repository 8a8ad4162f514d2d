"""The CPU toy of spec §6: "find the addition examples" in a synthetic Tulu-style pool.

A seeded pool of short instruction–response conversations from six task families (two-digit
addition is the rare target family, 3 %), queries and a held-out test set of additions phrased
differently from the pool, a character-level tokenizer, a 2-layer GPT-2 pre-trained briefly on a
mixture without addition, fine-tuning on a chosen subset, and the target loss after fine-tuning.
"""

from __future__ import annotations

import copy
import logging
import string
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from .representations import _query_parts, _segments, _supervised_ids

logger = logging.getLogger(__name__)

TARGET = "add"
FAMILIES = ("add", "sub", "reverse", "upper", "count", "echo")
_WORDS = (
    "apple river stone cloud green paper light music table chair window garden bread "
    "silver orange winter summer forest ocean candle pencil rocket planet"
).split()
_SPECIALS = ["<pad>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]


def char_tokenizer():
    """A character-level tokenizer over printable ASCII with the Tulu role tags as single tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = [c for c in string.printable if c not in _SPECIALS]
    vocab = {t: i for i, t in enumerate(_SPECIALS + chars)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=_SPECIALS[3:],
        padding_side="left",
    )


def _example(family: str, rng: np.random.Generator, target_phrasing: bool = False):
    a, b = int(rng.integers(10, 100)), int(rng.integers(10, 100))
    w = str(rng.choice(_WORDS))
    if family == "add":
        if target_phrasing:
            q = [f"Add {a} and {b}.", f"Sum {a} with {b}."][int(rng.integers(2))]
        else:
            q = [f"What is {a} plus {b}?", f"Compute {a} + {b}."][int(rng.integers(2))]
        return q, str(a + b)
    if family == "sub":
        a, b = max(a, b), min(a, b)
        q = [f"What is {a} minus {b}?", f"Compute {a} - {b}."][int(rng.integers(2))]
        return q, str(a - b)
    if family == "reverse":
        return [f"Reverse the word {w}.", f"Write {w} backwards."][int(rng.integers(2))], w[::-1]
    if family == "upper":
        return [f"Upper-case {w}.", f"Write {w} in capitals."][int(rng.integers(2))], w.upper()
    if family == "count":
        return [f"How many letters in {w}?", f"Count the letters of {w}."][
            int(rng.integers(2))
        ], str(len(w))
    return [f"Repeat: {w}", f"Say {w} again."][int(rng.integers(2))], w


def make_pool(n: int = 3000, target_frac: float = 0.03, seed: int = 0) -> list[dict]:
    """The synthetic pool: ``target_frac`` addition, 10 % subtraction, the rest split evenly.

    Returns:
        Rows ``{"id", "dataset", "messages"}`` (``dataset`` is the family, used only for diagnostics).
    """
    if n < 10 or not 0 < target_frac < 0.5:
        raise ValueError(f"need n >= 10 and 0 < target_frac < 0.5, got n={n}, {target_frac=}")
    rng = np.random.default_rng(seed)
    n_add, n_sub = max(1, round(target_frac * n)), round(0.1 * n)
    rest = n - n_add - n_sub
    counts = {"add": n_add, "sub": n_sub}
    for k, fam in enumerate(FAMILIES[2:]):
        counts[fam] = rest // 4 + (1 if k < rest % 4 else 0)
    fams = [f for f, c in counts.items() for _ in range(c)]
    rng.shuffle(fams)
    rows = []
    for i, fam in enumerate(fams):
        q, a = _example(fam, rng)
        msgs = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        rows.append({"id": f"pool-{i}", "dataset": fam, "messages": msgs})
    return rows


def make_target(n: int, seed: int) -> list[dict]:
    """Target-task examples (addition, phrased unlike the pool) as query rows ``{prompts, labels}``."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        q, a = _example(TARGET, rng, target_phrasing=True)
        rows.append({"prompts": f"<|user|>\n{q}\n<|assistant|>\n", "labels": a})
    return rows


def tiny_gpt(tokenizer, n_layer: int = 2, n_embd: int = 64, seed: int = 0) -> nn.Module:
    """A random-init GPT-2 (2 layers, 4 heads) sized for the character vocabulary."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=128,
        n_layer=n_layer,
        n_head=4,
        n_embd=n_embd,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return GPT2LMHeadModel(cfg).eval()


def _encode_pool(rows: Sequence[dict], tokenizer) -> list[tuple[list[int], list[int]]]:
    eos = tokenizer.eos_token
    return [_supervised_ids(_segments(r["messages"], eos), tokenizer, 128) for r in rows]


def _encode_queries(rows: Sequence[dict], tokenizer) -> list[tuple[list[int], list[int]]]:
    eos = tokenizer.eos_token
    out = []
    for r in rows:
        p, lab = _query_parts(r)
        out.append(_supervised_ids([(p, False), (lab + eos, True)], tokenizer, 128))
    return out


def _batch(items: Sequence[tuple[list[int], list[int]]], pad: int):
    T = max(len(i) for i, _ in items)
    ids = torch.tensor([i + [pad] * (T - len(i)) for i, _ in items])  # [b, T] right-padded
    lab = torch.tensor([y + [-100] * (T - len(y)) for _, y in items])  # [b, T]
    att = torch.tensor([[1] * len(i) + [0] * (T - len(i)) for i, _ in items])  # [b, T]
    return ids, att, lab


def train_steps(
    model: nn.Module,
    items: Sequence[tuple[list[int], list[int]]],
    steps: int,
    batch_size: int,
    lr: float,
    seed: int,
    pad: int,
) -> nn.Module:
    """``steps`` AdamW steps on batches drawn with replacement from ``items`` (assistant-only loss)."""
    rng = np.random.default_rng(seed)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(steps):
        idx = rng.integers(0, len(items), size=batch_size)
        ids, att, lab = _batch([items[i] for i in idx], pad)
        loss = model(input_ids=ids, attention_mask=att, labels=lab).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def target_loss(model: nn.Module, items: Sequence[tuple[list[int], list[int]]], pad: int) -> float:
    """Mean token cross-entropy on the label tokens of target examples (the query/test loss)."""
    total, count = 0.0, 0
    for s in range(0, len(items), 64):
        ids, att, lab = _batch(items[s : s + 64], pad)
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]  # [b, T-1, V]
        tgt = lab[:, 1:]  # [b, T-1]
        ce = nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            tgt.reshape(-1),
            ignore_index=-100,
            reduction="sum",
        )
        total += float(ce)
        count += int((tgt != -100).sum())
    return total / count


def pretrain_base(tokenizer, steps: int, seed: int = 0, n_layer: int = 2, n_embd: int = 64):
    """The toy base model: a tiny GPT-2 trained on a generic mixture **without** addition."""
    model = tiny_gpt(tokenizer, n_layer=n_layer, n_embd=n_embd, seed=seed)
    if steps > 0:
        rng = np.random.default_rng(seed + 10_000)
        rows = []
        for i in range(min(2000, 32 * steps)):
            fam = FAMILIES[1 + i % (len(FAMILIES) - 1)]
            q, a = _example(fam, rng)
            rows.append(
                {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
            )
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            train_steps(
                model, _encode_pool(rows, tokenizer), steps, 32, 3e-3, seed, tokenizer.pad_token_id
            )
    return model


def finetune_copy(
    base: nn.Module, items, steps: int, batch_size: int, lr: float, seed: int, pad: int
):
    """Fine-tunes a deep copy of ``base`` (the base stays untouched)."""
    model = copy.deepcopy(base)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return train_steps(model, items, steps, batch_size, lr, seed, pad)
