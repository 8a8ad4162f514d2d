"""The paper stages (``ioi``, ``checkpoints``) and their real-model SAD drivers (paper §5): GPT-2 small on IOI prompts, Pythia-160M over training.

* :func:`ioi_prompts` generates templated indirect-object-identification prompts ("When Mary and John
  went to the store, John gave a drink to" -> " Mary"), with the positions of the indirect object (IO),
  both subject mentions (S1, S2) and the final token ("end").
* :func:`sad_heads` runs :func:`~methods.sv_features.sad.sparse_attention_decomposition` on many heads
  and summarises each one: firing edges, median Rolls–Tovée sparseness and ``N_recon`` in the singular
  basis and in the random-rotation control (paper: GPT-2 ``N_recon`` 1–4 for most firing heads).
* :func:`select_ioi_head` picks the head attending most from "end" to the IO name (name-mover signature),
  when no head is given.
* :func:`checkpoint_sweep` repeats the SAD of one head over training checkpoints (Pythia-160M: S(v) of an
  IOI head falls from ≈ 1 over training, not under rotation). :func:`pythia_revisions` lists the
  published revision names.
* :func:`load_causal_lm` loads a model by hub id (``revision`` = checkpoint) or from a local directory
  (``<dir>/<revision>`` when such a folder exists), with eager attention.

Everything runs on plain Hugging Face models (GPT-2, GPT-NeoX/Pythia, Llama-style); no TransformerLens.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from common.tracking import pyplot, save_plot, write_results
from methods.sv_features.sad import sparse_attention_decomposition

logger = logging.getLogger(__name__)

NAMES = (
    "Mary John Alice Bob Sarah Tom James Anna Paul Laura David Emma Mark Kate Peter Lisa Michael "
    "Rachel Daniel Susan"
).split()
PLACES = "store park school garden station office market beach".split()
OBJECTS = "drink book ball key letter bag ring basket".split()
TEMPLATES = (  # {A}, {B}: the two names in either order; {S}: the subject's second mention
    "When {A} and {B} went to the {P}, {S} gave a {O} to",
    "After {A} and {B} arrived at the {P}, {S} handed a {O} to",
    "Then, {A} and {B} had a long day at the {P}. {S} passed a {O} to",
    "While {A} and {B} were at the {P}, {S} threw a {O} to",
)


@dataclass
class IOIBatch:
    """Tokenised IOI prompts (right-padded) and per-prompt token positions.

    Attributes:
        texts: the prompts; answers: the indirect object (the correct next word).
        input_ids, attention_mask: ``[B, T]``.
        io, s1, s2, end: ``[B]`` positions of the first token of IO, of each subject mention and of
            the last prompt token.
    """

    texts: list[str]
    answers: list[str]
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    io: torch.Tensor
    s1: torch.Tensor
    s2: torch.Tensor
    end: torch.Tensor


def _word_start(offsets: list[tuple[int, int]], char: int) -> int:
    """Index of the token covering character ``char`` (a leading space belongs to the token)."""
    for t, (a, b) in enumerate(offsets):
        if a <= char < b or (a == char - 1 and b > char):
            return t
    raise ValueError(f"no token covers character {char}")


def ioi_prompts(tokenizer, n: int = 128, seed: int = 0) -> IOIBatch:
    """``n`` templated IOI prompts, mixed templates and ABBA/BABA name orders (paper §5, IOI).

    Raises:
        ValueError: if ``n < 1`` or the tokenizer gives no offsets (a fast tokenizer is needed).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    rng = random.Random(seed)
    texts, answers, char_pos = [], [], []
    for k in range(n):
        io, s = rng.sample(NAMES, 2)
        a, b = (io, s) if k % 2 == 0 else (s, io)  # ABBA / BABA orders alternate
        tpl = rng.choice(TEMPLATES)
        text = tpl.format(A=a, B=b, S=s, P=rng.choice(PLACES), O=rng.choice(OBJECTS))
        first_io, first_s = text.index(io), text.index(s)
        second_s = text.index(s, max(first_io, first_s) + 1)
        texts.append(text)
        answers.append(io)
        char_pos.append((first_io, first_s, second_s))
    enc = tokenizer(texts, return_offsets_mapping=True, add_special_tokens=False)
    if "offset_mapping" not in enc:
        raise ValueError("ioi_prompts needs a fast tokenizer (offset mapping)")
    rows = enc["input_ids"]
    t_max = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.full((n, t_max), pad, dtype=torch.long)
    mask = torch.zeros(n, t_max, dtype=torch.long)
    pos = torch.zeros(4, n, dtype=torch.long)
    for k, (row, offs) in enumerate(zip(rows, enc["offset_mapping"], strict=True)):
        ids[k, : len(row)] = torch.tensor(row)
        mask[k, : len(row)] = 1
        pos[0, k], pos[1, k], pos[2, k] = (_word_start(offs, c) for c in char_pos[k])
        pos[3, k] = len(row) - 1
    return IOIBatch(texts, answers, ids, mask, pos[0], pos[1], pos[2], pos[3])


def _n_layers_heads(model: nn.Module) -> tuple[int, int]:
    c = model.config
    n_l = getattr(c, "num_hidden_layers", None) or c.n_layer
    n_h = getattr(c, "num_attention_heads", None) or c.n_head
    return int(n_l), int(n_h)


def _median(x: torch.Tensor | None) -> float:
    if x is None or x.numel() == 0:
        return float("nan")
    x = x.float()
    x = x[torch.isfinite(x)]
    return float(x.median()) if x.numel() else float("nan")


def summarize(res) -> dict[str, float]:
    """Per-head summary of a :class:`~methods.sv_features.sad.SADResult`."""
    n = int(res.edges.shape[0])
    out = {
        "n_edges": float(n),
        "sparseness": _median(res.sparseness),
        "n_recon": _median(res.n_recon),
        "frac_n_recon_le4": float((res.n_recon <= 4).float().mean()) if n else float("nan"),
    }
    if res.sparseness_control is not None:
        out["sparseness_control"] = _median(res.sparseness_control)
        out["n_recon_control"] = _median(res.n_recon_control)
    return out


@torch.no_grad()
def sad_heads(
    model: nn.Module,
    batch: IOIBatch,
    heads: Sequence[tuple[int, int]] | None = None,
    firing_thresh: float = 0.5,
    tau: float = 0.9,
    control: bool = True,
    seed: int = 0,
    fold_ln: bool = False,
    rope_basis: str = "per_offset",
) -> dict[str, dict[str, float]]:
    """SAD summaries ``{"L<l>H<h>": summary}`` for ``heads`` (default: every head of the model).

    ``fold_ln`` / ``rope_basis``: see :func:`sparse_attention_decomposition`.
    """
    n_l, n_h = _n_layers_heads(model)
    heads = list(heads) if heads is not None else [(ly, h) for ly in range(n_l) for h in range(n_h)]
    out = {}
    for layer, head in heads:
        res = sparse_attention_decomposition(
            model,
            batch.input_ids,
            layer,
            head,
            attention_mask=batch.attention_mask,
            firing_thresh=firing_thresh,
            tau=tau,
            control=control,
            seed=seed,
            fold_ln=fold_ln,
            rope_basis=rope_basis,
        )
        out[f"L{layer}H{head}"] = summarize(res)
    return out


def aggregate(per_head: dict[str, dict[str, float]], min_edges: int = 1) -> dict[str, float]:
    """Across heads with ``>= min_edges`` firing edges: medians and the share with median N_recon ≤ 4."""
    rows = [r for r in per_head.values() if r["n_edges"] >= min_edges]
    if not rows:
        return {"n_firing_heads": 0.0}
    col = lambda k: torch.tensor([r[k] for r in rows if k in r], dtype=torch.float64)  # noqa: E731
    out = {
        "n_firing_heads": float(len(rows)),
        "median_n_recon": _median(col("n_recon")),
        "frac_heads_n_recon_le4": float((col("n_recon") <= 4).double().mean()),
        "median_sparseness": _median(col("sparseness")),
    }
    if "sparseness_control" in rows[0]:
        out["median_sparseness_control"] = _median(col("sparseness_control"))
        out["median_n_recon_control"] = _median(col("n_recon_control"))
    return out


@torch.no_grad()
def select_ioi_head(model: nn.Module, batch: IOIBatch) -> tuple[int, int]:
    """The head with the largest mean attention from "end" to the IO name (name-mover signature).

    Uses the model's own attention probabilities (``output_attentions``; load with eager attention).
    """
    out = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_attentions=True
    )
    rows = torch.arange(batch.input_ids.shape[0])
    best, score = (0, 0), -1.0
    for layer, att in enumerate(out.attentions):  # [B, H, T, T]
        s = att[rows, :, batch.end, batch.io].mean(0)  # [H]
        h = int(s.argmax())
        if float(s[h]) > score:
            best, score = (layer, h), float(s[h])
    return best


def pythia_revisions(n: int | None = None) -> list[str]:
    """Published Pythia revisions: ``step0``, log-spaced ``step1..step512``, then every 1000 to 143000.

    With ``n``, keeps every early (≤ 1000) revision and thins the later ones evenly to ``n`` in total.
    """
    early = ["step0"] + [f"step{2**k}" for k in range(10)]
    late = [f"step{s}" for s in range(1000, 143_001, 1000)]
    if n is None or n >= len(early) + len(late):
        return early + late
    if n <= len(early):
        raise ValueError(f"n must exceed the {len(early)} early revisions, got {n}")
    k = n - len(early)
    idx = torch.linspace(0, len(late) - 1, k).round().long().unique().tolist()
    return early + [late[i] for i in idx]


def load_causal_lm(model_id: str, revision: str | None = None, dtype=torch.float32):
    """Loads an HF causal LM with eager attention, by hub id (+ ``revision``) or local directory.

    A local directory with a sub-folder named ``revision`` loads that sub-folder (a local checkpoint
    sweep); otherwise ``revision`` is passed to ``from_pretrained``.
    """
    from transformers import AutoModelForCausalLM

    from common.models import weights_hint

    path = Path(model_id)
    kw: dict = {"attn_implementation": "eager", "dtype": dtype}
    if revision is not None and (path / revision).is_dir():
        return AutoModelForCausalLM.from_pretrained(path / revision, **kw).eval()
    if revision is not None:
        kw["revision"] = revision
    with weights_hint(model_id):
        return AutoModelForCausalLM.from_pretrained(model_id, **kw).eval()


def checkpoint_sweep(
    model_id: str,
    revisions: Sequence[str],
    batch: IOIBatch,
    head: tuple[int, int] | None = None,
    loader: Callable[[str, str], nn.Module] = load_causal_lm,
    firing_thresh: float = 0.0,
    tau: float = 0.9,
    seed: int = 0,
    fold_ln: bool = False,
    rope_basis: str = "per_offset",
) -> list[dict[str, float]]:
    """SAD of one head across checkpoints (PYTHIA_SWEEP``).

    ``head`` defaults to :func:`select_ioi_head` on the *last* revision. ``firing_thresh`` defaults to
    0 (every visible edge from "end" is analysed), because an untrained checkpoint has no firing
    edges; only edges from the "end" position to the IO name are kept.

    Returns:
        One row per revision: ``revision`` index, ``layer``, ``head``, ``n_edges``, median sparseness
        and N_recon in the singular basis and the rotation control.
    """
    if not revisions:
        raise ValueError("revisions must not be empty")
    if head is None:
        head = select_ioi_head(loader(model_id, revisions[-1]), batch)
        logger.info("selected IOI head L%dH%d", *head)
    rows = []
    for k, rev in enumerate(revisions):
        model = loader(model_id, rev)
        res = sparse_attention_decomposition(
            model,
            batch.input_ids,
            head[0],
            head[1],
            attention_mask=batch.attention_mask,
            firing_thresh=firing_thresh,
            tau=tau,
            control=True,
            seed=seed,
            fold_ln=fold_ln,
            rope_basis=rope_basis,
        )
        b, i, j = res.edges.unbind(-1)
        keep = (i == batch.end[b]) & (j == batch.io[b])
        sub = _subset(res, keep)
        rows.append({"revision": float(k), "layer": float(head[0]), "head": float(head[1])})
        rows[-1].update(summarize(sub))
        logger.info("revision %s: %s", rev, rows[-1])
    return rows


def _subset(res, keep: torch.Tensor):
    """A shallow copy of ``res`` restricted to the edges in ``keep``."""
    from dataclasses import replace

    pick = lambda t: None if t is None else t[keep]  # noqa: E731
    return replace(
        res,
        edges=res.edges[keep],
        contributions=res.contributions[keep],
        relative=res.relative[keep],
        logits=res.logits[keep],
        rel_logits=res.rel_logits[keep],
        probs=res.probs[keep],
        sparseness=res.sparseness[keep],
        n_recon=res.n_recon[keep],
        sparseness_control=pick(res.sparseness_control),
        n_recon_control=pick(res.n_recon_control),
        extra={},
    )


# ----------------------------------------------------------------------------- stages


def _load(run, revision: str | None = None):
    """``run.model`` (hub id or local path; a sweep folder's ``<revision>`` sub-folder) in float32."""
    from common.config import model_id
    from common.models import load_model

    spec = model_id(run.model)
    if revision is not None and (Path(spec) / revision).is_dir():
        spec, revision = str(Path(spec) / revision), None
    kw = {"attn_implementation": run.model.attn_implementation or "eager"}
    if revision is not None:
        kw["revision"] = revision
    dtype = "float32" if run.model.dtype == "auto" else run.model.dtype
    return load_model(spec, dtype=dtype, device="cpu", **kw).eval()


def _tokenizer_and_prompts(run):
    from transformers import AutoTokenizer

    from common.config import model_id
    from common.models import weights_hint

    spec = run.method.real.tokenizer or model_id(run.model)
    with weights_hint(spec):
        tok = AutoTokenizer.from_pretrained(spec)
    return ioi_prompts(tok, run.method.real.n_prompts, run.seed)


def ioi_stage(run) -> dict[str, float]:
    """``stage=ioi``: SAD of the heads of ``run.model`` on IOI prompts (paper §5, GPT-2 small)."""
    rc = run.method.real
    t0 = time.time()
    batch = _tokenizer_and_prompts(run)
    model = _load(run)
    heads = [tuple(h) for h in rc.heads] or None
    per_head = sad_heads(
        model, batch, heads, rc.firing_thresh, rc.tau, control=True, seed=run.seed,
        fold_ln=rc.fold_ln, rope_basis=rc.rope_basis,
    )  # fmt: skip
    return write_results(
        run.run_dir,
        "sv_features",
        {"ioi_heads": aggregate(per_head)},
        cfg=run.cfg,
        extra={"real": {"per_head": per_head}},
        wall_time_s=time.time() - t0,
    )


def checkpoints_stage(run) -> dict[str, float]:
    """``stage=checkpoints``: one IOI head of ``run.model`` over training checkpoints (Pythia)."""
    rc = run.method.real
    t0 = time.time()
    revisions = list(rc.checkpoints) or pythia_revisions(rc.n_checkpoints or None)
    batch = _tokenizer_and_prompts(run)
    rows = checkpoint_sweep(
        model_id_for_log(run),
        revisions,
        batch,
        tuple(rc.head) if rc.head else None,
        loader=lambda _m, r: _load(run, r),
        firing_thresh=rc.firing_thresh,
        tau=rc.tau,
        seed=run.seed,
        fold_ln=rc.fold_ln,
        rope_basis=rc.rope_basis,
    )
    if run.method.plots:
        _plot_checkpoints(revisions, rows, Path(run.run_dir) / "checkpoint_sparseness.png")
    return write_results(
        run.run_dir,
        "sv_features",
        {"ckpt_first": rows[0], "ckpt_last": rows[-1]},
        cfg=run.cfg,
        extra={"real": {"revisions": revisions, "rows": rows}},
        wall_time_s=time.time() - t0,
    )


def model_id_for_log(run) -> str:
    from common.config import model_id

    return model_id(run.model)


def _plot_checkpoints(revisions, rows, path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    x = range(len(rows))
    ax.plot(x, [r["sparseness"] for r in rows], "o-", ms=3, label="singular basis")
    ax.plot(x, [r.get("sparseness_control", float("nan")) for r in rows], "x-", ms=3,
            label="random rotation (control)")  # fmt: skip
    ax.set_xticks(list(x)[:: max(1, len(rows) // 8)])
    ax.set_xticklabels(revisions[:: max(1, len(rows) // 8)], rotation=45, fontsize=7)
    ax.set_ylabel("median Rolls-Tovee S (end -> IO)")
    ax.legend()
    save_plot(fig, path)
