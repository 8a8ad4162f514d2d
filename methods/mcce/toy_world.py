"""Offline stand-ins for the two LLMs of MCCE, used by the CPU toy (our CPU toy).

* The frozen explorer replaces GPT-4o: a STONED-style SELFIES editor (one-point splice crossover of
  the two parents, then 1–3 random token replacements/insertions/deletions). It is never trained.
* The trainable model replaces Qwen2.5-7B: a 2-layer GPT-2 over a word-level SELFIES tokenizer,
  warmed up on explorer-style (prompt -> children) pairs built from the NCI molecules RDKit ships,
  then improved by DPO rounds. Both speak the compact prompt ``[XO] <p>S1</p> <p>S2</p> =>`` and answer
  ``<candidate>S</candidate><candidate>S</candidate>``.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from .prompts import parse_candidates

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]
TAG_TOKENS = ["[XO]", "[MUT]", "[NEW]", "<p>", "</p>", "=>", "<candidate>", "</candidate>"]
_PARENT = re.compile(r"<p>(.*?)</p>", re.DOTALL)
# Edit prior for the explorer: common organic SELFIES tokens, [C] weighted up.
EDIT_TOKENS = [
    "[C]",
    "[C]",
    "[C]",
    "[=C]",
    "[N]",
    "[=N]",
    "[O]",
    "[=O]",
    "[F]",
    "[Cl]",
    "[S]",
    "[Branch1]",
    "[Ring1]",
    "[#C]",
    "[NH1]",
    "[C]",
    "[O]",
    "[N]",
]


def _split(s: str) -> list[str]:
    import selfies as sf

    return list(sf.split_selfies(s))


def selfies_vocab(selfies: Sequence[str]) -> list[str]:
    """Vocabulary: special + tag tokens, the semantic-robust SELFIES alphabet and all tokens seen."""
    import selfies as sf

    toks = set(sf.get_semantic_robust_alphabet()) | set(EDIT_TOKENS)
    for s in selfies:
        toks.update(_split(s))
    return SPECIAL_TOKENS + TAG_TOKENS + sorted(toks - set(SPECIAL_TOKENS) - set(TAG_TOKENS))


def build_selfies_tokenizer(vocab: Sequence[str]) -> Any:
    """Word-level tokenizer: one id per SELFIES token or tag; whitespace separates nothing else."""
    from common.tiny import word_tokenizer

    return word_tokenizer(
        {t: i for i, t in enumerate(vocab)},
        "<unk>",
        split_regex=r"\[[^\]]*\]|</?[a-z]+>|=>",
        fuse_decoder=True,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )


def tiny_gpt(
    vocab_size: int, pad_id: int, eos_id: int, n_positions: int = 384, seed: int = 0
) -> Any:
    """A 2-layer, 64-wide GPT-2 with random weights (our CPU toy), in train mode; the global RNG
    continues from the seeded init."""
    from common.tiny import tiny_causal_lm

    model, _ = tiny_causal_lm(
        "gpt2",
        hidden_size=64,
        num_attention_heads=2,
        max_position_embeddings=n_positions,
        seed=seed,
        vocab_size=vocab_size,
        fork_rng=False,
        record=False,
        train=True,
        dropout=0.0,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    return model


class SelfiesExplorer:
    """Frozen rule-based explorer: STONED-style edits on the parents' SELFIES (our CPU toy).

    Call it with chat messages; it reads the parents from ``<p>…</p>`` and answers ``n_off`` tagged
    children. Deterministic given ``seed``.
    """

    def __init__(self, n_off: int = 2, max_edits: int = 3, seed: int = 0) -> None:
        self.n_off = n_off
        self.max_edits = max_edits
        self.rng = random.Random(seed)

    def child(self, parents: Sequence[str]) -> str:
        """One child: splice crossover (p = 0.5), then 1–max_edits token edits (our CPU toy)."""
        toks = [_split(p) for p in parents if p]
        if not toks:
            return "".join(self.rng.choices(EDIT_TOKENS, k=6))
        a = self.rng.choice(toks)
        if len(toks) > 1 and self.rng.random() < 0.5:  # one-point splice crossover
            b = self.rng.choice([t for t in toks if t is not a] or toks)
            a = a[: self.rng.randint(1, max(1, len(a)))] + b[self.rng.randint(0, len(b)) :]
        a = list(a)
        for _ in range(self.rng.randint(1, self.max_edits)):
            op = self.rng.random()
            pos = self.rng.randrange(len(a) + 1)
            if op < 0.4 and a:
                a[min(pos, len(a) - 1)] = self.rng.choice(EDIT_TOKENS)
            elif op < 0.7:
                a.insert(pos, self.rng.choice(EDIT_TOKENS))
            elif len(a) > 2:
                del a[min(pos, len(a) - 1)]
        return "".join(a)

    def __call__(self, messages: list[dict]) -> str:
        parents = _PARENT.findall(messages[-1]["content"])
        return "".join(f"<candidate>{self.child(parents)}</candidate>" for _ in range(self.n_off))


class TinyLMChat:
    """``ChatLLM`` over a tiny causal LM with raw prompts (the toy tokenizer has no chat template).

    Args:
        model: a causal LM; trained in place by DPO rounds.
        tokenizer: its tokenizer (left padding).
        max_new_tokens / temperature / top_p: sampling (paper's local model: 128 / 0.7 / 0.95).
        seed: torch seed for sampling, advanced per call.
        batch_size: prompts per ``generate`` call.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_new_tokens: int = 128,
        temperature: float = 0.7,
        top_p: float = 0.95,
        seed: int = 0,
        batch_size: int = 32,
    ) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        import torch

        self.batch_size = batch_size
        self.gen = torch.Generator().manual_seed(seed)
        self.calls: list[list[dict]] = []

    def chat(self, messages: list[dict], **kw: Any) -> str:
        return self.chat_batch([messages], **kw)[0]

    def chat_batch(self, batch: list[list[dict]], **kw: Any) -> list[str]:
        import torch

        with torch.no_grad():
            self.calls.extend(batch)
            prompts = [m[-1]["content"] for m in batch]
            out: list[str] = []
            self.model.eval()
            for i in range(0, len(prompts), self.batch_size):
                chunk = prompts[i : i + self.batch_size]
                enc = self.tokenizer(chunk, return_tensors="pt", padding=True)
                torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=self.gen)))
                room = self.model.config.n_positions - enc["input_ids"].shape[1]
                gen = self.model.generate(
                    **enc,
                    do_sample=True,
                    temperature=self.temperature,
                    top_p=self.top_p,
                    max_new_tokens=max(1, min(self.max_new_tokens, room)),
                    pad_token_id=self.tokenizer.pad_token_id,
                    eos_token_id=self.tokenizer.eos_token_id,
                )  # [b, P + T]
                new = gen[:, enc["input_ids"].shape[1] :]
                out.extend(self.tokenizer.batch_decode(new, skip_special_tokens=True))
            return out


def warmup_pairs(
    smiles: Sequence[str],
    n: int,
    explorer: SelfiesExplorer,
    rng: random.Random,
    max_tokens: int = 40,
) -> list[tuple[str, str]]:
    """(prompt, response) pairs from random NCI parents and explorer children (format warm-up; our CPU toy)."""
    import selfies as sf

    pool = []
    for s in smiles:
        try:
            e = sf.encoder(s)
        except Exception:  # selfies cannot encode some valences
            continue
        if e and len(_split(e)) <= max_tokens:
            pool.append(e)
    if len(pool) < 2:
        raise ValueError("smiles must hold at least 2 encodable molecules for the warm-up")
    pairs = []
    for _ in range(n):
        a, b = rng.sample(pool, 2)
        op = "[XO]" if rng.random() < 0.8 else "[MUT]"
        prompt = f"{op} <p>{a}</p> <p>{b}</p> =>"
        pairs.append((prompt, explorer([{"role": "user", "content": prompt}])))
    return pairs


def pretrain_tiny_lm(
    model: Any,
    tokenizer: Any,
    pairs: Sequence[tuple[str, str]],
    steps: int = 200,
    batch_size: int = 32,
    lr: float = 3e-3,
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Warm-up SFT (our CPU toy): next-token loss on the response only (prompt masked). Returns losses."""
    import torch

    from common.train_loop import train_steps

    g = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    eos = tokenizer.eos_token

    def loss_fn(_step: int) -> torch.Tensor:
        batch = g.sample(list(pairs), min(batch_size, len(pairs)))
        ids, labels = [], []
        for p, r in batch:
            pi = tokenizer(p)["input_ids"]
            ri = tokenizer(r + eos)["input_ids"]
            x = (pi + ri)[: model.config.n_positions]
            ids.append(x)
            labels.append(([-100] * len(pi) + ri)[: len(x)])
        width = max(len(x) for x in ids)
        pad = tokenizer.pad_token_id
        inp = torch.tensor([x + [pad] * (width - len(x)) for x in ids])  # [B, L]
        lab = torch.tensor([y + [-100] * (width - len(y)) for y in labels])  # [B, L]
        att = (torch.arange(width)[None, :] < torch.tensor([len(x) for x in ids])[:, None]).long()
        return model(input_ids=inp, attention_mask=att, labels=lab).loss

    losses = train_steps(
        model, loss_fn, steps, optimizer=opt, grad_clip=1.0, desc="mcce warm-up", callback=progress
    )
    model.eval()
    return losses


def valid_fraction(texts: Sequence[str], canonicalize: Callable[[str], str | None]) -> float:
    """Fraction of parsed candidates that canonicalise (diagnostic for the warm-up)."""
    cands = [c for t in texts for c in parse_candidates(t)]
    return sum(canonicalize(c) is not None for c in cands) / max(1, len(cands))
