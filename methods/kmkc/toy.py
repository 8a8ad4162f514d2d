"""CPU toy (ours, not in the paper): a synthetic fact world with well-seen, conflicting and never-seen tiers.

A tiny GPT-2 is trained from scratch on question → object pairs: tier A facts are seen often with the
right object, tier B with the right object 60% and a distractor 40% of the time, tier C never. We then
(1) sample K answers per question and check the structural decay law, (2) assign regions with the
rule and compare them to the designed tiers, and (3) compare CGKE (region-specific augmentation) with
uniform SFT at the same number of SFT items, steps and learning rate.

Tokens: ``<q> R S <a> O [not O'] <eos>``; the answer is the single object token after ``<a>``.
"""

from __future__ import annotations

import json
import logging
import random
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.llm import ScriptedChat
from common.metrics import mean_over_seeds
from common.threads import torch_threads
from common.tiny import tiny_causal_lm
from common.tracking import progress, pyplot
from common.train_loop import train_steps

from .config import ToyConfig
from .decay_law import bin_by_uncertainty, fit_structural_decay
from .metrics import expected_calibration_error
from .profile import SampleOut, build_profile
from .regions import REGIONS, RegionConfig, assign_regions
from .signals import sequence_confidence, sequence_nll
from .toy_sft import cgke_pool, sft_arm_pairs, sft_steps

logger = logging.getLogger(__name__)

TIERS = ("A", "B", "C")
EXPECTED_REGION = {"A": "mastered", "B": "confused", "C": "missing"}
SPECIALS = ["<pad>", "<q>", "<a>", "<eos>", "is", "not"]
SEQ_LEN = 10


class FactWorld:
    """Vocabulary, facts and tier labels of one seed."""

    def __init__(self, cfg: ToyConfig, seed: int) -> None:
        rng = random.Random(seed)
        n_s = 3 * cfg.n_per_tier
        self.tokens = (
            SPECIALS
            + [f"R{i}" for i in range(cfg.n_relations)]
            + [f"S{i}" for i in range(n_s)]
            + [f"O{i}" for i in range(cfg.n_objects)]
        )
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.object_ids = torch.tensor([self.ids[f"O{i}"] for i in range(cfg.n_objects)])
        self.facts = []  # (question, gold, distractor, tier)
        for s in range(n_s):
            o, d = rng.sample(range(cfg.n_objects), 2)
            tier = TIERS[s // cfg.n_per_tier]
            self.facts.append((f"R{s % cfg.n_relations} S{s}", f"O{o}", f"O{d}", tier))
        self.gold = {q: g for q, g, _, _ in self.facts}
        self.distractor = {q: d for q, _, d, _ in self.facts}

    def encode(self, question: str, answer: str) -> list[int]:
        words = ["<q>", *question.split(), "<a>", *answer.split(), "<eos>"][:SEQ_LEN]
        return [self.ids[w] for w in words] + [0] * (SEQ_LEN - len(words))


def _batch(world: FactWorld, pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.tensor([world.encode(q, a) for q, a in pairs])  # [B, L]
    a_pos = (ids == world.ids["<a>"]).float().argmax(1)  # [B]
    pos = torch.arange(SEQ_LEN)[None]
    # Loss on the answer tokens only (after <a>, through <eos>), never on padding.
    labels = torch.where((pos > a_pos[:, None]) & (ids != 0), ids, torch.full_like(ids, -100))
    return ids, labels


def make_model(world: FactWorld, cfg: ToyConfig, seed: int):
    """The toy's random-init GPT-2 (train mode); the global RNG continues from the seeded init."""
    model, _ = tiny_causal_lm(
        "gpt2",
        hidden_size=cfg.hidden,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        max_position_embeddings=SEQ_LEN,
        seed=seed,
        vocab_size=len(world.tokens),
        fork_rng=False,
        record=False,
        train=True,
        bos_token_id=1,
        eos_token_id=3,
        pad_token_id=0,
    )
    return model


def train(model, world: FactWorld, pairs, steps: int, lr: float, batch: int, seed: int) -> float:
    """AdamW on answer tokens; returns the last loss."""
    rng = random.Random(seed)

    def loss_fn(_step: int) -> torch.Tensor:
        ids, labels = _batch(world, [pairs[rng.randrange(len(pairs))] for _ in range(batch)])
        return model(input_ids=ids, attention_mask=(ids != 0).long(), labels=labels).loss

    losses = train_steps(model, loss_fn, steps, lr=lr, desc="kmkc train")
    model.eval()
    return losses[-1] if losses else float("nan")


def prompt_ids(world: FactWorld, questions: list[str], template: str = "qa") -> torch.Tensor:
    """The 4-token prompts ``[N, 4]``: ``qa`` <q> R S <a> (the training template), ``reversed``
    <q> S R <a>, ``statement`` <q> S R is (the epistemic-foundation items' wording, no context)."""
    if template == "qa":
        return torch.tensor([world.encode(q, "")[:4] for q in questions])
    tail = {"reversed": "<a>", "statement": "is"}[template]
    words = [["<q>", *reversed(q.split()), tail] for q in questions]
    return torch.tensor([[world.ids[w] for w in ws] for ws in words])


@torch.no_grad()
def answer_logprobs(
    model, world: FactWorld, questions: list[str], template: str = "qa"
) -> torch.Tensor:
    """Log-probabilities of the answer token (objects only; −inf elsewhere): ``[N, V]``."""
    ids = prompt_ids(world, questions, template)  # [N, 4]
    logits = model(input_ids=ids).logits[:, -1].float()  # [N, V]
    # Deviation: answers are constrained to object tokens (a one-token answer space, as a QA
    # verifier would extract); log-probs are renormalised over the objects.
    masked = torch.full_like(logits, float("-inf"))
    masked[:, world.object_ids] = logits[:, world.object_ids]
    return torch.log_softmax(masked, -1)


def profile_model(model, world: FactWorld, cfg: ToyConfig, seed: int):
    """K samples per question (temperature T) → behavioural profiles (Fig. 2)."""
    g = torch.Generator().manual_seed(seed)
    qs = [f[0] for f in world.facts]
    lp = answer_logprobs(model, world, qs)  # [N, V]
    draws = torch.multinomial(torch.softmax(lp / cfg.temperature, -1), cfg.k, True, generator=g)
    profiles = []
    for i, q in enumerate(qs):
        samples = [
            SampleOut(text=world.tokens[t], token_logprobs=[float(lp[i, t])]) for t in draws[i]
        ]
        profiles.append(build_profile(q, [world.gold[q]], samples, qid=q))
    return profiles


def greedy_eval(
    model, world: FactWorld, withheld: set[str] | None = None, template: str = "qa"
) -> dict[str, float]:
    """Greedy accuracy (overall and per tier) and equal-mass ECE with c = exp(−U), asked in
    ``template`` (:func:`prompt_ids`).

    With ``withheld`` (questions whose facts the model never saw), also their mean confidence.
    """
    qs = [f[0] for f in world.facts]
    lp = answer_logprobs(model, world, qs, template)  # [N, V]
    top = lp.argmax(-1)  # [N]
    u = sequence_nll(lp.gather(1, top[:, None]), torch.ones(len(qs), 1, dtype=torch.bool))
    conf = sequence_confidence(u).numpy()
    correct = np.array([world.tokens[t] == world.gold[q] for t, q in zip(top.tolist(), qs)])
    out = {"acc": float(correct.mean())}
    tiers = np.array([f[3] for f in world.facts])
    for t in TIERS:
        out[f"acc_{t}"] = float(correct[tiers == t].mean())
    out["ece"] = expected_calibration_error(conf, correct, n_bins=10)
    out["mean_conf"] = float(conf.mean())
    if withheld:
        held = np.array([q in withheld for q in qs])
        out["conf_withheld"] = float(conf[held].mean())
        out["conf_answerable"] = float(conf[~held].mean())
    return out


def word_tokenizer(world: FactWorld):
    """A word-level ``PreTrainedTokenizerFast`` over the toy vocabulary (for TRL's GRPO)."""
    from common.tiny import word_tokenizer

    return word_tokenizer(
        dict(world.ids), "<pad>", pad_token="<pad>", eos_token="<eos>", padding_side="left"
    )


def calibrate(
    model, world: FactWorld, cfg: ToyConfig, regions: dict[str, str], arm: str, seed: int, out: str
) -> None:
    """One calibration arm (toy step 7): plain GRPO or CDKC on all questions, in place."""
    from datasets import Dataset

    from common.rl import GroupAdvantageGRPOTrainer, cpu_grpo_kwargs

    from .trainer import CDKCConfig, CDKCTrainer

    qs = [f[0] for f in world.facts]
    ds = Dataset.from_dict(
        {
            "prompt": [f"<q> {q} <a>" for q in qs],
            "gold": [world.gold[q] for q in qs],
            "region": [regions[q] for q in qs],
        }
    )

    def first_word_correct(completions, gold, **kwargs):  # E5 on a one-token answer space
        return [float(c.split()[:1] == [g]) for c, g in zip(completions, gold, strict=True)]

    lam = {
        "mastered": [1e-2 * cfg.cdkc_scale, 1e-3 * cfg.cdkc_scale],
        "confused": [3e-3 * cfg.cdkc_scale, 3e-3 * cfg.cdkc_scale],
        "missing": [1e-3 * cfg.cdkc_scale, 1e-2 * cfg.cdkc_scale],
    }
    args = CDKCConfig(
        **cpu_grpo_kwargs(
            output_dir=out,
            max_steps=cfg.grpo_steps,
            learning_rate=cfg.grpo_lr,
            num_generations=cfg.grpo_generations,
            per_device_train_batch_size=cfg.grpo_generations * cfg.grpo_prompts_per_step,
            max_completion_length=3,
            beta=cfg.grpo_beta,
            seed=seed,
        ),
        calibration_mode=cfg.cdkc_mode,
        signal=cfg.cdkc_signal,
        region_weights=lam,
    )
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = world.ids["<eos>"]
    trainer_cls = CDKCTrainer if arm == "cdkc" else GroupAdvantageGRPOTrainer
    trainer = trainer_cls(
        model=model,
        reward_funcs=first_word_correct,
        args=args,
        train_dataset=ds,
        processing_class=word_tokenizer(world),
    )
    trainer.train()
    model.eval()


def toy_generator(world: FactWorld) -> ScriptedChat:
    """A grounded stand-in for the augmentation LLM: it reads the gold from the prompt (our toy)."""

    def reply(messages):
        text = messages[-1]["content"]
        m = re.search(r"Question: (R\d+ S\d+)", text)
        if m is None:  # a consistency re-ask: the question itself, possibly reversed
            words = text.split()
            q = " ".join(sorted(words, key=lambda w: w[0] != "R"))
            return world.gold.get(q, "")
        q = m.group(1)
        r, s = q.split()
        gold = world.gold[q]
        if "neighbouring" in text:  # boundary expansion: the reversed question
            return json.dumps([{"question": f"{s} {r}", "answer": gold}])
        if "explanations" in text:  # structural disambiguation: contrast with the wrong answers
            wrong = re.search(r"wrongly: (.*)", text).group(1).replace(",", " ").split()
            wrong = [w.upper() for w in wrong if w.upper() in world.ids] or [world.distractor[q]]
            return json.dumps([{"explanation": f"not {wrong[i % len(wrong)]}"} for i in range(8)])
        if "background" in text:  # epistemic foundation: the fact as a statement, then the QA
            return json.dumps([{"background": f"{s} {r} is {gold}", "question": q}] * 8)
        return "[]"

    return ScriptedChat(reply)


def _calibration(model, world, cfg, profiles, cgke_pairs, state, calib_arms, seed) -> dict:
    """Step 7: CGKE SFT with a share of tier C withheld, then GRPO vs CDKC (paper Fig. 2's
    calibration stage) from that checkpoint."""
    metrics: dict = {}
    c_subjects = [q.split()[1] for q, _, _, t in world.facts if t == "C"]
    n_hold = round(cfg.withhold_c * len(c_subjects))
    held_subjects = set(random.Random(seed + 3).sample(c_subjects, n_hold))
    withheld = {q for q, _, _, _ in world.facts if q.split()[1] in held_subjects}
    kept = [(a, b) for a, b in cgke_pairs if not (set(f"{a} {b}".split()) & held_subjects)]
    model.load_state_dict(state)
    train(model, world, kept, cfg.sft_steps, cfg.sft_lr, cfg.batch_size, seed + 2)
    metrics["cgke_calib_init"] = greedy_eval(model, world, withheld)
    calib_state = {k: v.clone() for k, v in model.state_dict().items()}
    regions = {p.id: p.region for p in profiles}
    for arm in calib_arms:
        model.load_state_dict(calib_state)
        with tempfile.TemporaryDirectory() as tmp:
            calibrate(model, world, cfg, regions, arm, seed, tmp)
        metrics[arm] = greedy_eval(model, world, withheld)
    return metrics


def pretrain_and_profile(cfg: ToyConfig, seed: int):
    """Pretrain on tiers A/B, profile, fit the decay law and assign regions (toy steps 1-2):
    ``(world, model, state, profiles, metrics, diag)``; ``state`` is the pretrained checkpoint."""
    random.seed(seed)
    np.random.seed(seed)
    world = FactWorld(cfg, seed)
    pre = []
    for q, g, d, tier in world.facts:
        if tier == "A":
            pre += [(q, g)] * cfg.reps_seen
        elif tier == "B":
            pre += [(q, g)] * cfg.reps_conflict_right + [(q, d)] * cfg.reps_conflict_wrong
    model = make_model(world, cfg, seed)
    pre_loss = train(model, world, pre, cfg.pretrain_steps, cfg.lr, cfg.batch_size, seed)
    state = {k: v.clone() for k, v in model.state_dict().items()}

    # (1) Structural decay law on per-question (Ū, p̂).
    profiles = profile_model(model, world, cfg, seed)
    u = np.array([p.U_mean for p in profiles])
    acc = np.array([p.p_hat for p in profiles])
    x, y, _ = bin_by_uncertainty(u, acc, n_bins=cfg.n_bins)
    fit = fit_structural_decay(x, y)

    # (2) Regions (rule; the tiny model cannot self-evaluate) vs designed tiers.
    rcfg = RegionConfig(mastered_threshold=cfg.mastered_threshold, stable_kappa=cfg.stable_kappa)
    assign_regions(profiles, rcfg)
    tiers = [f[3] for f in world.facts]
    confusion = {t: {r: 0 for r in REGIONS} for t in TIERS}
    for t, p in zip(tiers, profiles, strict=True):
        confusion[t][p.region] += 1
    agree = float(np.mean([p.region == EXPECTED_REGION[t] for t, p in zip(tiers, profiles)]))
    metrics = {
        "profile": {
            "decay_a": fit.a,
            "decay_b": fit.b,
            "decay_c": fit.c,
            "decay_r2": fit.r2,
            "decay_spearman": fit.spearman,
            "region_agreement": agree,
        },
        "base": greedy_eval(model, world, template=cfg.eval_template),
    }
    diag = {
        "pretrain_loss": pre_loss,
        "confusion": confusion,
        "bins": {"x": x.tolist(), "y": y.tolist()},
    }
    return world, model, state, profiles, metrics, diag


def run_seed(cfg: ToyConfig, seed: int, arms: list[str]) -> tuple[dict, dict]:
    """One seed: pretrain, profile, regions, then each SFT arm from the same checkpoint."""
    world, model, state, profiles, metrics, diag = pretrain_and_profile(cfg, seed)
    pool, questions, aug_stats = cgke_pool(world, profiles, cfg, toy_generator(world))
    data = sft_arm_pairs(world, pool, questions, cfg, seed)
    for arm in [a for a in arms if a in data]:
        model.load_state_dict(state)
        steps = sft_steps(cfg, len(data[arm]))
        train(model, world, data[arm], steps, cfg.sft_lr, cfg.batch_size, seed + 2)
        metrics[arm] = greedy_eval(model, world, template=cfg.eval_template)
        metrics[arm]["n_sft_items"] = float(len(data[arm]))
    calib_arms = [a for a in arms if a in ("grpo", "cdkc")]
    if calib_arms:
        metrics.update(_calibration(model, world, cfg, profiles, pool, state, calib_arms, seed))
    diag["augmentation"] = aug_stats
    return metrics, diag


def _plot(diags: dict, path: Path) -> None:
    plt = pyplot()
    import numpy as np

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for seed, d in diags.items():
        x, y = np.array(d["bins"]["x"]), np.array(d["bins"]["y"])
        ax.scatter(x, y, s=14, label=f"bins, seed {seed}")
        f = d["fit"]
        if f["a"] == f["a"]:  # not NaN
            xs = np.linspace(x.min(), x.max(), 100)
            ax.plot(xs, f["a"] * np.exp(-f["b"] * xs) + f["c"], lw=1)
    ax.set_xlabel("mean sequence NLL Ū (nats)")
    ax.set_ylabel("accuracy over K samples")
    ax.set_title("KMKC toy: structural decay law")
    ax.legend(fontsize=7)
    from common.tracking import save_plot

    save_plot(fig, path)


@torch_threads(1)  # tiny GPT-2: one thread is as fast, and safe on a shared machine
def run_toy(run: Any) -> dict[str, float]:
    """``stage=toy``: decay law, regions vs tiers, CGKE vs uniform SFT, GRPO vs CDKC."""
    import time

    from common.tracking import write_results

    tc, arms, cfg = run.method.toy, list(run.method.arms), run.cfg
    t0 = time.time()
    seeds = [int(run.seed) + s for s in tc.seeds]
    per_seed, diags = [], {}
    for seed in progress(seeds, desc="kmkc seeds", unit="seed"):
        m, d = run_seed(tc, seed, arms)
        d["fit"] = {k: m["profile"][f"decay_{k}"] for k in ("a", "b", "c")}
        per_seed.append(m)
        diags[str(seed)] = d
    metrics = mean_over_seeds(per_seed, std_keys=("acc", "ece"))
    _plot(diags, Path(run.run_dir) / "decay_law.png")
    return write_results(
        run.run_dir,
        "kmkc",
        metrics,
        cfg=cfg,
        extra={"diagnostics": diags},
        wall_time_s=time.time() - t0,
        notes=(
            f"Fact world: 3 tiers x {tc.n_per_tier} facts (A seen {tc.reps_seen}x, B "
            f"{tc.reps_conflict_right}:{tc.reps_conflict_wrong} right:distractor, C unseen); GPT-2 "
            f"{tc.layers}x{tc.hidden} from scratch, {tc.pretrain_steps} steps; K={tc.k} samples at "
            f"T={tc.temperature}; SFT arms: same #items, {tc.sft_steps} steps, lr {tc.sft_lr}, batch "
            f"{tc.batch_size}; seeds {seeds}. profile: decay-law fit a*exp(-b*U)+c on {tc.n_bins} "
            "equal-count bins and rule-region agreement with the designed tiers; acc: greedy "
            "accuracy (acc_A/B/C per tier); ece: 10 equal-mass bins, c = exp(-U). Calibration "
            f"stage: {tc.withhold_c:.0%} of tier C withheld from a second CGKE SFT, then GRPO vs "
            f"CDKC ({tc.cdkc_mode} mode, {tc.cdkc_signal}, λ×{tc.cdkc_scale}), {tc.grpo_steps} "
            f"steps, G={tc.grpo_generations}."
        ),
    )
