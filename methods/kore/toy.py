"""CPU toy for KORE: inject synthetic entity facts into a tiny Llama trained from scratch.

Old knowledge: ``(entity, relation) -> value`` facts for entities ``[0, n_old)``, pretrained in 8
phrasings and in dialogue / caption / recognition formats. New knowledge: facts of unseen entities.
Injection arms train on new facts only ("plain": phrasing 0; "aug": KORE-style augmentation with
phrasings 0-3, a dialogue, a caption and yes/no recognition items) and are scored on

* K.A: new-fact accuracy under held-out phrasings (never seen with a new entity),
* K.R: old-fact accuracy over all phrasings,
* rho: per-layer output drift ``||(W* - W0) X_old|| / ||W0 X_old||`` on held-out old prompts.
"""

from __future__ import annotations

import copy
import logging
import math
import random

import torch
from torch import nn

from common.activations import capture
from common.metrics import mean_over_seeds
from common.threads import torch_threads
from common.tiny import tiny_causal_lm
from common.tracking import progress
from common.train_loop import train_steps
from methods.kore.config import ToyConfig
from methods.kore.covariance import collect_input_covariances
from methods.kore.metrics import hars
from methods.kore.model import apply_kore, effective_weights

logger = logging.getLogger(__name__)

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# arm -> (adapter kind, injection data)
ARM_SPEC = {
    "full_ft": ("full", "plain"),
    "lora": ("lora", "plain"),
    "kore": ("kore", "aug"),
    "kore_unfrozen_A": ("kore_unfrozen", "aug"),
    "kore_no_constraint": ("lora", "aug"),
    "kore_no_aug": ("kore", "plain"),
}


class Vocab:
    """Token ids of the synthetic language."""

    PAD, BOS, DIALOG, CAP, Q, YES, NO = range(7)

    def __init__(self, cfg: ToyConfig):
        self.T0 = 7
        self.R0 = self.T0 + cfg.n_phrasings
        self.E0 = self.R0 + cfg.n_relations
        self.V0 = self.E0 + cfg.n_old + cfg.n_new
        self.size = self.V0 + cfg.n_values


def _question(vb, cfg, p, e, rel):
    """``[BOS, T_p, E, R]``, or ``[BOS, T_p, R, E]`` for a reversed phrasing."""
    if p in cfg.reversed_phrasings:
        return [vb.BOS, vb.T0 + p, vb.R0 + rel, vb.E0 + e]
    return [vb.BOS, vb.T0 + p, vb.E0 + e, vb.R0 + rel]


def _fact(vb, cfg, p, e, rel, v):
    return [*_question(vb, cfg, p, e, rel), vb.V0 + v], [4]


def _dialogue(vb, e, vals):
    ids = [vb.BOS, vb.DIALOG, vb.E0 + e]
    for rel, v in enumerate(vals):
        ids += [vb.R0 + rel, vb.V0 + v]
    return ids, list(range(4, len(ids), 2))


def _caption(vb, e, vals):
    ids = [vb.BOS, vb.CAP, vb.E0 + e] + [vb.V0 + v for v in vals]
    return ids, list(range(3, len(ids)))


def _recog(vb, e, rel, v, yes):
    return [vb.BOS, vb.E0 + e, vb.R0 + rel, vb.V0 + v, vb.Q, vb.YES if yes else vb.NO], [5]


def build_examples(cfg, vb, table, entities, phrasings, extra_formats, rng):
    """Training sequences ``(ids, answer positions)`` for some entities (see module docstring)."""
    out = []
    for e in entities:
        vals = table[e]
        for p in phrasings:
            for rel in range(cfg.n_relations):
                out.append(_fact(vb, cfg, p, e, rel, vals[rel]))
        if extra_formats:
            out.append(_dialogue(vb, e, vals))
            out.append(_caption(vb, e, vals))
            for rel in range(cfg.n_relations):
                out.append(_recog(vb, e, rel, vals[rel], True))
                wrong = rng.choice([v for v in range(cfg.n_values) if v != vals[rel]])
                out.append(_recog(vb, e, rel, wrong, False))
    return out


def collate(examples, pad):
    """Right-padded ``input_ids``, ``attention_mask``, ``labels`` (-100 except answer positions)."""
    L = max(len(ids) for ids, _ in examples)
    ids = torch.full((len(examples), L), pad, dtype=torch.long)
    labels = torch.full((len(examples), L), -100, dtype=torch.long)
    mask = torch.zeros((len(examples), L), dtype=torch.long)
    for i, (x, ans) in enumerate(examples):
        ids[i, : len(x)] = torch.tensor(x)
        mask[i, : len(x)] = 1
        for a in ans:
            labels[i, a] = x[a]
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def train(model, examples, steps, lr, batch_size, pad, seed):
    """AdamW (no weight decay) on the trainable parameters; returns the final loss."""
    full = collate(examples, pad)  # padded once; batches are index draws
    g = torch.Generator().manual_seed(seed)

    def loss_fn(_step: int) -> torch.Tensor:
        idx = torch.randint(len(examples), (batch_size,), generator=g)
        return model(**{k: v[idx] for k, v in full.items()}).loss

    losses = train_steps(model, loss_fn, steps, lr=lr, desc="kore train")
    model.eval()
    return losses[-1] if losses else math.nan


@torch.no_grad()
def fact_accuracy(model, vb, cfg, table, entities, phrasings) -> float:
    """Accuracy (%) of ``argmax over value tokens`` for the phrasings' question prompts."""
    rows, gold = [], []
    for e in entities:
        for p in phrasings:
            for rel in range(cfg.n_relations):
                rows.append(_question(vb, cfg, p, e, rel))
                gold.append(table[e][rel])
    ids = torch.tensor(rows)
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[:, -1]
    pred = logits[:, vb.V0 : vb.V0 + cfg.n_values].argmax(-1)
    return 100.0 * (pred == torch.tensor(gold)).float().mean().item()


def _prompts(vb, cfg, table, rng, n):
    rows = []
    for _ in range(n):
        e, p = rng.randrange(cfg.n_old), rng.randrange(cfg.n_phrasings)
        rel = rng.randrange(cfg.n_relations)
        rows.append(_question(vb, cfg, p, e, rel))
    return torch.tensor(rows)


def linear_names(model) -> list[str]:
    return [n for n, m in model.named_modules() if type(m) is nn.Linear and ".layers." in n]


@torch.no_grad()
def layer_inputs(model, names, ids) -> dict[str, torch.Tensor]:
    """``{name: X [tokens, d_in]}`` of every linear layer on ``ids``."""
    with capture(model, names, what="input") as store:
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return {n: store[n][0].reshape(-1, store[n][0].shape[-1]).double() for n in names}


def drift(W0, Wstar, X) -> dict[str, float]:
    """Per-layer ``||(W* - W0) X^T||_F / ||W0 X^T||_F``."""
    out = {}
    for n, x in X.items():
        w0, ws = W0[n].double(), Wstar[n].double()
        out[n] = ((ws - w0) @ x.T).norm().item() / (w0 @ x.T).norm().clamp_min(1e-12).item()
    return out


def build_base(cfg: ToyConfig, vb: Vocab, seed: int):
    """The toy's random-init Llama (eval mode); the global RNG continues from the seeded init."""
    model, _ = tiny_causal_lm(
        "llama",
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=16,
        seed=seed,
        vocab_size=vb.size,
        fork_rng=False,
        record=False,
        pad_token_id=vb.PAD,
        bos_token_id=vb.BOS,
        eos_token_id=vb.PAD,
        tie_word_embeddings=False,
    )
    return model


def matched_kore_rank(model, lora_rank: int) -> int:
    """KORE rank whose ``r * sum(d_out)`` (B only) is closest to LoRA's ``r (d_in + d_out)`` sum."""
    mods = [m for n, m in model.named_modules() if type(m) is nn.Linear and ".layers." in n]
    lora = lora_rank * sum(m.in_features + m.out_features for m in mods)
    r = max(1, round(lora / sum(m.out_features for m in mods)))
    return min(r, min(min(m.in_features, m.out_features) for m in mods))


def run_seed(cfg: ToyConfig, seed: int) -> tuple[dict[str, dict[str, float]], dict]:
    """Pretrains one base model and runs every arm on it. Returns per-arm metrics and diagnostics."""
    from peft import LoraConfig, get_peft_model

    rng = random.Random(seed)
    vb = Vocab(cfg)
    n_ent = cfg.n_old + cfg.n_new
    table = [[rng.randrange(cfg.n_values) for _ in range(cfg.n_relations)] for _ in range(n_ent)]
    old = list(range(cfg.n_old))
    new = list(range(cfg.n_old, n_ent))
    base = build_base(cfg, vb, seed)
    pre = build_examples(cfg, vb, table, old, range(cfg.n_phrasings), True, rng)
    pre_loss = train(
        base, pre, cfg.pretrain_steps, cfg.pretrain_lr, cfg.pretrain_batch, vb.PAD, seed
    )
    kr0 = fact_accuracy(base, vb, cfg, table, old, range(cfg.n_phrasings))
    ka0_raw = fact_accuracy(base, vb, cfg, table, new, cfg.heldout_phrasings)
    ka0 = max(ka0_raw, 100.0 / cfg.n_values)
    logger.info("seed %d: pretrain loss %.3f, old-fact acc %.1f%%", seed, pre_loss, kr0)
    data = {
        "plain": build_examples(cfg, vb, table, new, [0], False, rng),
        "aug": build_examples(cfg, vb, table, new, cfg.aug_phrasings, True, rng),
    }
    calib_ids = _prompts(vb, cfg, table, rng, cfg.n_calib)
    probe_ids = _prompts(vb, cfg, table, rng, cfg.n_probe)
    names = linear_names(base)
    covs = collect_input_covariances(
        base,
        [{"input_ids": calib_ids, "attention_mask": torch.ones_like(calib_ids)}],
        lambda n, m: n in names,
        normalize=cfg.normalize,
    )
    X_probe = layer_inputs(base, names, probe_ids)
    W0 = effective_weights(base)
    r_kore = cfg.kore_rank or matched_kore_rank(base, cfg.lora_rank)
    metrics = {"pretrained": {"ka": ka0_raw, "kr": kr0, "kr_drop": 0.0}}
    diag = {"pretrain_loss": pre_loss, "kore_rank": r_kore}
    for arm in cfg.arms:
        kind, data_name = ARM_SPEC[arm]
        model = copy.deepcopy(base)
        torch.manual_seed(seed)
        if kind == "full":
            for p in model.parameters():
                p.requires_grad_(True)
        elif kind == "lora":
            lc = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_rank, target_modules=TARGETS)
            model = get_peft_model(model, lc)
        else:
            model = apply_kore(model, covs, r_kore, TARGETS, freeze_A=kind == "kore")
            diag["null_energy_mean"] = sum(model.kore_null_energy.values()) / len(names)
            diag["null_energy_max"] = max(model.kore_null_energy.values())
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        loss = train(model, data[data_name], cfg.inject_steps, cfg.lr, cfg.batch_size, vb.PAD, seed)
        ka = fact_accuracy(model, vb, cfg, table, new, cfg.heldout_phrasings)
        ka_seen = fact_accuracy(model, vb, cfg, table, new, [0])
        rev = [p for p in cfg.heldout_phrasings if p in cfg.reversed_phrasings]
        fwd = [p for p in cfg.heldout_phrasings if p not in cfg.reversed_phrasings]
        ka_rev = fact_accuracy(model, vb, cfg, table, new, rev) if rev else math.nan
        ka_fwd = fact_accuracy(model, vb, cfg, table, new, fwd) if fwd else math.nan
        kr = fact_accuracy(model, vb, cfg, table, old, range(cfg.n_phrasings))
        rho = drift(W0, effective_weights(model), X_probe)
        metrics[arm] = {
            "ka": ka,
            "ka_seen_phrasing": ka_seen,
            "ka_heldout_same_order": ka_fwd,
            "ka_heldout_reversed": ka_rev,
            "kr": kr,
            "kr_drop": kr0 - kr,
            "hars": hars(max(ka, 1e-9), kr, ka0, kr0),
            "rho_mean": sum(rho.values()) / len(rho),
            "rho_max": max(rho.values()),
            "trainable_params": float(n_train),
            "final_loss": loss,
        }
        diag[f"rho/{arm}"] = rho
        logger.info("seed %d %s: %s", seed, arm, metrics[arm])
    return metrics, diag


def run_toy(run) -> dict[str, float]:
    """``stage=toy``: every arm and seed of the fact-injection toy; writes results.{json,md}."""
    import time

    from common.tracking import write_results

    tc: ToyConfig = run.method.toy
    t0 = time.time()
    seeds = [int(run.seed) + s for s in tc.seeds]
    per_seed, diags = [], {}
    with torch_threads(1):  # the toy's matmuls are tiny: extra threads only add contention
        for seed in progress(seeds, desc="kore seeds", unit="seed"):
            m, d = run_seed(tc, seed)
            per_seed.append(m)
            diags[str(seed)] = d
    metrics = mean_over_seeds(per_seed, std_keys=("hars",))
    return write_results(
        run.run_dir,
        "kore",
        metrics,
        cfg=run.cfg,
        extra={"diagnostics": diags},
        wall_time_s=time.time() - t0,
        notes=(
            f"Tiny Llama (hidden {tc.hidden_size}, {tc.num_layers} layers) pretrained on "
            f"{tc.n_old} entities x {tc.n_relations} relations; {tc.n_new} new entities injected "
            f"with {tc.inject_steps} AdamW steps, lr {tc.lr}, batch {tc.batch_size} for every arm; "
            f"LoRA r={tc.lora_rank}, KORE rank matched on trainable parameters; seeds {seeds}. "
            "ka: new facts under held-out phrasings (%); kr: old facts, all phrasings (%); "
            "rho: per-layer output drift on held-out old prompts."
        ),
    )
