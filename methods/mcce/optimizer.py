"""The MCCE co-evolution loop (official `algorithm/MOO.py::run`).

Two chat models take turns, one generation each: a frozen explorer (GPT-4o in the paper) and a
trainable local model (Qwen2.5-7B). Each generation makes ⌊pop/n_off⌋ calls with two random parents
and a crossover or mutation prompt; children are canonicalised, deduplicated against all history and
evaluated; survivors are chosen from the whole archive by :func:`nsga2_so_select`; generation 1 mates
within the whole initial population. After every explorer+local pair of generations the local model
gets one preference round on similarity-synthesised pairs from the shared trajectory memory (DPO; SFT
and GRPO as baselines). With a ``checkpoint_dir`` every LLM and oracle call is journaled and the
state is checkpointed every generation, so a run killed at any point resumes with no call repeated
or lost (:mod:`methods.mcce.resume`, our inference; the official code has no resume).
"""

from __future__ import annotations

import copy
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from common.checkpoint import CallJournal

from .config import MODES, MCCEConfig  # noqa: F401  (re-exported)
from .core import Archive, Candidate
from .dpo_data import build_similarity_pairs
from .memory import TrajectoryMemory
from .metrics import archive_metrics, hypervolume, top_k_mean
from .problems import MoleculeProblem, fitness
from .prompts import ParseStats, PromptBuilder, parse_candidates, pick_parents
from .resume import Resumable, digest
from .selection import nsga2_select, nsga2_so_select

if TYPE_CHECKING:  # the protocol of every chat model here (common.llm imports torch)
    from common.llm import ChatLLM

logger = logging.getLogger(__name__)


class LLMUnavailableError(RuntimeError):
    """The chat model kept failing; the run stops (its checkpoint allows a resume)."""


@dataclass
class MCCEResult:
    """What a run returns: the archive, the final population, the memory and the logs."""

    archive: Archive
    population: list[Candidate]
    memory: TrajectoryMemory
    history: list[dict[str, float]]
    train_log: list[dict[str, float]]
    metrics: dict[str, float]
    parse_stats: dict[str, dict[str, float]]


class MCCEOptimizer(Resumable):
    """Multi-LLM collaborative co-evolution (official `algorithm/MOO.py::run`).

    Args:
        problem: the molecule problem.
        api: the frozen explorer (``ChatLLM``); may be None in ``single_local`` mode.
        local: the trainable model (``ChatLLM`` with ``.model`` and ``.tokenizer`` for the training
            modes); may be None in ``single_api`` mode.
        cfg: search settings.
        initial: initial population strings (SMILES).
        ref_model: DPO reference; a frozen copy of ``local.model`` at start when None.
        checkpoint_dir: where the call journal and the per-generation state are written; a run
            with the same folder and settings resumes from it with no LLM or oracle call repeated
            or lost, one with other settings is refused (``CheckpointMismatch`` naming the keys).
        on_update: called after each training round (e.g. reload the vLLM engine).
        trainer_args: the training round's TRL config for the mode (``MCCEDPOConfig``,
            ``MCCESFTConfig`` or ``MCCEGRPOConfig``, built by ``train.round_args``); the class's
            official defaults when None.
    """

    def __init__(
        self,
        problem: MoleculeProblem,
        api: ChatLLM | None,
        local: ChatLLM | None,
        cfg: MCCEConfig,
        initial: list[str],
        ref_model: Any = None,
        checkpoint_dir: str | None = None,
        on_update: Any = None,
        trainer_args: Any = None,
    ) -> None:
        self.problem, self.api, self.local, self.cfg = problem, api, local, cfg
        needs = {"api": cfg.mode != "single_local", "local": cfg.mode != "single_api"}
        if needs["api"] and api is None:
            raise ValueError(f"api must be a ChatLLM in mode {cfg.mode!r}")
        if needs["local"] and local is None:
            raise ValueError(f"local must be a ChatLLM in mode {cfg.mode!r}")
        self.trains = cfg.mode in ("coevolve_dpo", "coevolve_sft", "coevolve_rl")
        if self.trains and not (hasattr(local, "model") and hasattr(local, "tokenizer")):
            raise TypeError("local must expose .model and .tokenizer in a training mode")
        self.trainer_args = None
        if self.trains:
            from .train import ROUND_CONFIGS, round_args  # TRL only for the training modes

            cls = ROUND_CONFIGS[cfg.mode]
            if trainer_args is None:
                trainer_args = round_args(cls)
            if not isinstance(trainer_args, cls):
                raise TypeError(
                    f"trainer_args must be a {cls.__name__} in mode {cfg.mode!r}, "
                    f"got {type(trainer_args).__name__}"
                )
            self.trainer_args = trainer_args
        self.ref_model = ref_model
        if self.trains and cfg.mode in ("coevolve_dpo", "coevolve_rl") and ref_model is None:
            self.ref_model = copy.deepcopy(local.model).eval()
            for p in self.ref_model.parameters():
                p.requires_grad_(False)
        self.initial = list(initial)
        self.checkpoint_dir = checkpoint_dir
        self.on_update = on_update
        self.builder = PromptBuilder(problem, n_off=cfg.n_off, style=cfg.prompt_style)
        self.rng = random.Random(cfg.seed)
        self.archive = Archive(problem, evaluator=self._evaluate)
        self.memory = TrajectoryMemory()
        self.population: list[Candidate] = []
        self.history: list[dict[str, float]] = []
        self.train_log: list[dict[str, float]] = []
        self.parse_stats = {"api": ParseStats(), "local": ParseStats()}
        self._rl_cache: dict[str, float] = {}  # F of molecules scored only as RL rewards
        self.rl_oracle_calls = 0
        self.state = {
            "generation": 0,
            "rounds_api": 0,
            "rounds_local": 0,
            "last_trigger": 0,
            "flag": 0 if cfg.first_model == "local" else 1,
            "experience": "",
            "stall": 0,
            "weights_version": 0,  # training rounds that changed the local model
        }
        self.journal: CallJournal | None = None
        self._rngs: list[tuple[str, Any]] = []
        self._saved_weights: str | None = None
        self._started = False

    # ----------------------------------------------------------------- steps
    def _call(self, model: ChatLLM, prompts: list[str]) -> list[str]:
        """One journaled ``chat_batch`` of user-turn prompts (official `model/LLM.py`), with bounded
        retries instead of the official infinite loop."""
        msgs = [[{"role": "user", "content": p}] for p in prompts]

        def chat() -> list[str]:
            err: Exception | None = None
            for _ in range(max(1, self.cfg.max_llm_failures)):
                try:
                    return [str(r) for r in model.chat_batch(msgs)]
                except Exception as e:
                    err = e
                    logger.warning("chat_batch failed (%s); retrying", e)
            raise LLMUnavailableError(
                f"chat model failed {self.cfg.max_llm_failures} times: {err}"
            ) from err

        return self._journaled("llm:" + digest(prompts), chat)

    def _initialise(self) -> None:
        """Evaluate the initial population, topped up with 'empty' prompts when fewer than
        ``pop_size`` are valid (official `algorithm/MOO.py::run` line 1)."""
        cfg = self.cfg
        self.archive.add(self.initial, origin="init", generation=0, representation="smiles")
        self.memory.init_pops = [c.value for c in self.archive.items]
        tries = 0
        filler = self.api if self.api is not None else self.local
        while len(self.archive) < cfg.pop_size and tries < 10:  # top up with 'empty' prompts
            if filler is None:
                break
            tries += 1
            prompt = self.builder.operator_prompt("empty", [])
            resp = self._call(filler, [prompt])[0]
            self.archive.add(parse_candidates(resp), origin="init", generation=0)
        if len(self.archive) < 2:
            raise ValueError(
                f"initial population has {len(self.archive)} valid molecules after sanitising; "
                "at least 2 are needed"
            )
        if cfg.budget <= len(self.archive):
            raise ValueError(
                f"budget must exceed the initial population ({len(self.archive)}), got {cfg.budget}"
            )
        if cfg.initial_population == "all":  # official: the whole evaluated initial population
            self.population = list(self.archive.items)
        else:
            self.population = nsga2_so_select(self.archive.items, cfg.pop_size)
        self._log_generation("init", [])

    def _which(self) -> str:
        """The model of this generation: strict alternation, local first (official
        `algorithm/MOO.py::run` line 4); the single-model modes always use theirs."""
        mode = self.cfg.mode
        if mode == "single_api":
            return "api"
        if mode == "single_local":
            return "local"
        self.state["flag"] = 1 - self.state["flag"]
        return "local" if self.state["flag"] == 1 else "api"

    def _operator(self) -> str:
        """Crossover / mutation / explore drawn with the config's probabilities (official
        `algorithm/MOO.py::run` line 8)."""
        c = self.cfg
        return self.rng.choices(
            ["crossover", "mutation", "explore"],
            [c.crossover_prob, c.mutation_prob, c.explore_prob],
        )[0]

    def generation(self) -> list[Candidate]:
        """One generation (official `algorithm/MOO.py::run` lines 4–17); returns the new candidates."""
        cfg, st = self.cfg, self.state
        who = self._which()
        st[f"rounds_{who}"] += 1
        st["generation"] += 1
        model = self.api if who == "api" else self.local
        left = cfg.budget - len(self.archive)
        n_calls = max(1, min(cfg.pop_size // cfg.n_off, left // cfg.n_off))
        prompts, parents = [], []
        for _ in range(n_calls):
            par = pick_parents(self.population, self.rng, 2)
            use_exp = st["experience"] and self.rng.random() < cfg.experience_prob
            prompts.append(
                self.builder.operator_prompt(
                    self._operator(), par, st["experience"] if use_exp else ""
                )
            )
            parents.append(par)
        responses = self._call(model, prompts)
        children: list[str] = []
        for p, par, r in zip(prompts, parents, responses):
            kids = parse_candidates(r, self.parse_stats[who])
            children.extend(kids)
            self.memory.add(
                p,
                r,
                [{"value": c.value, "property": c.raw, "total": c.total} for c in par],
                kids,
                who,
                st["generation"],
            )
        new = self.archive.add(children, origin=who, generation=st["generation"], max_new=left)
        st["stall"] = 0 if new else st["stall"] + 1
        self.population = nsga2_so_select(self.archive.items, cfg.pop_size) or self.population
        self._log_generation(who, new)
        if cfg.experience_prob > 0 and len(self.archive) > 100:
            # official PromptTemplate.make_experience_prompt: 'best_f' (top 100 by F) or
            # 'pareto' (crowding-distance NSGA-II, model/util.py::nsga2_selection), p = 0.5 each
            good = (
                self.archive.top_k(100)
                if self.rng.random() < 0.5
                else nsga2_select(self.archive.items, 100)
            )
            ep = self.builder.experience_prompt(
                self.archive, st["experience"], self.rng, good, repo_compat=cfg.repo_compat
            )
            st["experience"] = self._call(model, [ep])[0]
        if self.trains and self._should_train():
            self._train_round()
        return new

    def _should_train(self) -> bool:
        """A round after every api+local pair while the budget lasts (official
        `algorithm/MOO.py::run` line 16)."""
        st = self.state
        lo = min(st["rounds_api"], st["rounds_local"])
        return (
            lo >= 1
            and lo - st["last_trigger"] >= self.cfg.train_every
            and len(self.archive) < self.cfg.budget
        )

    def _train_round(self) -> None:
        """Similarity pairs from the latest records, then one DPO (or SFT baseline) round on the
        local model against the original reference (official `algorithm/MOO.py::run` lines 17–20,
        `tools/makerldata_dpov3.py`, `training/train_dpo.py`)."""
        cfg, st = self.cfg, self.state
        st["last_trigger"] = min(st["rounds_api"], st["rounds_local"])
        if len(self.archive) < cfg.min_archive_for_training:
            logger.warning(
                "training round skipped: archive has %d < %d molecules",
                len(self.archive),
                cfg.min_archive_for_training,
            )
            return
        if cfg.mode == "coevolve_rl":
            self._rl_round()
            return
        ds = build_similarity_pairs(
            self.memory.latest(cfg.n_pairs_max),
            self.archive,
            self.problem.similarity,
            to_text=self.problem.to_text,
            alpha_top=cfg.alpha_top,
            alpha_ext=cfg.alpha_ext,
            alpha_bottom=cfg.alpha_bottom,
            bands=cfg.bands,
            s_max=cfg.s_max,
            n_pairs_max=cfg.n_pairs_max,
            k=cfg.n_off,
            rng=self.rng,
            conversational=cfg.conversational,
            sep=cfg.response_sep,
        )
        from .train import run_dpo_round, run_sft_round

        st["weights_version"] += 1
        if cfg.mode == "coevolve_dpo":
            log = run_dpo_round(
                self.local.model, self.ref_model, self.local.tokenizer, ds, self.trainer_args
            )
        else:
            log = run_sft_round(self.local.model, self.local.tokenizer, ds, self.trainer_args)
        log["generation"] = float(st["generation"])
        log["n_unique"] = float(len(self.archive))
        self.train_log.append(log)
        if self.on_update is not None:
            self.on_update(self.local)

    def rl_reward(self, prompts: list[Any], completions: list[Any], **_: Any) -> list[float]:
        """GRPO reward of the RL baseline (our baseline; not in the official code), in TRL's reward-function signature.

        A completion's reward is the mean F of its valid candidates that are new to the archive,
        0 when all its valid candidates are repeats, and ``trainer_args.invalid_reward`` when none is
        valid. Scoring new molecules calls the objectives outside the archive (they are not added
        and do not consume the search budget); the count is kept in ``rl_oracle_calls``.
        """
        out: list[float] = []
        for comp in completions:
            text = comp[-1]["content"] if isinstance(comp, list) else str(comp)
            canon = [self.problem.canonicalize(c) for c in parse_candidates(text)]
            valid = [c for c in canon if c is not None]
            if not valid:
                out.append(float(self.trainer_args.invalid_reward))
                continue
            fresh = sorted({c for c in valid if c not in self.archive})
            if not fresh:
                out.append(0.0)
                continue
            todo = [c for c in fresh if c not in self._rl_cache]
            if todo:
                tot = fitness(self.problem.transform(self._evaluate(todo)))  # [n]
                self._rl_cache.update(zip(todo, (float(x) for x in tot)))
                self.rl_oracle_calls += len(todo)
            out.append(float(np.mean([self._rl_cache[c] for c in fresh])))
        return out

    def _rl_round(self) -> None:
        """One GRPO round on the latest prompts with :meth:`rl_reward` (our baseline; not in the
        official code)."""
        cfg, st = self.cfg, self.state
        recs = self.memory.latest(cfg.n_pairs_max)
        prompts: list[Any] = [
            [{"role": "user", "content": r["prompt"]}] if cfg.conversational else r["prompt"]
            for r in recs
        ]
        from .train import run_rl_round

        st["weights_version"] += 1
        log = run_rl_round(
            self.local.model,
            self.local.tokenizer,
            prompts,
            self.rl_reward,
            self.trainer_args,
            ref=self.ref_model,
        )
        log["generation"] = float(st["generation"])
        log["n_unique"] = float(len(self.archive))
        log["rl_oracle_calls"] = float(self.rl_oracle_calls)
        self.train_log.append(log)
        if self.on_update is not None:
            self.on_update(self.local)

    def _log_generation(self, who: str, new: list[Candidate]) -> None:
        """Per-generation HV of the top 100 and Top-10 F (official `algorithm/MOO.py::log_results`)."""
        items = self.archive.items
        self.history.append(
            {
                "generation": float(self.state["generation"]),
                "model": who,
                "n_unique": float(len(items)),
                "hypervolume": hypervolume(items, ref=self.cfg.hv_ref, top=self.cfg.hv_top),
                "top10_f": top_k_mean(items, 10),
                "new": float(len(new)),
                "new_mean_f": float(np.mean([c.total for c in new])) if new else float("nan"),
            }
        )

    # ------------------------------------------------------------------- run
    def run(self, max_generations: int | None = None) -> MCCEResult:
        """Run until the budget of unique valid molecules is spent (official `algorithm/MOO.py::run` line 21)."""
        self._open_checkpoint()
        if not self._started and not self._load_checkpoint():
            self._initialise()
            self.save_checkpoint()
        self._started = True
        done = 0
        while len(self.archive) < self.cfg.budget:
            if max_generations is not None and done >= max_generations:
                break
            if self.state["stall"] >= self.cfg.max_stall_generations:
                logger.warning("stopping: no new molecule for %d generations", self.state["stall"])
                break
            self.generation()
            done += 1
            self.save_checkpoint()
        return self.result()

    def result(self) -> MCCEResult:
        """The run's metrics, overall and per model (official `algorithm/MOO.py::log_results`)."""
        finished = len(self.archive) >= self.cfg.budget or self.state["stall"] > 0
        metrics = archive_metrics(self.archive, self.cfg.budget, finished=True)
        metrics["auc_finished"] = float(finished)
        if self.cfg.mode == "coevolve_rl":
            metrics["rl_oracle_calls"] = float(self.rl_oracle_calls)
        for who in ("api", "local"):
            own = [c for c in self.archive.items if c.origin == who]
            st = self.archive.stats(who)
            if st["generated"]:
                metrics[f"{who}_validity"] = st["validity"]
                metrics[f"{who}_uniqueness"] = st["uniqueness"]
                metrics[f"{who}_mean_f"] = float(np.mean([c.total for c in own])) if own else 0.0
                metrics[f"{who}_n"] = float(len(own))
                metrics[f"{who}_parse_malformed"] = float(self.parse_stats[who].malformed)
                metrics[f"{who}_no_tag_responses"] = float(self.parse_stats[who].no_tag_responses)
        self.memory.final_pops = [c.value for c in self.population]
        return MCCEResult(
            archive=self.archive,
            population=self.population,
            memory=self.memory,
            history=self.history,
            train_log=self.train_log,
            metrics=metrics,
            parse_stats={k: v.as_dict() for k, v in self.parse_stats.items()},
        )
