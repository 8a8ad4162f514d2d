"""Chain execution Φ(s, τ) of a linear workflow (spec §3.1) and the sandboxed tool primitives.

``c_0 = ""`` and ``c_l = exec(s_l, τ, c_{l−1})``. An agent step is one chat call whose prompt
holds the role profile, the task and the previous content; a tool step is a deterministic
function of the previous content. ``None`` stands for FAILURE and ends the chain. Model-generated
code is only ever run by ``compiler_tool``: in a temporary directory, in a subprocess with
``stdin=DEVNULL``, a timeout, memory/CPU/file-size limits, a scrubbed environment and, where the
kernel allows it, no network (``common.sandbox``).
"""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from common.sandbox import child_limits, network_isolation_prefix, scrubbed_env

from .primitives import CostMeter, Primitive, charge_llm_call
from .similarity import codes_to_content, parse_project

logger = logging.getLogger(__name__)

Tool = Callable[[str], "str | None"]


def agent_messages(p: Primitive, task: str, content: str) -> list[dict[str, str]]:
    """The chat prompt of one agent step (role profile + task + previous content)."""
    system = (
        f"You are {p.name}, a {p.role or 'software engineer'}. {p.profile}\n"
        f"Thought pattern: {p.reasoning or 'reasoning'}."
    )
    user = (
        f"Task:\n{task}\n\nPrevious content:\n{content or '(empty)'}\n\n"
        "Return the FULL project: for each file one line 'File: <name>' followed by exactly one"
        " fenced code block."
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class WorkflowExecutor:
    """Runs primitives and chains, charging every call to a ``CostMeter``.

    Args:
        llm: A ``common.llm.ChatLLM`` (``OpenAIChat`` on the paper path, a deterministic stand-in
            in the toy). Agent calls are charged under ``agent`` by
            :func:`~methods.agentxray.primitives.charge_llm_call`: the API's ``usage`` when the
            client reports it (``UsageOpenAIChat``), else a real tokenizer's count of prompt
            and reply.
        tools: Tool name → ``f(content) -> new content | None`` (None or an exception = FAILURE).
        cost_meter: Shared token meter.
    """

    def __init__(self, llm: Any, tools: Mapping[str, Tool], cost_meter: CostMeter) -> None:
        if not hasattr(llm, "chat"):
            raise TypeError(f"llm must implement chat(messages) -> str, got {type(llm).__name__}")
        self.llm, self.tools, self.meter = llm, dict(tools), cost_meter
        self.failures = 0
        self.no_code = 0

    def step(self, p: Primitive, task: str, content: str) -> str | None:
        """Execute one primitive on the previous content; ``None`` means FAILURE."""
        if p.kind == "tool":
            fn = self.tools.get(p.name)
            if fn is None:
                raise ValueError(
                    f"no implementation for tool {p.name!r}; have {sorted(self.tools)}"
                )
            self.meter.charge("tool", 0)  # tools make no LLM call
            try:
                out = fn(content)
            except Exception as exc:  # a tool crash is a FAILURE (spec §8)
                logger.debug("tool %s crashed: %s", p.name, exc)
                out = None
        else:
            msgs = agent_messages(p, task, content)
            try:
                out = self.llm.chat(msgs)
            except Exception as exc:
                logger.warning("agent %s call failed: %s", p.name, exc)
                out = None
            charge_llm_call(self.meter, "agent", self.llm, msgs, out or "")
        if out is None:
            self.failures += 1
        return out

    def run(self, wf: Sequence[Primitive], task: str) -> str | None:
        """Φ(s, τ): run the chain from empty content; returns the final content or ``None``."""
        content = ""
        for p in wf:
            out = self.step(p, task, content)
            if out is None:
                return None
            content = out
        return content

    def final_output(self, content: str | None) -> str:
        """``codes_to_content(filter_code(c_L))``; empty string (reward 0) when there is no code."""
        files = parse_project(content or "")
        if not files:
            self.no_code += 1
            return ""
        return codes_to_content(files)


# ----------------------------------------------------------------------------- tools
def syntax_check(content: str) -> str | None:
    """FAILURE when a ``.py`` file does not parse, else pass the content through."""
    for name, code in parse_project(content).items():
        if name.endswith(".py"):
            try:
                ast.parse(code)
            except SyntaxError:
                return None
    return content


def empty_detect(content: str) -> str | None:
    """FAILURE when there is no code or every function body is ``pass``; else pass through."""
    files = parse_project(content)
    if not files:
        return None
    for code in files.values():
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        fns = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
        if fns and all(len(f.body) == 1 and isinstance(f.body[0], ast.Pass) for f in fns):
            return None
    return content


def compiler_tool(timeout: float = 30.0, mem_mb: int = 1024) -> Tool:
    """Return a tool that runs ``main.py`` in a temp dir (subprocess, ``stdin=DEVNULL``, timeout).

    The child gets ``mem_mb`` of address space, CPU time just above ``timeout``, a scrubbed
    environment (no API keys) and a network namespace when ``unshare -rn`` works
    (:mod:`common.sandbox`).

    Passes the content through when it runs cleanly; otherwise appends the error and a request
    to fix it, so the next agent can react (spec §3.1 tool step).
    """
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, got {timeout}")

    def _compile(content: str) -> str | None:
        files = parse_project(content)
        if "main.py" not in files:
            return content
        with tempfile.TemporaryDirectory() as tmp:
            for name, code in files.items():
                path = (Path(tmp) / name).resolve()
                if Path(tmp).resolve() not in path.parents:  # safe_join
                    raise ValueError(f"unsafe file name {name!r}")
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(code)
            try:
                proc = subprocess.run(
                    [*network_isolation_prefix("auto"), sys.executable, "main.py"],
                    cwd=tmp,
                    env=scrubbed_env(tmp),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    preexec_fn=child_limits(mem_mb, int(timeout) + 2),
                )
            except subprocess.TimeoutExpired:
                return (
                    content + f"\n\nCompiler report: timeout after {timeout}s. Please fix the code."
                )
        if proc.returncode == 0:
            return content
        err = proc.stderr.strip().splitlines()[-5:]
        return content + "\n\nCompiler report:\n" + "\n".join(err) + "\nPlease fix the code."

    return _compile
