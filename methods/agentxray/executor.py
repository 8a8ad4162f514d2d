"""Chain execution Φ(s, τ) of a linear workflow and the sandboxed tool primitives.

The paper restricts workflows to chains (its linearity hypothesis, introduction); the execution
details are official code ``agents/base.py``, ``search/tree.py`` and ``tools/``.

``c_0 = ""`` and ``c_l = exec(s_l, τ, c_{l−1})``. An agent step is one chat call whose prompt
holds the role profile, the task and the previous content; a tool step is a deterministic
function of the previous content. ``None`` stands for FAILURE and ends the chain. Model-generated
code is only ever run by ``compiler_tool``, through ``common.sandbox.run_isolated`` (bubblewrap
namespaces, no network, an empty environment, a timeout and memory/CPU/file-size limits).
"""

from __future__ import annotations

import ast
import logging
import re
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from common.sandbox import run_isolated

from .costs import CostMeter, charge_llm_call
from .primitives import Primitive
from .similarity import codes_to_content, parse_project

logger = logging.getLogger(__name__)

Tool = Callable[[str], "str | None"]


def agent_messages(p: Primitive, task: str, content: str) -> list[dict[str, str]]:
    """The chat prompt of one agent step: role profile + task + previous content (official code
    ``agents/base.py``; our wording, the official prompt text is not copied)."""
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
            :func:`~methods.agentxray.costs.charge_llm_call`: the API's ``usage`` when the
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
        """c_l = exec(s_l, τ, c_{l−1}): one primitive on the previous content; ``None`` means FAILURE
        (official code ``search/tree.py`` ``MCTSNode.action``)."""
        if p.kind == "tool":
            fn = self.tools.get(p.name)
            if fn is None:
                raise ValueError(
                    f"no implementation for tool {p.name!r}; have {sorted(self.tools)}"
                )
            self.meter.charge("tool", 0)  # tools make no LLM call
            try:
                out = fn(content)
            except Exception as exc:  # a tool crash is a FAILURE (bad-input rule)
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
        """Φ(s, τ): run the chain from c_0 = "" (official code ``experiment.py``); returns the final
        content or ``None``."""
        content = ""
        for p in wf:
            out = self.step(p, task, content)
            if out is None:
                return None
            content = out
        return content

    def final_output(self, content: str | None) -> str:
        """``codes_to_content(filter_code(c_L))`` (official code ``utils/codes.py``); empty string
        (reward 0) when there is no code."""
        files = parse_project(content or "")
        if not files:
            self.no_code += 1
            return ""
        return codes_to_content(files)


# ----------------------------------------------------------------------------- tools
_PLACEHOLDERS = {  # official tools/empty_detect.py: one regex per marker, matched line by line
    "pass": re.compile(r"\bpass\b"),
    "TODO": re.compile(r"#\s*TODO"),
    "FIXME": re.compile(r"#\s*FIXME"),
    "HACK": re.compile(r"#\s*HACK"),
    "XXX": re.compile(r"#\s*XXX"),
}
_DEF = re.compile(r"\s*def\s+(\w+)\s*\(")


def _with_report(content: str, tool: str, report: str) -> str:
    """The tool step's message to the next agent: content, the tool's report, a fix request
    (official code ``agents/base.py`` ``ToolAgent.query``; our wording)."""
    return f"{content}\n\n{tool} report:\n{report}\nPlease fix the code based on the report."


def syntax_report(content: str) -> str | None:
    """Syntax errors of every code file, one line each; ``None`` when all files parse.

    Same lines as the official ``tools/syntax_error_checker.py``:
    ``File: <name>, Line: <l>, Column: <c>, Error: <msg>``.
    """
    errors = []
    for name, code in parse_project(content).items():
        if not name.endswith(".py"):  # Deviation: the official parses every file (see docs)
            continue
        try:
            ast.parse(code)
        except SyntaxError as exc:
            errors.append(
                f"File: {name}, Line: {exc.lineno}, Column: {exc.offset}, Error: {exc.msg}"
            )
        except Exception as exc:  # e.g. null bytes
            errors.append(f"File: {name}, An unexpected parsing error occurred: {exc}")
    return "Syntax error check found issues:\n" + "\n".join(errors) if errors else None


def placeholder_report(content: str) -> str | None:
    """Lines holding ``pass`` / ``# TODO`` / ``# FIXME`` / ``# HACK`` / ``# XXX``, grouped by file
    and enclosing ``def``; ``None`` when there are none (official ``tools/empty_detect.py``)."""
    report: dict[str, dict[str | None, list[tuple[int, str, str]]]] = {}
    for name, code in parse_project(content).items():
        scope: str | None = None
        for lineno, line in enumerate(code.splitlines(), start=1):
            m = _DEF.match(line)
            if m:
                scope = m.group(1)
            for key, pat in _PLACEHOLDERS.items():
                if pat.search(line):
                    report.setdefault(name, {}).setdefault(scope, []).append(
                        (lineno, key, line.strip())
                    )
    if not report:
        return None
    lines = []
    for name, scopes in report.items():
        lines.append(f"File '{name}' contains placeholders:")
        for scope, issues in scopes.items():
            lines.append(f"  Scope '{scope or '<module>'}':")
            lines.extend(f"    Line {n}: {key} - {src}" for n, key, src in issues)
    return "\n".join(lines)


def syntax_check(content: str) -> str:
    """Syntax-checker tool step (official ``ToolAgent.query`` + ``MCTSNode.action``).

    No code, or every file parses → the content passes through unchanged. Otherwise the content
    goes on with the syntax report and a request to fix it appended, so the next agent can
    repair it; a finding never ends the chain (the toy's FAILURE variant is
    ``methods.agentxray.toy.toy_syntax_check``).
    """
    report = syntax_report(content)
    return content if report is None else _with_report(content, "Syntax check", report)


def empty_detect(content: str) -> str:
    """Placeholder-detector tool step (official ``tools/empty_detect.py`` + ``ToolAgent.query``).

    No code → pass through (official: "No code files found to check." has no effect). Lines
    with ``pass`` or ``# TODO``-style markers → the content with the report and a fix request
    appended. Deviation: with no finding the content passes through unchanged, where the
    official wraps it in its fix-request template with "No issues found" (see docs).
    """
    report = placeholder_report(content)
    return content if report is None else _with_report(content, "Empty detect", report)


def compiler_tool(timeout: float = 30.0, mem_mb: int = 1024, isolation: str = "bwrap") -> Tool:
    """Return a tool that runs ``main.py`` of the project in the sandbox (official ``tools/compiler.py``).

    The project is written to a temporary folder and run by :func:`common.sandbox.run_isolated`:
    bubblewrap namespaces (no network, read-only root, only the folder writable), an empty
    environment, ``mem_mb`` of address space, a ``timeout`` after which every process is killed.

    Passes the content through when it runs cleanly (or has no ``main.py``); otherwise appends the
    error and a request to fix it, so the next agent can react (official ``ToolAgent.query``).

    Args:
        timeout: seconds per run (official: 30).
        mem_mb: address-space limit of the child, in MiB.
        isolation: ``"bwrap"`` (refuses here, at construction, when bubblewrap cannot run) or
            ``common.sandbox.UNSAFE`` (limits and a clean environment only), named explicitly.
    """
    from common.sandbox import UNSAFE, SandboxUnavailableError, sandbox_available

    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, got {timeout}")
    if isolation not in ("bwrap", UNSAFE):
        raise ValueError(f"isolation must be 'bwrap' or {UNSAFE!r}, got {isolation!r}")
    if isolation == "bwrap" and not sandbox_available():
        raise SandboxUnavailableError(
            "compiler_tool needs bubblewrap (apt-get install bubblewrap) to run model-generated "
            f"code; pass isolation={UNSAFE!r} to run it without namespaces at your own risk"
        )

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
            res = run_isolated(
                [sys.executable, "main.py"],
                tmp,
                timeout_s=timeout,
                mem_mb=mem_mb,
                isolation=isolation,  # type: ignore[arg-type]
            )
        if res.timed_out:
            return content + f"\n\nCompiler report: timeout after {timeout}s. Please fix the code."
        if res.returncode == 0:
            return content
        err = (res.stderr.strip() or res.stdout.strip()).splitlines()[-5:]
        return content + "\n\nCompiler report:\n" + "\n".join(err) + "\nPlease fix the code."

    return _compile
