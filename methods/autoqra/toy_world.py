"""CPU toy "AutoQRA-tiny" (our toy design): a tiny Llama pretrained on a sparse 2nd-order Markov source, a shifted
downstream source, function-preserving outlier channels, and a fake-quantisation + PEFT-LoRA evaluator.

The evaluator quantises every block to its q_ℓ (group-wise RTN), attaches LoRA with rank r_ℓ, fine-tunes the
LoRA factors for the fidelity's number of steps and reports ``perf = -CE`` on held-out task sequences.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import torch

from common.tiny import tiny_causal_lm
from common.train_loop import train_steps

from .apply import block_modules, build_quantized_lora_model
from .evaluators import EvalResult
from .memory import MemoryModel
from .space import QRConfig
from .state import array_digest

logger = logging.getLogger(__name__)


class MarkovSource:
    """Sparse Markov chain of order ``order`` (1 or 2) over ``vocab`` tokens; each context has ``support``
    successors with Dirichlet(0.5) probabilities.

    Args:
        vocab: number of tokens. support: successors per context. order: 1 or 2. seed: table seed.
    """

    def __init__(self, vocab: int = 128, support: int = 4, order: int = 2, seed: int = 0) -> None:
        if order not in (1, 2):
            raise ValueError(f"order must be 1 or 2, got {order}")
        rng = np.random.default_rng(seed)
        self.vocab, self.support, self.order = vocab, support, order
        shape = (vocab,) * order
        self.succ = rng.integers(0, vocab, size=(*shape, support))  # [V(, V), k]
        self.prob = rng.dirichlet(np.full(support, 0.5), size=shape)  # [V(, V), k]

    def shifted(self, frac: float, seed: int) -> MarkovSource:
        """A copy with ``frac`` of the context rows redrawn (the downstream task S_task)."""
        rng = np.random.default_rng(seed)
        out = MarkovSource.__new__(MarkovSource)
        out.vocab, out.support, out.order = self.vocab, self.support, self.order
        out.succ, out.prob = self.succ.copy(), self.prob.copy()
        mask = rng.random(self.succ.shape[:-1]) < frac
        n = int(mask.sum())
        out.succ[mask] = rng.integers(0, self.vocab, size=(n, self.support))
        out.prob[mask] = rng.dirichlet(np.full(self.support, 0.5), size=n)
        return out

    def sample(self, n: int, length: int, seed: int) -> torch.Tensor:
        """``n`` sequences of ``length`` tokens, ``LongTensor[n, length]``."""
        rng = np.random.default_rng(seed)
        x = np.zeros((n, length), dtype=np.int64)
        x[:, :2] = rng.integers(0, self.vocab, size=(n, 2))
        for t in range(2, length):
            ctx = (x[:, t - 2], x[:, t - 1]) if self.order == 2 else (x[:, t - 1],)
            cdf = np.cumsum(self.prob[ctx], axis=1)  # [n, k]
            j = (rng.random((n, 1)) > cdf).sum(axis=1).clip(max=self.support - 1)
            x[:, t] = self.succ[ctx][np.arange(n), j]
        return torch.from_numpy(x)


def tiny_llama(
    num_layers: int = 6, hidden: int = 64, inter: int = 176, vocab: int = 128, seed: int = 0
):
    """Random-init ``LlamaForCausalLM`` of our toy design shape (train mode); the global RNG
    continues from the seeded init."""
    model, _ = tiny_causal_lm(
        "llama",
        hidden_size=hidden,
        num_hidden_layers=num_layers,
        intermediate_size=inter,
        max_position_embeddings=128,
        seed=seed,
        vocab_size=vocab,
        fork_rng=False,
        record=False,
        train=True,
        tie_word_embeddings=False,
    )
    return model


def train_lm(model, data: torch.Tensor, steps: int, batch: int, lr: float, seed: int) -> float:
    """AdamW on the trainable parameters with random batches of ``data``; returns the last loss."""
    gen = torch.Generator().manual_seed(seed)

    def loss_fn(_step: int) -> torch.Tensor:
        ids = data[torch.randint(0, len(data), (batch,), generator=gen)]
        return model(input_ids=ids, labels=ids).loss

    # AdamW's default weight decay (0.01), as the hand-written loop had; the model stays in train mode.
    losses = train_steps(model, loss_fn, steps, lr=lr, weight_decay=0.01, desc="autoqra train")
    return losses[-1] if losses else float("nan")


@torch.no_grad()
def eval_ce(model, data: torch.Tensor, batch: int = 256) -> float:
    """Mean next-token cross-entropy on ``data``."""
    model.eval()
    tot, n = 0.0, 0
    for i in range(0, len(data), batch):
        ids = data[i : i + batch]
        tot += float(model(input_ids=ids, labels=ids).loss) * len(ids)
        n += len(ids)
    return tot / n


def inject_outliers(
    model,
    blocks=(1, 4),
    channels: int = 4,
    factor: float = 16.0,
    seed: int = 0,
    mode: str = "mlp",
):
    """Function-preserving outlier weights (our toy design); the model's outputs are unchanged.

    ``mode="mlp"``: ``up_proj`` rows ×factor with the matching ``down_proj`` columns ÷factor.
    ``mode="input"``: ``channels`` hidden channels of the RMSNorm gains ÷factor and the matching input
    columns of ``q/k/v_proj`` and ``gate/up_proj`` ×factor, the pattern of LLM activation outliers: every
    row of those six projections then holds ``channels`` weights ``factor`` times larger than the rest, so
    each quantisation group's range, hence its step, grows ~``factor``-fold and low bit-widths erase the
    ordinary weights of the block.
    """
    if mode not in ("mlp", "input"):
        raise ValueError(f"mode must be 'mlp' or 'input', got {mode!r}")
    rng = np.random.default_rng(seed)
    mods = block_modules(model)
    layers = model.model.layers
    for b in blocks:
        if b >= len(mods):
            continue
        with torch.no_grad():
            if mode == "mlp":
                up, down = mods[b]["mlp.up_proj"], mods[b]["mlp.down_proj"]
                idx = torch.as_tensor(rng.choice(up.weight.shape[0], size=channels, replace=False))
                up.weight[idx] *= factor
                down.weight[:, idx] /= factor
                continue
            hidden = mods[b]["self_attn.q_proj"].weight.shape[1]
            idx = torch.as_tensor(rng.choice(hidden, size=channels, replace=False))
            groups = {
                "input_layernorm": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
                "post_attention_layernorm": ("mlp.gate_proj", "mlp.up_proj"),
            }
            for norm_name, projs in groups.items():
                getattr(layers[b], norm_name).weight[idx] /= factor
                for name in projs:
                    mods[b][name].weight[:, idx] *= factor
    return model


@dataclass
class Fidelity:
    """Steps and number of training sequences of one fidelity level."""

    steps: int
    n_train: int


class FakeQuantEvaluator:
    """Our toy evaluator: fake-quantise, attach per-block LoRA, fine-tune, ``perf = -CE`` on held-out data.

    Args:
        base: the full-precision base model (not modified).
        memory: Eq. 1 model (reports ``mem_bytes``).
        train: task training sequences [N, T]. heldout: task evaluation sequences [M, T].
        fidelities: ``{"low"|"high"|"full": Fidelity}``.
        lr, batch: AdamW learning rate and batch size (shared by every arm).
        group_size: quantisation group size. seed: training seed (LoRA init and batch order).
    """

    def __init__(
        self,
        base,
        memory: MemoryModel,
        train,
        heldout,
        fidelities,
        lr=3e-3,
        batch=16,
        group_size=32,
        seed=0,
    ):
        self.base, self.memory, self.train, self.heldout = base, memory, train, heldout
        self.fidelities = {
            k: v if isinstance(v, Fidelity) else Fidelity(**v) for k, v in fidelities.items()
        }
        self.lr, self.batch, self.group_size, self.seed = lr, batch, group_size, seed
        self.calls: dict[str, int] = {}

    def settings(self) -> dict:
        """What a checkpoint folder is bound to: the training settings and digests of the base
        weights and the task data (``state.evaluator_settings``)."""
        sd = self.base.state_dict()
        return {
            "fidelities": self.fidelities, "lr": self.lr, "batch": self.batch,
            "group_size": self.group_size, "seed": self.seed,
            "base": array_digest(*(sd[k] for k in sorted(sd))),
            "train": array_digest(self.train), "heldout": array_digest(self.heldout),
        }  # fmt: skip

    def evaluate(self, cfg: QRConfig, fidelity: str) -> EvalResult:
        if fidelity not in self.fidelities:
            raise ValueError(f"fidelity must be one of {sorted(self.fidelities)}, got {fidelity!r}")
        t0 = time.perf_counter()
        fid = self.fidelities[fidelity]
        torch.manual_seed(self.seed)
        model = build_quantized_lora_model(
            self.base, cfg, backend="fake", group_size=self.group_size
        )
        train_lm(model, self.train[: fid.n_train], fid.steps, self.batch, self.lr, self.seed)
        ce = eval_ce(model, self.heldout)
        self.calls[fidelity] = self.calls.get(fidelity, 0) + 1
        mem = self.memory.total_bytes(cfg)
        return EvalResult(-ce, mem, time.perf_counter() - t0, {"ce": ce})
