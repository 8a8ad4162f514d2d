"""Client-side fork/join orchestrator over any completion engine (§3.2, Fig. 3).

The model writes ``<Outlines>`` sequentially; when a request stops on ``</Outlines>`` the orchestrator
reads the outline numbers and issues one request per thread whose prompt is the context plus
``"\\n<Thread>\\nN:"``; the thread answers (ending at ``</Thread>``) are concatenated in order, the join
suffix is appended and sequential decoding resumes. Everything works on token ids, so the engine can be
HF ``generate``, vLLM or an OpenAI-compatible completions server with prefix caching; no attention or
position tricks are needed at inference.

Deviation: the official loop is ``async`` per trajectory; here :meth:`ParallelOrchestrator.run_many`
advances many trajectories in lock-step and batches all requests of one phase into one engine call
(the same requests, issued concurrently).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from .engines import CompletionEngine, EngineCompletion, HFGenerateEngine, VLLMEngine
from .format import (
    CONCLUSION_CLOSE,
    CONCLUSION_OPEN,
    JOIN_SUFFIX,
    OUTLINE_NUM_RE,
    TAGS,
    thread_header,
)
from .metrics import Stats, parallel_stats
from .trie import Unit

logger = logging.getLogger(__name__)

__all__ = [
    "CompletionEngine",
    "EngineCompletion",
    "HFGenerateEngine",
    "OrchestratorConfig",
    "ParallelOrchestrator",
    "Rollout",
    "VLLMEngine",
    "tag_ids",
]


@dataclass
class OrchestratorConfig:
    """Orchestrator settings (§3.2, App. B)."""

    budget_total: int = 40000  # total generated tokens over all branches, App. B
    max_model_len: int = 40960  # context limit of one request, App. B
    max_iters: int = 32  # official code's loop guard
    join_suffix: str = JOIN_SUFFIX  # "\n</Parallel>" (paper); "\n" for official-code parity
    temperature: float = 1.0  # App. B (rollout and eval)
    top_p: float = 1.0
    parallel: bool = True  # False = hybrid AR mode: one request per trajectory, tags are text
    #: official ``<Conclusion>`` mode (``no_conclusion=false``): join with CONCLUSION_OPEN instead
    #: of ``join_suffix``; a rollout ended inside a block closes with an empty conclusion
    conclusion: bool = False

    def __post_init__(self):
        for name in ("budget_total", "max_model_len", "max_iters"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class Rollout:
    """One orchestrated trajectory: the joined response and every request issued (units)."""

    prompt_ids: list[int]
    response_ids: list[int]
    units: list[Unit]
    finish_reason: str
    stats: Stats
    malformed: Counter = field(default_factory=Counter)
    #: 1 for response tokens the model generated, 0 for tokens the orchestrator inserted
    #: (thread headers, ``</Thread>`` repairs, join suffix); same length as ``response_ids``.
    generated_mask: list[int] = field(default_factory=list)


def tag_ids(tokenizer) -> dict[str, int]:
    """Map each tag of :data:`TAGS` (and ``"eos"``) to its single token id.

    Source: paper Section 3.1 (control tags as single tokens); engineering check.

    Raises:
        ValueError: a tag that does not encode to exactly one id, or no EOS token.
    """
    ids = {}
    for tag in TAGS:
        enc = tokenizer(tag, add_special_tokens=False)["input_ids"]
        if len(enc) != 1:
            raise ValueError(
                f"tag {tag!r} encodes to {len(enc)} ids {enc}; call add_threadweaver_tokens first"
            )
        ids[tag] = enc[0]
    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer has no eos_token_id; the orchestrator needs one to stop")
    ids["eos"] = int(tokenizer.eos_token_id)
    return ids


@dataclass
class _State:
    prompt: list[int]
    ctx: list[int]
    gen: list[int] = field(default_factory=list)
    gen_mask: list[int] = field(default_factory=list)
    units: list[Unit] = field(default_factory=list)
    phase: str = "SEQ"
    nums: list[str] = field(default_factory=list)
    iters: int = 0
    finish: str = ""
    malformed: Counter = field(default_factory=Counter)


class ParallelOrchestrator:
    """Run the fork/join state machine of §3.2 on a :class:`CompletionEngine`.

    Example::

        orch = ParallelOrchestrator(HFGenerateEngine(model, tok.pad_token_id), tok, cfg)
        rollout = orch.run(prompt_ids)  # rollout.response_ids, rollout.units, rollout.stats.longest
    """

    def __init__(self, engine: CompletionEngine, tokenizer, cfg: OrchestratorConfig | None = None):
        if not hasattr(engine, "complete"):
            raise TypeError(f"engine must implement complete(...), got {type(engine).__name__}")
        self.engine, self.tok = engine, tokenizer
        self.cfg = cfg or OrchestratorConfig()
        self.ids = tag_ids(tokenizer)
        self._enc_cache: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (cached, no special tokens); engineering,
        not in the paper.
        """
        if text not in self._enc_cache:
            self._enc_cache[text] = list(self.tok(text, add_special_tokens=False)["input_ids"])
        return self._enc_cache[text]

    def run(self, prompt_ids: Sequence[int]) -> Rollout:
        """Orchestrate one prompt (paper Section 3.2; official
        ``single_turn_agent_loop.py``).
        """
        return self.run_many([prompt_ids])[0]

    def _remaining(self, st: _State, extra: int = 0) -> int:
        return min(
            self.cfg.budget_total - len(st.gen), self.cfg.max_model_len - len(st.ctx) - extra
        )

    def _guard(self, st: _State) -> bool:
        """Mark a state DONE if a guard fires; return whether it is still active."""
        if st.iters >= self.cfg.max_iters:
            st.finish = "max_iters"
        elif len(st.gen) >= self.cfg.budget_total:
            st.finish = "length"
        elif len(st.ctx) >= self.cfg.max_model_len:
            st.finish = "max_model_len"
        else:
            return True
        st.phase = "DONE"
        return False

    def _outline_numbers(self, ctx: list[int]) -> list[str]:
        """Outline numbers after the last ``<Outlines>`` of ``ctx`` (deduplicated, in order).

        As the official ``ParallelBranchingController._extract_outline_numbers``: with no
        ``<Outlines>`` in the context there is nothing to fork (``[]``, the rollout stays
        sequential) instead of reading outline numbers from the whole context.
        """
        opener = self.ids["<Outlines>"]
        starts = [i for i, t in enumerate(ctx) if t == opener]
        if not starts:
            return []
        text = self.tok.decode(ctx[starts[-1] :], skip_special_tokens=False)
        return list(dict.fromkeys(OUTLINE_NUM_RE.findall(text)))

    def _seq_step(self, states: list[_State]) -> None:
        eos, close = self.ids["eos"], self.ids["</Outlines>"]
        stops = [close, eos] if self.cfg.parallel else [eos]
        outs = self.engine.complete(
            [s.ctx for s in states], stops, [self._remaining(s) for s in states],
            self.cfg.temperature, self.cfg.top_p,
        )  # fmt: skip
        for st, out in zip(states, outs):
            st.units.append(Unit(st.ctx + out.ids, len(st.ctx), "seq"))
            st.ctx += out.ids
            st.gen += out.ids
            st.gen_mask += [1] * len(out.ids)
            if out.ids and out.ids[-1] == close and self.cfg.parallel:
                nums = self._outline_numbers(st.ctx)
                if nums:
                    st.phase, st.nums = "PAR", nums
                else:
                    st.malformed["outlines_without_numbers"] += 1
            if not out.ids or out.finish_reason == "length" or out.ids[-1] == eos:
                st.phase, st.finish = "DONE", "stop" if out.ids and out.ids[-1] == eos else "length"

    def _par_step(self, states: list[_State]) -> None:
        eos, t_close = self.ids["eos"], self.ids["</Thread>"]
        reqs, owners = [], []
        for st in states:
            for i, n in enumerate(st.nums):
                hdr = self.encode(thread_header(n, first=True))
                reqs.append((st.ctx + hdr, self._remaining(st, len(hdr))))
                owners.append((st, i, n, hdr))
        outs = self.engine.complete(
            [r[0] for r in reqs], [t_close, eos], [r[1] for r in reqs],
            self.cfg.temperature, self.cfg.top_p,
        )  # fmt: skip
        joined: dict[int, list[int]] = {id(st): [] for st in states}
        jmask: dict[int, list[int]] = {id(st): [] for st in states}
        ended: dict[int, bool] = {id(st): False for st in states}
        for (st, i, n, hdr), out, (prompt, _) in zip(owners, outs, reqs):
            st.units.append(Unit(prompt + out.ids, len(prompt), "thread"))
            body = list(out.ids)
            if body and body[-1] == eos:
                body = body[:-1]
                ended[id(st)] = True
            bmask = [1] * len(body)
            if not body or body[-1] != t_close:
                st.malformed["unclosed_thread"] += 1
                repair = self.encode("\n</Thread>")
                body += repair
                bmask += [0] * len(repair)
                ended[id(st)] = ended[id(st)] or out.finish_reason == "length" or not out.ids
            hdr_join = hdr if i == 0 else self.encode(thread_header(n, first=False))
            joined[id(st)] += hdr_join + body
            jmask[id(st)] += [0] * len(hdr_join) + bmask
        for st in states:
            st.ctx += joined[id(st)]
            st.gen += joined[id(st)]
            st.gen_mask += jmask[id(st)]
            st.nums = []
            if ended[id(st)] or len(st.gen) >= self.cfg.budget_total:
                close = self.encode(
                    CONCLUSION_OPEN + CONCLUSION_CLOSE if self.cfg.conclusion else "\n</Parallel>"
                )
                st.ctx += close
                st.gen += close
                st.gen_mask += [0] * len(close)
                st.phase = "DONE"
                st.finish = "length" if len(st.gen) >= self.cfg.budget_total else "thread_eos"
            else:
                join = self.encode(CONCLUSION_OPEN if self.cfg.conclusion else self.cfg.join_suffix)
                st.ctx += join
                st.gen += join
                st.gen_mask += [0] * len(join)
                st.phase = "SEQ"

    def run_many(self, prompts: Sequence[Sequence[int]]) -> list[Rollout]:
        """Orchestrate many prompts; requests of the same phase go to the engine together.

        Source: paper Section 3.2 (inference state machine); official
        ``threadweaver_rl/verl/experimental/agent_loop/single_turn_agent_loop.py``.

        Returns:
            One :class:`Rollout` per prompt; ``response_ids`` never exceeds ``budget_total``
            (``finish_reason="length"`` when cut). Malformed output is counted in
            ``Rollout.malformed`` (``outlines_without_numbers``, ``unclosed_thread``).
        """
        states = [_State(list(p), list(p)) for p in prompts]
        while True:
            active = [s for s in states if s.phase != "DONE" and self._guard(s)]
            if not active:
                break
            for s in active:
                s.iters += 1
            seq = [s for s in active if s.phase == "SEQ"]
            par = [s for s in active if s.phase == "PAR"]
            if seq:
                self._seq_step(seq)
            if par:
                self._par_step(par)
        rollouts = []
        for st in states:
            gen, gmask = st.gen, st.gen_mask
            if len(gen) > self.cfg.budget_total:
                gen, st.finish = gen[: self.cfg.budget_total], "length"
                gmask = gmask[: self.cfg.budget_total]
            stats = parallel_stats(gen, self.ids)
            rollouts.append(
                Rollout(st.prompt, gen, st.units, st.finish, stats, st.malformed, gmask)
            )
        bad = sum((r.malformed for r in rollouts), Counter())
        if bad:
            logger.warning(
                "orchestrator: malformed output over %d rollouts: %s", len(rollouts), dict(bad)
            )
        return rollouts
