"""Output-only similarity proxies for AgentXRay (the paper's "Static Functional Equivalence";
every weight and feature: official code ``evaluation.py``).

``sfe`` is Static Functional Equivalence: both outputs are parsed into projects
``{filename: code}`` and compared on three AST feature groups,
``SFE = 0.20·I + 0.50·L + 0.30·S`` (interface, logic, semantics). If either side yields no
project, the score falls back to TF-IDF cosine on the raw strings (``tfidf_cosine``), which is
also the similarity used for text-only domains (our choice per domain).
"""

from __future__ import annotations

import ast
import logging
import re
from collections import Counter
from typing import Protocol

logger = logging.getLogger(__name__)

_FENCE = re.compile(r"```[\w+.-]*[ \t]*\n(.*?)```", re.DOTALL)
_HEADER = re.compile(r"^\s*(?:file\s*:\s*)?[`*#\s]*([\w./\\-]+\.[A-Za-z0-9]+)[`*:\s]*$", re.I)

# Synonym heads used by ``_norm`` (official code ``evaluation.py``: add/subtract/…/merge/filter/sort/update lists).
_SYNONYMS: dict[str, tuple[str, ...]] = {
    "add": ("add", "sum", "plus", "append", "insert", "total"),
    "subtract": ("subtract", "minus", "diff", "difference"),
    "multiply": ("multiply", "mul", "times", "product"),
    "divide": ("divide", "div", "ratio"),
    "compute": ("compute", "calculate", "calc", "evaluate", "process"),
    "get": ("get", "fetch", "retrieve", "load", "read"),
    "save": ("save", "write", "store", "dump", "persist"),
    "find": ("find", "search", "lookup", "locate"),
    "remove": ("remove", "delete", "drop", "discard"),
    "merge": ("merge", "combine", "join", "concat"),
    "filter": ("filter", "select", "keep"),
    "sort": ("sort", "order", "rank"),
    "update": ("update", "modify", "set", "change"),
    "max": ("max", "maximum", "largest", "biggest"),
    "min": ("min", "minimum", "smallest"),
    "mean": ("mean", "average", "avg"),
    "count": ("count", "tally", "number"),
}
_SYN_HEAD = {w: head for head, words in _SYNONYMS.items() for w in words}
_SUFFIXES = ("tion", "ness", "ing", "ed", "er", "ly")

_PATTERN_KEYWORDS: dict[str, tuple[str, ...]] = {
    "summation": ("sum", "total", "add"),
    "extrema": ("max", "min", "largest", "smallest"),
    "averaging": ("mean", "average", "avg"),
    "multiplication": ("product", "multiply"),
    "sorting": ("sort", "sorted", "order"),
    "searching": ("find", "search", "index", "lookup"),
    "filtering": ("filter", "select"),
    "file_io": ("open", "read", "write"),
    "serialisation": ("json", "pickle", "dump", "load"),
    "concurrency": ("thread", "asyncio", "multiprocessing"),
    "network": ("requests", "socket", "http", "urllib"),
    "ml": ("torch", "sklearn", "model", "train", "predict"),
    "data_processing": ("pandas", "numpy", "dataframe", "csv"),
    "visualisation": ("plot", "matplotlib", "plt", "figure"),
}
_INTENT_KEYWORDS: dict[str, tuple[str, ...]] = {
    "computation": ("compute", "calculate", "calc", "process"),
    "presentation": ("print", "display", "show", "format"),
    "aggregation": ("sum", "total", "count", "aggregate"),
    "averaging": ("mean", "average", "avg"),
    "loading": ("load", "read", "open", "fetch"),
    "saving": ("save", "write", "dump", "store"),
    "training": ("train", "fit"),
    "inference": ("predict", "infer"),
    "evaluation": ("test", "assert", "evaluate", "score"),
    "visualisation": ("plot", "plt", "chart"),
    "configuration": ("argparse", "config", "parser", "args"),
    "networking": ("request", "socket", "http"),
    "concurrency": ("thread", "async", "pool"),
}
_CONTROL = (ast.For, ast.While, ast.If, ast.Try, ast.With)


class Similarity(Protocol):
    """Pluggable similarity ``Sim(pred, ref) -> [0, 1]`` (our API)."""

    def __call__(self, pred: str, ref: str) -> float: ...


def parse_project(text: str) -> dict[str, str]:
    """Parse an agent's output into a project ``{filename: code}`` (official code ``evaluation.py``).

    Text before the first header is ignored; each ``File: name`` header followed by one fenced
    block becomes a file; a fence with no header becomes ``main.py``; bare parseable code with no
    fence becomes ``main.py``; blocks containing the word ``CODE`` (placeholders) are skipped and
    file names with ``..`` or an absolute path are rejected (``safe_join``).

    Args:
        text: Raw agent output.

    Returns:
        Mapping from file name to source text (empty when no code was found).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    files: dict[str, str] = {}
    prev_end = 0
    for m in _FENCE.finditer(text):
        before = [ln for ln in text[prev_end : m.start()].splitlines() if ln.strip()]
        prev_end = m.end()
        body = m.group(1)
        if re.search(r"\bCODE\b", body):
            continue
        name = "main.py"
        if before:
            hm = _HEADER.match(before[-1])
            if hm:
                name = hm.group(1).replace("\\", "/")
        if ".." in name.split("/") or name.startswith("/"):
            logger.warning("rejected unsafe file name %r", name)
            continue
        files[name] = body.rstrip("\n") + "\n"
    if not files and "```" not in text and text.strip():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return {}
        if any(
            isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.Assign))
            for n in tree.body
        ):
            files["main.py"] = text
    return files


def codes_to_content(files: dict[str, str]) -> str:
    """Render a project as ``File: name`` headers plus fenced blocks (inverse of ``parse_project``;
    official code ``utils/codes.py`` ``codes_to_content``)."""
    parts = []
    for name, code in files.items():
        lang = "python" if name.endswith(".py") else ""
        parts.append(f"File: {name}\n```{lang}\n{code.rstrip()}\n```")
    return "\n\n".join(parts) + ("\n" if parts else "")


def tfidf_cosine(a: str, b: str, *, token_pattern: str = r"(?u)\b\w\w+\b") -> float:
    """TF-IDF cosine between two raw strings (official ``evaluation.calculate_similarity``).

    scikit-learn's ``TfidfVectorizer`` with its default token pattern (tokens of 2+ word
    characters, as the official code uses it); a pattern of 1+ word characters also keeps
    1-character tokens. Both empty → 1, one empty → 0, no token on either side → 0 (the
    official returns 0 when the vectorizer fails on an empty vocabulary).
    """
    if not isinstance(a, str) or not isinstance(b, str):
        raise TypeError("tfidf_cosine expects two strings")
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    try:
        mat = TfidfVectorizer(token_pattern=token_pattern).fit_transform([a, b])
    except ValueError:  # empty vocabulary (no token of the pattern)
        return 0.0
    return float(min(1.0, max(0.0, cosine_similarity(mat[0], mat[1])[0, 0])))


# ----------------------------------------------------------------------------- set measures
def _norm(name: str) -> str:
    """Lower-case, map each ``_`` token to its synonym head, else strip one suffix (official code
    ``evaluation.py``; our shorter synonym table, see the doc's deviations)."""
    out = []
    for tok in name.lower().split("_"):
        if not tok:
            continue
        if tok in _SYN_HEAD:
            out.append(_SYN_HEAD[tok])
            continue
        for suf in _SUFFIXES:
            if tok.endswith(suf) and len(tok) > len(suf) + 2:
                tok = tok[: -len(suf)]
                break
        out.append(_SYN_HEAD.get(tok, tok))
    return "_".join(out)


def _jac(a: set, b: set) -> float:
    """Jaccard; 1 when both are empty, 0 when one is (official code ``evaluation.py``)."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def _jn(a: set[str], b: set[str]) -> float:
    """Jaccard of normalised names (official code ``evaluation.py``)."""
    return _jac({_norm(x) for x in a}, {_norm(x) for x in b})


def _si(a: set, b: set) -> float:
    """Set intersection with a small-set bonus (+0.2 for |A∪B| ≤ 3, +0.1 for ≤ 5), capped at 1;
    both empty 1, one empty 0.3 (official code ``evaluation.py``)."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.3
    union = len(a | b)
    bonus = 0.2 if union <= 3 else 0.1 if union <= 5 else 0.0
    return min(1.0, len(a & b) / union + bonus)


def _cs(a: Counter, b: Counter) -> float:
    """Count similarity: mean over keys of 1 − |n1 − n2|/max(n1, n2), 0.2 for a key on one side
    only; both empty 1, one empty 0.3 (official code ``evaluation.py``)."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.3
    vals = []
    for k in set(a) | set(b):
        n1, n2 = a.get(k, 0), b.get(k, 0)
        vals.append(0.2 if n1 == 0 or n2 == 0 else 1.0 - abs(n1 - n2) / max(n1, n2))
    return sum(vals) / len(vals)


def _cnt(a: int, b: int) -> float:
    """1 − |a − b|/max(a, b); both 0 → 1, one 0 → 0.4 (official code ``evaluation.py``)."""
    if a == 0 and b == 0:
        return 1.0
    if a == 0 or b == 0:
        return 0.4
    return 1.0 - abs(a - b) / max(a, b)


# ----------------------------------------------------------------------------- features
def _features(files: dict[str, str]) -> dict:
    """AST features of a project for the I/L/S terms of SFE (official code ``evaluation.py``;
    our keyword tables)."""
    f: dict = {
        "fns": set(),
        "fn_params": Counter(),
        "n_fns": 0,
        "classes": set(),
        "methods": set(),
        "files": {n.rsplit("/", 1)[-1] for n in files},
        "imports": set(),
        "patterns": set(),
        "control": Counter(),
        "ops": set(),
        "idents": set(),
        "intents": set(),
        "parse_errors": 0,
    }
    words: set[str] = set()
    for name, code in files.items():
        if not name.endswith(".py"):
            continue
        try:
            tree = ast.parse(code)
        except SyntaxError:
            f["parse_errors"] += 1
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                f["fns"].add(node.name)
                f["n_fns"] += 1
                f["fn_params"][f"{_norm(node.name)}({len(node.args.args)})"] += 1
                if _recursive(node):
                    f["patterns"].add("recursion")
            elif isinstance(node, ast.ClassDef):
                f["classes"].add(node.name)
                f["patterns"].add("oop")
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        f["methods"].add(f"{node.name}.{item.name}")
            elif isinstance(node, ast.Import):
                f["imports"].update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                f["imports"].add(node.module.split(".")[0])
            elif isinstance(node, ast.Name):
                f["idents"].add(node.id)
            elif isinstance(node, ast.Attribute):
                f["idents"].add(node.attr)
            elif isinstance(node, ast.arg):
                f["idents"].add(node.arg)
            elif isinstance(node, ast.BinOp):
                f["ops"].add(type(node.op).__name__)
            elif isinstance(node, ast.Compare):
                f["ops"].update(type(o).__name__ for o in node.ops)
            elif isinstance(node, ast.AugAssign):
                f["ops"].add("Aug" + type(node.op).__name__)
            elif isinstance(node, ast.Dict):
                f["patterns"].add("dict_use")
            elif isinstance(node, ast.List):
                f["patterns"].add("list_use")
            elif isinstance(node, ast.Set):
                f["patterns"].add("set_use")
            if isinstance(node, _CONTROL):
                f["control"][type(node).__name__] += 1
                if isinstance(node, (ast.For, ast.While)):
                    f["patterns"].update(("loops", "iteration"))
        words.update(
            w for ident in f["idents"] | f["fns"] | f["imports"] for w in ident.lower().split("_")
        )
    for tag, kws in _PATTERN_KEYWORDS.items():
        if words & set(kws):
            f["patterns"].add(tag)
    for tag, kws in _INTENT_KEYWORDS.items():
        if words & set(kws):
            f["intents"].add(tag)
    return f


def _recursive(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """The "recursion" pattern tag: ``fn`` calls itself by name (official code ``evaluation.py``)."""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == fn.name
        for n in ast.walk(fn)
    )


def sfe(pred: str, ref: str, *, return_report: bool = False) -> float | tuple[float, dict]:
    """Static Functional Equivalence between two outputs (paper's SFE; official code ``evaluation.py``).

    ``SFE = 0.20·I + 0.50·L + 0.30·S`` with
    ``I = 0.5·F + 0.3·C + 0.2·Mo`` (functions, classes, modules),
    ``L = 0.4·SI(patterns) + 0.3·CS(control flow) + 0.3·SI(operators)`` and
    ``S = 0.6·J(identifiers) + 0.4·SI(intents)``. When either side parses to no project, the
    TF-IDF cosine of the raw strings is returned instead.

    Args:
        pred: Output of the reconstructed workflow.
        ref: Black-box output ``o*``.
        return_report: Also return the component scores.

    Returns:
        The score in [0, 1], or ``(score, report)`` when ``return_report``.
    """
    if not isinstance(pred, str) or not isinstance(ref, str):
        raise TypeError(
            f"pred and ref must be str, got {type(pred).__name__} and {type(ref).__name__}"
        )
    pa, pb = parse_project(pred), parse_project(ref)
    if not pa or not pb:
        score = tfidf_cosine(pred, ref)
        return (score, {"fallback": "tfidf", "sfe": score}) if return_report else score
    a, b = _features(pa), _features(pb)
    fn = 0.5 * _jn(a["fns"], b["fns"]) + 0.3 * _cs(a["fn_params"], b["fn_params"])
    fn += 0.2 * _cnt(a["n_fns"], b["n_fns"])
    if not a["classes"] and not b["classes"]:
        cls = 1.0
    elif not a["classes"] or not b["classes"]:
        cls = 0.5
    else:
        cls = 0.4 * _jn(a["classes"], b["classes"]) + 0.4 * _jn(a["methods"], b["methods"])
        cls += 0.2 * _cnt(len(a["classes"]), len(b["classes"]))
    mod = 0.7 * _jn(a["files"], b["files"]) + 0.3 * _jac(a["imports"], b["imports"])
    interface = 0.5 * fn + 0.3 * cls + 0.2 * mod
    logic = 0.4 * _si(a["patterns"], b["patterns"]) + 0.3 * _cs(a["control"], b["control"])
    logic += 0.3 * _si(a["ops"], b["ops"])
    semantic = 0.6 * _jn(a["idents"], b["idents"]) + 0.4 * _si(a["intents"], b["intents"])
    score = float(min(1.0, max(0.0, 0.2 * interface + 0.5 * logic + 0.3 * semantic)))
    if not return_report:
        return score
    report = {
        "sfe": score,
        "interface": interface,
        "logic": logic,
        "semantic": semantic,
        "functions": fn,
        "classes": cls,
        "modules": mod,
        "missing_functions": sorted(b["fns"] - a["fns"]),
        "extra_functions": sorted(a["fns"] - b["fns"]),
    }
    return score, report


SIMILARITIES: dict[str, Similarity] = {"sfe": sfe, "tfidf": tfidf_cosine}  # method.similarity
