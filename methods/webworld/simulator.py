"""The learned browser simulator: a gymnasium-like wrapper around a world-model LLM (upstream demo/).

The context is the multi-turn chat of paper App. N.1: ``system, user(s0, a0), assistant(s1), user(a1), ...``.
Each :meth:`WebWorldSimulator.step` appends the action, asks the model for the next page state
``s_{t+1} ~ P(. | I, h_t)`` (Eq. 1) and appends it. A sliding window keeps at most ``2 * window``
non-system messages by re-basing the first turn on the first predicted state and the action that
followed it (``rebase="first_state"``, the rule of the upstream demo's
``demo/world_model_context.py::WorldModelContext._maybe_trim``: new first turn from ``messages[1]``
(the first reply) and the action of ``messages[2]``, keep ``messages[3:]``). ``rebase="second_state"``
(drop two turn pairs at once) is kept as an option. ``history="single"`` drops the history entirely and prompts with
the last state only (the toy's single-step ablation).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from typing import Any

from methods.webworld.actions import ActionParseError, parse_action
from methods.webworld.prompts import CONTINUE_TURN, FIRST_TURN, SYSTEM_PROMPT, strip_reasoning

logger = logging.getLogger(__name__)

__all__ = ["WebWorldSimulator", "detect_format"]

_A11Y_LINE = re.compile(r"^\s*(\[[^\]\s]+\]\s+)?[A-Za-z#][\w#-]*(\s+'.*'|,|\s*$)")


def detect_format(text: str) -> str:
    """Guesses a page-state format: ``a11y``, ``html``, ``xml``, ``markdown``, ``text`` or ``empty``.

    Source: engineering, not in the paper.
    """
    s = text.strip()
    if not s:
        return "empty"
    low = s[:200].lower()
    if s.startswith("<"):
        return (
            "html"
            if any(t in low for t in ("<html", "<body", "<div", "<a ", "<!doctype"))
            else "xml"
        )
    if s.startswith("#") or s.startswith("- "):
        return "markdown"
    first = s.split("\n", 1)[0]
    return "a11y" if _A11Y_LINE.match(first) else "text"


_THINK = re.compile(r"<(think|reason)>(.*?)</\1>", re.S)


class WebWorldSimulator:
    """Gymnasium-like world-model environment: ``reset(s0)`` then ``step(action)``.

    Args:
        llm: a :class:`common.generation.Generator` (``generate``; gives truncation and log-probs)
            or a :class:`common.llm.ChatLLM` (``chat_batch``).
        window: keep at most ``2 * window`` non-system messages (paper demo: W = 10); None = all.
        history: ``"full"`` (multi-turn context) or ``"single"`` (only the last state + action).
        temperature, top_p, max_tokens: sampling settings (paper bench: 0.7, 0.8, 8192).
        stop_at_first_line: keep only the first line of each prediction (cheap title checks).
        rebase: ``"first_state"`` (default; the upstream demo's rule: drop one turn pair and re-base on
            the first predicted state) or ``"second_state"`` (drop two pairs; an earlier choice here).
        prompts: optional ``{"system", "first_turn", "continue_turn"}`` template overrides.
        return_logprobs: put ``logprob`` (mean token log-prob) and ``confidence`` (its exp, the
            geometric-mean token probability) in ``info`` when the backend gives log-probs.

    Raises:
        ValueError: on ``window < 1`` or an unknown ``history`` / ``rebase``.
    """

    def __init__(
        self,
        llm: Any,
        window: int | None = 10,
        history: str = "full",
        temperature: float = 0.7,
        top_p: float = 0.8,
        max_tokens: int = 8192,
        stop_at_first_line: bool = False,
        rebase: str = "first_state",
        prompts: dict[str, str] | None = None,
        return_logprobs: bool = False,
    ) -> None:
        if window is not None and (not isinstance(window, int) or window < 1):
            raise ValueError(f"window must be an int >= 1 or None, got {window!r}")
        if history not in ("full", "single"):
            raise ValueError(f"history must be 'full' or 'single', got {history!r}")
        if rebase not in ("second_state", "first_state"):
            raise ValueError(f"rebase must be 'second_state' or 'first_state', got {rebase!r}")
        if not (hasattr(llm, "generate") or hasattr(llm, "chat_batch")):
            raise TypeError("llm must have .generate (Generator) or .chat_batch (ChatLLM)")
        p = dict(prompts or {})
        unknown = set(p) - {"system", "first_turn", "continue_turn"}
        if unknown:
            raise ValueError(f"prompts has unknown keys {sorted(unknown)}")
        self.llm = llm
        self.window, self.history, self.rebase = window, history, rebase
        self.temperature, self.top_p, self.max_tokens = temperature, top_p, max_tokens
        self.stop_at_first_line = stop_at_first_line
        self.return_logprobs = return_logprobs
        self.system = p.get("system", SYSTEM_PROMPT)
        self.first_turn = p.get("first_turn", FIRST_TURN)
        self.continue_turn = p.get("continue_turn", CONTINUE_TURN)
        self.messages: list[dict] = []
        self.state: str | None = None
        self.n_rebases = 0

    # ------------------------------------------------------------------ context
    def reset(self, s0: str, instruction: str | None = None) -> str:
        """Starts a new episode from page state ``s0``; returns it.

        Source: official ``demo/world_model_context.py`` (episode start).

        Raises:
            ValueError: if ``s0`` is empty or whitespace only.
        """
        if not isinstance(s0, str) or not s0.strip():
            raise ValueError("s0 must be a non-empty page state")
        system = self.system if not instruction else f"{self.system}\n\nInstruction: {instruction}"
        self.messages = [{"role": "system", "content": system}]
        self.state = s0
        self.s0 = s0
        self.n_rebases = 0
        return s0

    def _user_turn(self, action: str) -> dict:
        if len(self.messages) == 1:
            return {"role": "user", "content": self.first_turn.format(state=self.s0, action=action)}
        return {"role": "user", "content": self.continue_turn.format(action=action)}

    def prompt(self, action: str) -> list[dict]:
        """The chat sent to the model for ``action`` from the current context (not committed).

        Source: paper App. N.1 chat layout; window as official
        ``demo/world_model_context.py``.
        """
        if self.state is None:
            raise RuntimeError("call reset(s0) before step/peek")
        if self.history == "single":
            user = self.first_turn.format(state=self.state, action=action)
            return [self.messages[0], {"role": "user", "content": user}]
        return [*self.messages, self._user_turn(action)]

    def _append(self, action: str, state: str) -> None:
        if self.history == "single":
            self.state = state
            return
        self.messages += [self._user_turn(action), {"role": "assistant", "content": state}]
        self.state = state
        while self.window is not None and len(self.messages) - 1 > 2 * self.window:
            if not self._rebase():
                break  # too few turns to re-base yet (window < skip)

    def _rebase(self) -> bool:
        # messages[1:] = [u0, A1, u1, A2, u2, A3, ...]; "first_state" re-bases on (A1, a1) and drops
        # u0, A1 (upstream demo/world_model_context.py), "second_state" on (A2, a2) and drops u0..A2.
        skip = 2 if self.rebase == "second_state" else 1
        conv = self.messages[1:]
        if len(conv) < 2 * skip + 2:
            return False
        new_s0 = conv[2 * skip - 1]["content"]
        action = self._action_of(conv[2 * skip]["content"])
        first = {"role": "user", "content": self.first_turn.format(state=new_s0, action=action)}
        self.messages = [self.messages[0], first, *conv[2 * skip + 1 :]]
        self.s0 = new_s0
        self.n_rebases += 1
        logger.debug(
            "simulator context re-based (%s), %d messages", self.rebase, len(self.messages)
        )
        return True

    @staticmethod
    def _action_of(user_text: str) -> str:
        m = re.search(r"Action: '(.*)'", user_text, re.S)
        if m:
            try:
                parse_action(m.group(1))
                return m.group(1)
            except ActionParseError:
                pass
        return "noop()"

    # --------------------------------------------------------------- prediction
    def _generate(self, convs: list[list[dict]]) -> list[dict]:
        outs = []
        if hasattr(self.llm, "generate"):
            from common.generation import SamplingParams

            params = SamplingParams(
                max_new_tokens=self.max_tokens,
                temperature=self.temperature,
                top_p=self.top_p if self.temperature > 0 else 1.0,
            )
            for c in self.llm.generate(convs, n=1, params=params):
                comp = c[0]
                lp = comp.logprobs
                outs.append(
                    {
                        "raw": comp.text,
                        "truncated": comp.finish_reason == "length",
                        "logprob": (sum(lp) / len(lp)) if lp else float("nan"),
                    }
                )
        else:
            # a ChatLLM carries its own sampling settings (set them when building the client)
            texts = self.llm.chat_batch(convs)
            outs = [{"raw": t, "truncated": False, "logprob": float("nan")} for t in texts]
        return outs

    def _postprocess(self, out: dict) -> tuple[str, dict]:
        raw = out["raw"]
        thoughts = [m.group(2).strip() for m in _THINK.finditer(raw)]
        pred = strip_reasoning(raw)
        if self.stop_at_first_line:
            pred = pred.split("\n", 1)[0]
        info: dict[str, Any] = {
            "raw": raw,
            "reasoning": "\n".join(thoughts),
            "truncated": bool(out["truncated"]),
            "format_mismatch": False,
        }
        if self.return_logprobs:
            info["logprob"] = out["logprob"]
            info["confidence"] = (
                math.exp(out["logprob"]) if out["logprob"] == out["logprob"] else None
            )
        want = detect_format(self.state or "")
        got = detect_format(pred)
        if got == "empty" or (not self.stop_at_first_line and got != want):
            info["format_mismatch"] = True
            pred = self.state or ""  # keep the previous state, as the upstream demo does
        return pred, info

    def peek(self, actions: Sequence[str]) -> list[tuple[str, dict]]:
        """Predicts the next state for each candidate action without changing the context.

        Source: our choice (lookahead of paper Section 5.2 without committing).

        Raises:
            ActionParseError: if a candidate is not a valid action.
        """
        for a in actions:
            parse_action(a)
        outs = self._generate([self.prompt(a) for a in actions])
        return [self._postprocess(o) for o in outs]

    def step(self, action: str) -> tuple[str, dict]:
        """Applies ``action`` in the simulator: returns ``(next_state, info)``.

        Source: official ``demo/world_model_context.py`` (predict, then append to the window).

        ``info`` has ``raw``, ``reasoning``, ``truncated`` (generation hit ``max_tokens``),
        ``format_mismatch`` (empty or wrong-format prediction: the previous state is kept) and,
        with ``return_logprobs``, ``logprob`` / ``confidence``.

        Raises:
            ActionParseError: if ``action`` is not a valid action (never sent to the model).
        """
        pred, info = self.peek([action])[0]
        self._append(action, pred)
        return pred, info

    def commit(self, action: str, state: str) -> None:
        """Appends a transition observed elsewhere (e.g. the real browser) to the context.

        Source: our choice (real-browser transitions for paper Section 5.2
        lookahead).
        """
        parse_action(action)
        if not state.strip():
            raise ValueError("state must be a non-empty page state")
        self._append(action, state)
