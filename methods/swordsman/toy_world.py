"""CPU toy for Swordsman: a constituent grammar and a tiny masked-diffusion LM.

Grammar. Phrases come in 4 categories of fixed lengths (3, 4, 5, 6). A phrase is a head token (uniform
over the category's 6 heads, the uncertain start of a constituent) followed by one of 3 fixed body
variants, each body token replaced by its slot's typo token with probability 0.15. Categories cycle
``c0, c0+1, ...`` from the prompt's phrase, so phrase extents are predictable from the prefix while the
head and variant are not: with the future masked, entropy jumps at phrase starts. A sample is
``<bos>`` + one prompt phrase + a response of ``G`` tokens: 4-8 phrases then ``<eos>`` padding.

Model. A tiny bidirectional ``BertForMaskedLM`` trained with the LLaDA masked-diffusion objective
(mask each response token with probability ``t ~ U(t_min, 1)``, loss = Σ masked CE / (t · G)).
"""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import torch

from common.train_loop import train_steps

logger = logging.getLogger(__name__)

PAD, MASK, BOS, EOS = 0, 1, 2, 3
LENGTHS = (3, 4, 5, 6)
N_HEADS = 6
N_VARIANTS = 3


@dataclass(frozen=True)
class PhraseGrammar:
    """Token layout of the toy grammar; ``vocab_size`` tokens in total.

    Our toy (deviations table "toy"): constituents whose heads are uncertain and bodies predictable, so
    the paper's entropy-reduction premise (§1: uncertainty jumps where a new constituent starts) holds.
    """

    typo_prob: float = 0.15
    min_phrases: int = 4
    max_phrases: int = 8
    gen_length: int = 48

    def __post_init__(self) -> None:
        if not 0.0 <= self.typo_prob < 1.0:
            raise ValueError(f"typo_prob must be in [0, 1), got {self.typo_prob}")
        if not 1 <= self.min_phrases <= self.max_phrases:
            raise ValueError("need 1 <= min_phrases <= max_phrases")
        longest = sum(LENGTHS[i % 4] for i in range(3, 3 + self.max_phrases))  # worst-case cycle
        if self.gen_length < longest:
            raise ValueError(
                f"gen_length must be >= {longest} to fit max_phrases, got {self.gen_length}"
            )

    # Token ids: 4 specials, then heads, then body variants, then typos.
    def head(self, c: int, h: int) -> int:
        return 4 + c * N_HEADS + h

    def _slot_offset(self, c: int) -> int:
        return sum(n - 1 for n in LENGTHS[:c])

    def body(self, c: int, v: int, k: int) -> int:
        n_slots = sum(n - 1 for n in LENGTHS)
        return 4 + 4 * N_HEADS + v * n_slots + self._slot_offset(c) + k

    def typo(self, c: int, k: int) -> int:
        n_slots = sum(n - 1 for n in LENGTHS)
        return 4 + 4 * N_HEADS + N_VARIANTS * n_slots + self._slot_offset(c) + k

    @property
    def vocab_size(self) -> int:
        return 4 + 4 * N_HEADS + (N_VARIANTS + 1) * sum(n - 1 for n in LENGTHS)

    def phrase(self, c: int, rng: random.Random) -> list[int]:
        v = rng.randrange(N_VARIANTS)
        toks = [self.head(c, rng.randrange(N_HEADS))]
        for k in range(LENGTHS[c] - 1):
            toks.append(self.typo(c, k) if rng.random() < self.typo_prob else self.body(c, v, k))
        return toks

    def sample(self, rng: random.Random) -> tuple[list[int], list[int], int]:
        """One example: (prompt ids, response ids of length G, prompt category c0).

        The prompt is left-padded with ``<pad>`` to ``1 + max(LENGTHS)`` tokens so that the response
        always starts at the same absolute position (the tiny model then only has to learn the cycle).
        """
        c0 = rng.randrange(4)
        prompt = [BOS, *self.phrase(c0, rng)]
        prompt = [PAD] * (1 + max(LENGTHS) - len(prompt)) + prompt
        resp: list[int] = []
        for i in range(rng.randint(self.min_phrases, self.max_phrases)):
            resp += self.phrase((c0 + 1 + i) % 4, rng)
        resp += [EOS] * (self.gen_length - len(resp))
        return prompt, resp, c0

    def gold_starts(self, c0: int) -> list[int]:
        """Offsets (within the response) where phrases start if the cycle continues to the end."""
        starts, pos, i = [], 0, 0
        while pos < self.gen_length:
            starts.append(pos)
            pos += LENGTHS[(c0 + 1 + i) % 4]
            i += 1
        return starts

    def parse(self, resp: list[int], c0: int) -> tuple[bool, int]:
        """Check a response; returns (valid, offset where the ``<eos>`` tail starts)."""
        pos, i = 0, 0
        n = len(resp)
        while pos < n and resp[pos] != EOS:
            c = (c0 + 1 + i) % 4
            ln = LENGTHS[c]
            ph = resp[pos : pos + ln]
            if len(ph) < ln or not self._phrase_ok(ph, c):
                return False, pos
            pos += ln
            i += 1
        return all(t == EOS for t in resp[pos:]) and i >= 1, pos

    def phrase_accuracy(self, resp: list[int], c0: int) -> float:
        """Fraction of well-formed phrases before the first ``<eos>`` (cycle segmentation)."""
        eos_at = resp.index(EOS) if EOS in resp else len(resp)
        pos, i, ok, total = 0, 0, 0, 0
        while pos < eos_at:
            c = (c0 + 1 + i) % 4
            ph = resp[pos : pos + LENGTHS[c]]
            ok += len(ph) == LENGTHS[c] and EOS not in ph and self._phrase_ok(ph, c)
            total += 1
            pos += LENGTHS[c]
            i += 1
        return ok / total if total else float("nan")

    def _phrase_ok(self, ph: list[int], c: int) -> bool:
        if ph[0] not in {self.head(c, h) for h in range(N_HEADS)}:
            return False
        variants = set(range(N_VARIANTS))
        for k, t in enumerate(ph[1:]):
            if t == self.typo(c, k):
                continue
            variants &= {v for v in range(N_VARIANTS) if self.body(c, v, k) == t}
        return bool(variants)


def tiny_mdm(
    vocab_size: int,
    hidden_size: int = 64,
    num_layers: int = 2,
    max_positions: int = 64,
    seed: int = 0,
) -> torch.nn.Module:
    """Tiny bidirectional transformer (``BertForMaskedLM``, random init) usable as a masked-diffusion LM."""
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        intermediate_size=2 * hidden_size,
        max_position_embeddings=max_positions,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        pad_token_id=PAD,
        type_vocab_size=1,
    )
    return BertForMaskedLM(config).eval()


def _batch(grammar: PhraseGrammar, rng: random.Random, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    seqs = []
    for _ in range(n):
        prompt, resp, _ = grammar.sample(rng)
        seqs.append(prompt + resp)
    return torch.tensor(seqs), 1 + max(LENGTHS)


def train_mdm(
    model: torch.nn.Module,
    grammar: PhraseGrammar,
    steps: int = 800,
    batch_size: int = 64,
    lr: float = 2e-3,
    t_min: float = 0.02,
    seed: int = 0,
    weighting: str = "elbo",
) -> list[float]:
    """Masked-diffusion training; returns the loss per step (toy model, our construction).

    ``weighting="elbo"`` is LLaDA's masked-diffusion objective ``Σ masked CE / (t · G)`` (Nie et al. 2025,
    arXiv:2502.09992, the pre-training loss); ``"mean"`` averages the CE over the masked tokens of the
    batch (no ``1/t`` factor: lower-variance gradients for the tiny toy model; our choice).
    """
    if weighting not in ("elbo", "mean"):
        raise ValueError(f"weighting must be 'elbo' or 'mean', got {weighting!r}")
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / 50) * (1 - i / steps)
    )

    def loss_fn(_step: int) -> torch.Tensor:
        ids, plen = _batch(grammar, rng, batch_size)  # [B, W]
        resp = torch.zeros_like(ids, dtype=torch.bool)
        resp[:, plen:] = True  # [B, W], the response region
        t = t_min + (1 - t_min) * torch.rand(batch_size, 1, generator=gen)  # [B, 1]
        masked = resp & (torch.rand(ids.shape, generator=gen) < t)  # [B, W]
        inp = torch.where(masked, torch.full_like(ids, MASK), ids)
        logits = model(input_ids=inp).logits  # [B, W, V]
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids, reduction="none")
        if weighting == "elbo":
            return ((ce * masked) / t).sum() / (batch_size * grammar.gen_length)
        return (ce * masked).sum() / masked.sum().clamp_min(1)

    losses = train_steps(
        model, loss_fn, steps, optimizer=opt, scheduler=sched, desc="swordsman MDM"
    )
    model.eval()
    return losses


class GrammarPosteriorLM(torch.nn.Module):
    """Exact denoiser of the phrase grammar: the Bayes-optimal masked-diffusion model (toy reference;
    our construction, deviations table "toy").

    Given a partly masked sequence ``<pad>* <bos> prompt-phrase response``, returns for every position the
    exact posterior marginal ``p(x_j | unmasked tokens)`` under ``PhraseGrammar``: the prompt's head fixes
    the category cycle (so the phrase segmentation), the number of phrases ``n`` is uniform on
    ``[min_phrases, max_phrases]``, a head is uniform over its category's heads and a body slot is the
    posterior variant mixture ``Σ_v w_v [(1 - p_typo) δ_body(c, v, k) + p_typo δ_typo(c, k)]`` with
    ``w_v ∝ Π_k p(observed_k | v)``. Tokens impossible under the grammar get likelihood ``eps`` instead of 0,
    so the posterior stays defined after an inconsistent commit. It is what a perfectly trained model would
    output, so the decoders can be compared on a model whose confidences are exactly meaningful.

    Args:
        grammar: the toy grammar.
        eps: likelihood assigned to a token the grammar cannot produce at that position.
    """

    def __init__(self, grammar: PhraseGrammar, eps: float = 1e-6) -> None:
        super().__init__()
        self.grammar = grammar
        self.eps = float(eps)
        self.prompt_len = 1 + max(LENGTHS)
        self.register_buffer("_dummy", torch.zeros(()), persistent=False)

    def _category_of_prompt(self, prompt: list[int]) -> int:
        heads = [t for t in prompt if 4 <= t < 4 + 4 * N_HEADS]
        if not heads:
            raise ValueError("prompt has no phrase head: cannot infer the category cycle")
        return (heads[0] - 4) // N_HEADS

    def _phrase_loglik(self, span: list[int], c: int) -> tuple[float, float, list[float]]:
        """(log p(obs | content), log p(obs | <eos>), variant posterior) of one phrase's tokens."""
        g, eps = self.grammar, math.log(self.eps)
        log_keep = math.log(1.0 - g.typo_prob)
        log_typo = math.log(g.typo_prob) if g.typo_prob > 0 else eps
        e_ll = sum(0.0 if t in (EOS, MASK) else eps for t in span)
        first_head = g.head(c, 0)
        if span[0] == MASK:
            h_ll = 0.0
        else:
            h_ll = -math.log(N_HEADS) if 0 <= span[0] - first_head < N_HEADS else eps
        lv = []
        for v in range(N_VARIANTS):
            ll = -math.log(N_VARIANTS)
            for k, t in enumerate(span[1:]):
                if t == MASK:
                    continue
                ll += log_keep if t == g.body(c, v, k) else log_typo if t == g.typo(c, k) else eps
            lv.append(ll)
        top = max(lv)
        z = sum(math.exp(x - top) for x in lv)
        return h_ll + top + math.log(z), e_ll, [math.exp(x - top) / z for x in lv]

    def _row(self, ids: list[int]) -> np.ndarray:
        g, p_len = self.grammar, self.prompt_len
        resp = ids[p_len:]
        n_pos = len(resp)
        c0 = self._category_of_prompt(ids[:p_len])
        starts = g.gold_starts(c0)
        probs = np.zeros((len(ids), g.vocab_size))  # [L, V]
        observed = [j for j, t in enumerate(ids) if t != MASK]
        probs[observed, [ids[j] for j in observed]] = 1.0
        phrases = []  # per phrase i: (start, category, L_i, E_i, variant posterior)
        for i, a in enumerate(starts):
            c = (c0 + 1 + i) % 4
            phrases.append((a, c, *self._phrase_loglik(resp[a : min(a + LENGTHS[c], n_pos)], c)))
        # Posterior over the number of phrases n (uniform prior on [min_phrases, max_phrases]).
        ns = list(range(g.min_phrases, g.max_phrases + 1))
        log_post = [sum(ph[2] for ph in phrases[:n]) + sum(ph[3] for ph in phrases[n:]) for n in ns]
        top = max(log_post)
        w = [math.exp(x - top) for x in log_post]
        post = [x / sum(w) for x in w]
        for i, (a, c, _, _, w_v) in enumerate(phrases):
            p_content = sum(pn for n, pn in zip(ns, post, strict=True) if n > i)
            for k in range(LENGTHS[c]):
                j = a + k
                if j >= n_pos or resp[j] != MASK:
                    continue
                row = probs[p_len + j]
                row[EOS] = 1.0 - p_content
                if k == 0:
                    row[g.head(c, 0) : g.head(c, 0) + N_HEADS] = p_content / N_HEADS
                else:
                    for v in range(N_VARIANTS):
                        row[g.body(c, v, k - 1)] += p_content * (1 - g.typo_prob) * w_v[v]
                    row[g.typo(c, k - 1)] += p_content * g.typo_prob
        return probs

    @torch.no_grad()
    def forward(self, input_ids: torch.Tensor, **_: object) -> SimpleNamespace:
        """``input_ids [B, L]`` -> ``.logits [B, L, V]`` = log posterior marginals (floored at 1e-12)."""
        if input_ids.dim() != 2 or input_ids.shape[1] <= self.prompt_len:
            raise ValueError(
                f"input_ids must be [B, L] with L > prompt length {self.prompt_len}, "
                f"got {tuple(input_ids.shape)}"
            )
        rows = np.stack([self._row(r.tolist()) for r in input_ids])
        probs = torch.from_numpy(rows).to(torch.float32)  # [B, L, V]
        return SimpleNamespace(logits=torch.log(probs.clamp_min(1e-12)))
