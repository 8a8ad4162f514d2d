"""Toy G1 of the Geo-RL spec (§6): a fact-slot captioner caught in a planted likelihood trap.

Each synthetic "image" has 6 true facts out of 30, drawn by a log-normal global salience. A caption
is 3 slots, each a categorical over the 30 facts plus a GENERIC token, with logits
``b + v_img W`` (``v_img`` the multi-hot of the image's facts). MLE on references
``[GENERIC, two most salient true facts]`` plants the trap: generic, salient-only captions. RL then
trains the same warm start with one reward per arm (grounding-only precision, Geo-RL LOO gains with
or without quality), all with REINFORCE and the same optimiser settings, and we measure how much of
each image's content a group of samples covers and how much of what it says is false.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from methods.georl.dpp import loo_advantages
from methods.georl.embed import BagOfFactsEmbedder, TextEmbedder
from methods.georl.grounding import FactPrecision
from methods.georl.reward import GeoRLConfig, score_groups

logger = logging.getLogger(__name__)

__all__ = ["FACT_PHRASES", "GENERIC_PHRASE", "FactSlotToy", "ToyConfig", "synthetic_scenes"]

# English renderings for the MiniLM variant (30 facts; each one a distinct visual concept).
FACT_PHRASES = [
    "a red car",
    "a wooden bench",
    "a black dog",
    "a tall tree",
    "a blue umbrella",
    "a street lamp",
    "a bicycle",
    "a woman in a yellow coat",
    "a stop sign",
    "a pigeon",
    "a brick wall",
    "a parked bus",
    "a child with a kite",
    "a fire hydrant",
    "a shop window",
    "a green trash can",
    "a traffic light",
    "a man reading a newspaper",
    "a white cat",
    "a flower pot",
    "a puddle",
    "a motorcycle",
    "a clock tower",
    "a wet sidewalk",
    "a delivery van",
    "a graffiti mural",
    "a cafe table",
    "a red balloon",
    "a crosswalk",
    "an old fountain",
]
GENERIC_PHRASE = "a photo of a scene"


@dataclass
class ToyConfig:
    """Sizes and optimiser settings of toy G1 (spec §6); shared by every arm."""

    n_facts: int = 30
    n_images: int = 300
    facts_per_image: int = 6
    slots: int = 3
    warm_steps: int = 3000
    warm_lr: float = 0.5
    rl_steps: int = 1500
    rl_lr: float = 0.3
    images_per_step: int = 8
    eval_samples: int = 8
    generic_quality: float = 0.2
    toy_advantage: str = "normalized"  # spec §6 pilot: group-normalised REINFORCE for every arm
    minilm_steps: int = 200
    arms: list[str] = field(
        default_factory=lambda: ["sft", "grounding", "georl", "georl_noq", "georl_minilm"]
    )


def _sgd_step(params: dict[str, Tensor], loss: Tensor, lr: float) -> None:
    # Plain SGD by hand: torch.optim's first step imports torch._dynamo (seconds on 2 cores).
    grads = torch.autograd.grad(loss, list(params.values()))
    with torch.no_grad():
        for p, g in zip(params.values(), grads):
            p -= lr * g


def _sweep_gamma(arm: str) -> float | None:
    """``georl_g<gamma>`` arms: Geo-RL (bag of facts) with that quality exponent."""
    if not arm.startswith("georl_g"):
        return None
    try:
        return float(arm.removeprefix("georl_g"))
    except ValueError:
        return None


ARM_NAMES = ("sft", "grounding", "georl", "georl_noq", "georl_minilm")


class FactSlotToy:
    """The synthetic images, the trapped warm start and the RL arms (spec §6 toy G1)."""

    def __init__(self, cfg: ToyConfig, reward_cfg: GeoRLConfig, seed: int = 0) -> None:
        if cfg.facts_per_image > cfg.n_facts:
            raise ValueError(
                f"facts_per_image ({cfg.facts_per_image}) must be <= n_facts ({cfg.n_facts})"
            )
        unknown = [a for a in cfg.arms if a not in ARM_NAMES and _sweep_gamma(a) is None]
        if unknown:
            raise ValueError(
                f"arms must be among {ARM_NAMES} or georl_g<gamma> (e.g. georl_g4), got {unknown}"
            )
        self.cfg, self.reward_cfg, self.seed = cfg, reward_cfg, seed
        self.generic = cfg.n_facts  # token id of GENERIC
        gen = torch.Generator().manual_seed(seed)
        self.salience = torch.exp(torch.randn(cfg.n_facts, generator=gen))  # log-normal
        idx = torch.stack(
            [
                torch.multinomial(self.salience, cfg.facts_per_image, generator=gen)
                for _ in range(cfg.n_images)
            ]
        )  # [I, K]
        self.true = torch.zeros(cfg.n_images, cfg.n_facts).scatter_(1, idx, 1.0)  # [I, F]
        top2 = self.salience[idx].argsort(dim=1, descending=True)[:, :2]
        self.reference = torch.cat(
            [torch.full((cfg.n_images, 1), self.generic), idx.gather(1, top2)], dim=1
        )  # [I, 3] = [GENERIC, two most salient true facts]
        self.precision = FactPrecision(cfg.n_facts, cfg.generic_quality)
        self.bag = BagOfFactsEmbedder([*FACT_PHRASES[: cfg.n_facts], GENERIC_PHRASE])

    # ----- policy ----------------------------------------------------------------------------
    def init_params(self) -> dict[str, Tensor]:
        v = self.cfg.n_facts + 1
        return {
            "b": torch.zeros(v, requires_grad=True),
            "W": torch.zeros(self.cfg.n_facts, v, requires_grad=True),
        }

    def logits(self, params: dict[str, Tensor], images: Tensor) -> Tensor:
        return params["b"] + self.true[images] @ params["W"]  # [I, V]

    def warm_start(self) -> dict[str, Tensor]:
        """MLE on the trap references (full batch SGD); returns detached parameters."""
        params = self.init_params()
        images = torch.arange(self.cfg.n_images)
        for _ in range(self.cfg.warm_steps):
            logp = torch.log_softmax(self.logits(params, images), -1)  # [I, V]
            loss = -logp.gather(1, self.reference).mean()
            _sgd_step(params, loss, self.cfg.warm_lr)
        return {k: p.detach().clone() for k, p in params.items()}

    def sample(self, params: dict[str, Tensor], images: Tensor, n: int, gen: torch.Generator):
        """``n`` captions per image: token ids ``[I, n, S]`` and their log-probs ``[I, n]``."""
        logp = torch.log_softmax(self.logits(params, images), -1)  # [I, V]
        probs = logp.detach().exp()
        ids = torch.multinomial(
            probs.repeat_interleave(n * self.cfg.slots, 0), 1, generator=gen
        ).view(len(images), n, self.cfg.slots)  # [I, n, S]
        lp = logp[:, None, :].expand(-1, n, -1).gather(2, ids).sum(-1)  # [I, n]
        return ids, lp

    # ----- rewards -----------------------------------------------------------------------------
    def render(self, ids: Tensor) -> list[str]:
        """English captions for token ids ``[..., S]`` (flattened)."""
        out = []
        for row in ids.reshape(-1, ids.shape[-1]).tolist():
            facts = [FACT_PHRASES[t] for t in dict.fromkeys(row) if t != self.generic]
            head = "A photo of a scene." if self.generic in row else "A photo."
            out.append(head + "".join(f" There is {p}." for p in facts))
        return out

    def reward_fn(
        self, arm: str, embedder: TextEmbedder | None
    ) -> Callable[[Tensor, Tensor], Tensor]:
        """``reward(ids [I, n, S], images [I]) -> advantages [I, n]`` for one arm."""
        true = self.true
        mode = self.cfg.toy_advantage
        if arm == "grounding":
            return lambda ids, img: loo_advantages(
                self.precision(ids, true[img][:, None, :]).float(), mode
            )
        gamma = 0.0 if arm == "georl_noq" else self.reward_cfg.gamma
        if _sweep_gamma(arm) is not None:
            gamma = _sweep_gamma(arm)
        rcfg = GeoRLConfig(
            n=self.cfg.eval_samples,
            gamma=gamma,
            jitter=self.reward_cfg.jitter,
            q_min=self.reward_cfg.q_min,
            advantage_mode=mode,
        )

        def reward(ids: Tensor, img: Tensor) -> Tensor:
            if arm == "georl_minilm":
                emb = embedder.encode(self.render(ids)).view(*ids.shape[:2], -1)
            else:
                emb = self.bag.encode_ids(ids)  # [I, n, V+1]
            q = self.precision(ids, true[img][:, None, :])  # [I, n]
            return score_groups(emb, q, rcfg)["advantages"].float()

        return reward

    def train_rl(
        self,
        warm: dict[str, Tensor],
        arm: str,
        embedder: TextEmbedder | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
    ) -> dict[str, Tensor]:
        """REINFORCE from the warm start with the arm's reward; returns detached parameters."""
        params = {k: v.clone().requires_grad_(True) for k, v in warm.items()}
        if arm == "sft":
            return {k: v.detach() for k, v in params.items()}
        steps = self.cfg.minilm_steps if arm == "georl_minilm" else self.cfg.rl_steps
        reward = self.reward_fn(arm, embedder)
        gen = torch.Generator().manual_seed(self.seed + 1)  # same sample stream for every arm
        n = self.reward_cfg.n
        for step in range(steps):
            images = torch.randint(self.cfg.n_images, (self.cfg.images_per_step,), generator=gen)
            ids, lp = self.sample(params, images, n, gen)
            adv = reward(ids, images)  # [I, n]
            loss = -(adv.detach() * lp).mean()
            _sgd_step(params, loss, self.cfg.rl_lr)
            if on_step is not None and step % 50 == 0:
                on_step(step, {"loss": loss.item(), "adv_abs": adv.abs().mean().item()})
        return {k: v.detach() for k, v in params.items()}

    # ----- evaluation --------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, params: dict[str, Tensor]) -> dict[str, float]:
        """Group coverage, per-caption recall, hallucination, log-volume over all images (P4)."""
        gen = torch.Generator().manual_seed(self.seed + 2)
        images = torch.arange(self.cfg.n_images)
        n = self.cfg.eval_samples
        ids, _ = self.sample(params, images, n, gen)  # [I, n, S]
        ment = self.precision.mentions(ids).float()  # [I, n, F]
        true = self.true[:, None, :]  # [I, 1, F]
        k = self.cfg.facts_per_image
        covered = ((ment * true).amax(1)).sum(-1) / k  # [I]
        recall = (ment * true).sum(-1) / k  # [I, n]
        n_ment = ment.sum()
        halluc = (ment * (1 - true)).sum() / n_ment.clamp(min=1)
        generic = (ids == self.generic).any(-1).float().mean()
        rcfg = GeoRLConfig(n=n, gamma=0.0, jitter=self.reward_cfg.jitter)
        scores = score_groups(self.bag.encode_ids(ids), torch.ones(ids.shape[:2]), rcfg)
        return {
            "group_coverage": covered.mean().item(),
            "caption_recall": recall.mean().item(),
            "hallucination": halluc.item(),
            "generic_rate": generic.item(),
            "log_volume": scores["logvol"].mean().item(),
        }


def synthetic_scenes(n: int, seed: int = 0, facts_per_scene: int = 4):
    """Text stand-in data for the trainer path: ``prompt`` (chat) + ``facts`` (list of phrases).

    Each row asks for an exhaustive description of a scene given as a list of facts; the keyword
    grounding scores a completion by how much of it is about those facts.
    """
    from datasets import Dataset

    gen = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        idx = torch.randperm(len(FACT_PHRASES), generator=gen)[:facts_per_scene].tolist()
        facts = [FACT_PHRASES[i] for i in idx]
        text = "Describe everything in this scene: " + ", ".join(facts) + "."
        rows.append({"prompt": [{"role": "user", "content": text}], "facts": facts})
    return Dataset.from_list(rows)
