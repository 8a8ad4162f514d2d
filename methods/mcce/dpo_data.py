"""Similarity-based DPO pair synthesis (official `tools/makerldata_dpov3.py`, official `tools/makerldata_dpov3.py`).

For each recent prompt, "chosen" = two archive molecules from the top α of the archive by F and
"rejected" = two from the bottom α, both preferring molecules whose Tanimoto similarity to the
prompt's parents falls in a band [τ, s_max] with τ tried from 0.7 down to 0.5. The completions are
synthesised from the archive (off-policy), not sampled from the model.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from typing import Any

from .core import Archive, Candidate

logger = logging.getLogger(__name__)
DIAGNOSTICS = (  # the extra columns of build_similarity_pairs(full=True)
    "parents",
    "chosen_smiles",
    "rejected_smiles",
    "chosen_total",
    "rejected_total",
    "chosen_sim",
    "rejected_sim",
)


def format_response(texts: Sequence[str], sep: str = "\n") -> str:
    """``<candidate>c1</candidate>{sep}<candidate>c2</candidate>``."""
    return sep.join(f"<candidate>{t}</candidate>" for t in texts)


def _pick(
    parents: Sequence[str],
    pool: Sequence[Candidate],
    sim_fn: Callable[[str, str], float],
    bands: Sequence[float],
    s_max: float,
    k: int,
    rng: random.Random,
) -> tuple[list[Candidate], list[float]]:
    """Pick k pool members similar to the parents (official `tools/makerldata_dpov3.py` Pick2, steps a–c)."""
    if not pool:
        return [], []
    sims = [max(sim_fn(p, c.value) for p in parents) if parents else 0.0 for c in pool]
    used: list[int] = []
    for tau in sorted(bands, reverse=True):  # a) bands, strictest first; pool order kept
        for i, s in enumerate(sims):
            if len(used) >= k:
                break
            if i not in used and tau <= s <= s_max:
                used.append(i)
    if len(used) < k:  # b) most similar below s_max
        rest = sorted(
            (i for i, s in enumerate(sims) if i not in used and s <= s_max), key=lambda i: -sims[i]
        )
        used.extend(rest[: k - len(used)])
    if len(used) < k:  # c) random unused, preferring s <= s_max
        rest = [i for i in range(len(pool)) if i not in used]
        rng.shuffle(rest)
        used.extend(rest[: k - len(used)])
    return [pool[i] for i in used], [sims[i] for i in used]


def _check_pair_args(
    alpha_top: float, alpha_ext: float, alpha_bottom: float, s_max: float, k: int
) -> None:
    for name, a in (
        ("alpha_top", alpha_top),
        ("alpha_ext", alpha_ext),
        ("alpha_bottom", alpha_bottom),
    ):
        if not 0.0 < a <= 1.0:
            raise ValueError(f"{name} must be in (0, 1], got {a}")
    if not 0.0 < s_max <= 1.0:
        raise ValueError(f"s_max must be in (0, 1], got {s_max}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def _chosen_rejected(
    parents: Sequence[str],
    high: Sequence[Candidate],
    ext: Sequence[Candidate],
    low: Sequence[Candidate],
    sim_fn: Callable[[str, str], float],
    bands: Sequence[float],
    s_max: float,
    k: int,
    rng: random.Random,
) -> tuple[tuple[list[Candidate], list[float]], tuple[list[Candidate], list[float]]] | None:
    """Chosen from High (Ext when High has < k in reach), rejected from Low, each padded with
    random members of its pool up to k (official `tools/makerldata_dpov3.py`); None if a pool
    is empty."""
    ch, ch_s = _pick(parents, high, sim_fn, bands, s_max, k, rng)
    if len(ch) < k:
        ch, ch_s = _pick(parents, ext, sim_fn, bands, s_max, k, rng)
    rj, rj_s = _pick(parents, low, sim_fn, bands, s_max, k, rng)
    # Pools smaller than k: pad with random members (with replacement) of High / Low.
    while len(ch) < k and high:
        ch.append(rng.choice(high))
        ch_s.append(float("nan"))
    while len(rj) < k and low:
        rj.append(rng.choice(low))
        rj_s.append(float("nan"))
    if len(ch) < k or len(rj) < k:
        return None
    return (ch, ch_s), (rj, rj_s)


def build_similarity_pairs(
    records: Sequence[dict[str, Any]],
    archive: Archive | Sequence[Candidate],
    sim_fn: Callable[[str, str], float],
    to_text: Callable[[str], str] = str,
    alpha_top: float = 0.3,
    alpha_ext: float = 0.5,
    alpha_bottom: float = 0.3,
    bands: Sequence[float] = (0.7, 0.6, 0.5),
    s_max: float = 0.8,
    n_pairs_max: int = 128,
    k: int = 2,
    rng: random.Random | None = None,
    conversational: bool = True,
    sep: str = "\n",
    full: bool = False,
) -> Any:
    """Build the DPO preference set from trajectory records and the archive (official `tools/makerldata_dpov3.py`).

    Args:
        records: trajectory records (both models' prompts), oldest first; the latest
            ``n_pairs_max`` are used, at most ⌊N/2⌋ of them.
        archive: the evaluation archive.
        sim_fn: similarity in [0, 1] between two canonical SMILES (Tanimoto, our choice).
        to_text: renders a canonical SMILES as it appears in responses (SELFIES for the toy).
        alpha_top / alpha_ext / alpha_bottom: High = top ⌊α_top N⌋, Ext = top ⌊α_ext N⌋ (fallback for
            chosen), Low = bottom ⌊α_bottom N⌋ of the archive by F.
        bands: lower similarity thresholds τ, tried in descending order with upper bound ``s_max``.
        k: molecules per response (n_off).
        conversational: emit ``[{"role": ..., "content": ...}]`` messages (default; our choice) or
            raw strings (``repo_compat``; the toy's tokenizer has no chat template).
        sep: separator between candidate tags in a response.
        full: keep diagnostic columns (SMILES, totals, similarities of chosen and rejected).

    Returns:
        ``datasets.Dataset`` with columns ``prompt``, ``chosen``, ``rejected`` (+ diagnostics).
    """
    import datasets

    _check_pair_args(alpha_top, alpha_ext, alpha_bottom, s_max, k)
    rng = rng or random.Random(0)
    items = list(archive.items if isinstance(archive, Archive) else archive)
    srt = sorted(items, key=lambda c: (-c.total, c.index))  # best first
    n = len(srt)
    high = srt[: int(alpha_top * n)]
    ext = srt[: int(alpha_ext * n)]
    low = srt[n - int(alpha_bottom * n) :]  # scanned from its best towards the worst
    q = list(records)[-n_pairs_max:] if n_pairs_max else []
    n_pairs = min(len(q), n // 2)
    rows: dict[str, list[Any]] = {"prompt": [], "chosen": [], "rejected": []}
    diag: dict[str, list[Any]] = {key: [] for key in DIAGNOSTICS}
    for rec in q[:n_pairs]:
        parents = [p["value"] for p in rec.get("parents", [])]
        picked = _chosen_rejected(parents, high, ext, low, sim_fn, bands, s_max, k, rng)
        if picked is None:
            continue
        (ch, ch_s), (rj, rj_s) = picked
        chosen = format_response([to_text(c.value) for c in ch], sep)
        rejected = format_response([to_text(c.value) for c in rj], sep)
        if conversational:
            rows["prompt"].append([{"role": "user", "content": rec["prompt"]}])
            rows["chosen"].append([{"role": "assistant", "content": chosen}])
            rows["rejected"].append([{"role": "assistant", "content": rejected}])
        else:
            rows["prompt"].append(rec["prompt"])
            rows["chosen"].append(chosen)
            rows["rejected"].append(rejected)
        vals = (parents, [c.value for c in ch], [c.value for c in rj])
        vals += ([c.total for c in ch], [c.total for c in rj], ch_s, rj_s)
        for key, val in zip(DIAGNOSTICS, vals):
            diag[key].append(val)
    if full:
        rows.update(diag)
    logger.info(
        "built %d similarity DPO pairs from %d records, archive %d", len(rows["prompt"]), len(q), n
    )
    return datasets.Dataset.from_dict(rows)
