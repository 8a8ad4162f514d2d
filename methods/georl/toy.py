"""Toy G1 of Geo-RL: a fact-slot captioner caught in a planted likelihood trap.

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

import torch
from torch import Tensor

from common.threads import torch_threads
from methods.georl.config import ARM_NAMES, GeoRLConfig, ToyConfig
from methods.georl.dpp import loo_advantages
from methods.georl.embed import BagOfFactsEmbedder, TextEmbedder
from methods.georl.grounding import FactPrecision
from methods.georl.reward import score_groups

logger = logging.getLogger(__name__)

__all__ = [
    "FACT_PHRASES",
    "GENERIC_PHRASE",
    "FactSlotToy",
    "ToyConfig",
    "run_toy",
    "synthetic_scenes",
]

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


class FactSlotToy:
    """The synthetic images, the trapped warm start and the RL arms (toy G1, docs/methods/georl.md)."""

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
        """MLE on the trap references (full batch SGD; the abstract's "Likelihood Trap" start,
        toy design of ours); returns detached parameters."""
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
        """``reward(ids [I, n, S], images [I]) -> advantages [I, n]`` for one arm (Geo-RL arms:
        :func:`methods.georl.reward.score_groups`; baselines: ours, docs/methods/georl.md)."""
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
        """REINFORCE from the warm start with the arm's reward (policy gradient with the LOO
        advantages, as the abstract's RL; toy loop of ours); returns detached parameters."""
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
        """Group coverage, per-caption recall, hallucination, log-volume over all images.

        The toy's metrics are ours (the abstract names exhaustive coverage and preserved
        grounding, not a metric; docs/methods/georl.md, Results)."""
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


def _plot(metrics: dict[str, dict[str, float]], path) -> None:
    from common.tracking import pyplot, save_plot

    plt = pyplot()

    fig, ax = plt.subplots(figsize=(5, 4))
    for arm, row in metrics.items():
        ax.scatter(row["hallucination"], row["group_coverage"], s=60)
        ax.annotate(
            arm,
            (row["hallucination"], row["group_coverage"]),
            xytext=(4, 4),
            textcoords="offset points",
        )
    ax.set_xlabel("hallucination rate (share of mentioned facts that are false)")
    ax.set_ylabel("group coverage (true facts in 8 samples / 6)")
    ax.set_title("Geo-RL toy G1: fact-slot captioner, likelihood trap")
    save_plot(fig, path)


def run_toy(run) -> dict[str, float]:
    """``stage=toy``: every arm of toy G1 from one warm start; writes results and the plot.

    Args:
        run: the :class:`common.config.Run` of the CLI (``run.method`` is a ``GeoRLRunConfig``).
    """
    import time
    from dataclasses import asdict

    from common.tracking import MetricsLogger, write_results

    mcfg = run.method
    # The toy's tensors are tiny: one thread avoids OpenMP spin-waits that slow it 10-30x on a
    # busy 2-core machine.
    t0 = time.time()
    with torch_threads(1):
        toy = FactSlotToy(mcfg.toy, mcfg.reward, seed=run.seed)
        mlog = MetricsLogger(run.run_dir, use_wandb=run.cfg.get("logger") == "wandb")
        warm = toy.warm_start()
        logger.info("georl toy: warm start done in %.1f s", time.time() - t0)
        embedder = None
        if "georl_minilm" in mcfg.toy.arms:
            from methods.georl.embed import MiniLMEmbedder

            embedder = MiniLMEmbedder(mcfg.embedder, cache_size=mcfg.embedder_cache_size)
        metrics: dict[str, dict[str, float]] = {}
        timings: dict[str, float] = {}
        for arm in mcfg.toy.arms:
            t = time.time()

            def on_step(step: int, row: dict[str, float], arm: str = arm) -> None:
                mlog.log({f"{arm}/{k}": v for k, v in row.items()}, step=step)

            params = toy.train_rl(warm, arm, embedder=embedder, on_step=on_step)
            metrics[arm] = toy.evaluate(params)
            timings[arm] = time.time() - t
            logger.info("georl toy: %s %s (%.1f s)", arm, metrics[arm], timings[arm])
        mlog.close()
    _plot(metrics, run.run_dir / "coverage_vs_hallucination.png")
    notes = (
        "Arms share one warm start, seed, sample stream and optimiser (REINFORCE, "
        f"lr {mcfg.toy.rl_lr}, {mcfg.toy.rl_steps} steps; georl_minilm {mcfg.toy.minilm_steps}). "
        "group_coverage: true facts mentioned by any of 8 samples / 6; caption_recall: per "
        "caption; hallucination: share of mentioned facts that are false; log_volume: mean "
        "bag-of-facts log det(S + 1e-3 I) of the 8 samples."
    )
    return write_results(
        run.run_dir,
        "georl",
        metrics,
        cfg=run.cfg,
        wall_time_s=time.time() - t0,
        extra={"arm_seconds": timings, "toy": asdict(mcfg.toy)},
        notes=notes,
    )
