"""Induction metrics of the co-occurrence study.

Pre = base model, plain prompt; post = induced checkpoint (any prompting). Items are aligned by id
and kept only when both predictions parse to yes/no.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Pred", "induction_metrics"]


@dataclass(frozen=True)
class Pred:
    """One prediction: item id, parsed verdict (``yes``/``no``/``error``) and gold label."""

    id: str | int
    predict: str
    label: str


def _norm_label(label: str) -> str:
    return label.strip().strip(".").lower()


def _as_pred(p: Pred | Mapping, name: str) -> Pred:
    if isinstance(p, Pred):
        return p
    if isinstance(p, Mapping) and {"id", "predict", "label"} <= set(p):
        return Pred(p["id"], str(p["predict"]), str(p["label"]))
    raise TypeError(f"{name} items must be Pred or dicts with id/predict/label, got {p!r}")


def induction_metrics(
    pre: Sequence[Pred | Mapping], post: Sequence[Pred | Mapping]
) -> dict[str, float]:
    """Accuracy before/after induction and the three induction measures (official code
    ``evaluation/eval_overthink.py``; the paper abstract reports the induction rate and accuracy).

    With ``Acc`` the accuracy on aligned items, ``err = 1 - Acc`` and ``Y`` the number of "yes"
    predictions among the ``N`` aligned items:

    - ``induction_rate`` (M1) = #{pre correct and post wrong} / #{pre correct} (NaN, with
      ``ir_undefined = 1``, when no pre item is correct);
    - ``rel_error_increase`` (M2) = (err_post - err_pre) / (1 - err_pre) (NaN if err_pre = 1);
    - ``norm_drop`` (M3) = 1 - exp(-R Q), R = Y_post / (Y_pre + 1), Q = (Y_post - Y_pre) / N.

    Args:
        pre: predictions of the base model.
        post: predictions of the induced model; must cover exactly the same ids.

    Returns:
        ``acc_pre, acc_post, induction_rate, rel_error_increase, norm_drop, yes_pre, yes_post,
        n_aligned, n_dropped, ir_undefined`` as floats.

    Raises:
        ValueError: on duplicate ids, different id sets, label mismatch, or no aligned item.
    """
    pre_p = [_as_pred(p, "pre") for p in pre]
    post_p = [_as_pred(p, "post") for p in post]
    pre_d = {p.id: p for p in pre_p}
    post_d = {p.id: p for p in post_p}
    if len(pre_d) != len(pre_p) or len(post_d) != len(post_p):
        raise ValueError("pre and post must not contain duplicate ids")
    if set(pre_d) != set(post_d):
        raise ValueError(
            f"pre and post must cover the same ids ({len(set(pre_d) ^ set(post_d))} differ)"
        )
    kept: list[tuple[Pred, Pred]] = []
    dropped = 0
    for i, a in pre_d.items():
        b = post_d[i]
        if _norm_label(a.label) != _norm_label(b.label):
            raise ValueError(f"label mismatch for id {i!r}: {a.label!r} vs {b.label!r}")
        if a.predict in ("yes", "no") and b.predict in ("yes", "no"):
            kept.append((a, b))
        else:
            dropped += 1
    n = len(kept)
    if n == 0:
        raise ValueError("no aligned item with parsable pre and post predictions (N = 0)")
    pre_ok = [a.predict == _norm_label(a.label) for a, _ in kept]
    post_ok = [b.predict == _norm_label(b.label) for _, b in kept]
    acc_pre, acc_post = sum(pre_ok) / n, sum(post_ok) / n
    n_pre_ok = sum(pre_ok)
    flipped = sum(1 for p, q in zip(pre_ok, post_ok, strict=True) if p and not q)
    ir = flipped / n_pre_ok if n_pre_ok else math.nan
    err_pre, err_post = 1 - acc_pre, 1 - acc_post
    rei = (err_post - err_pre) / (1 - err_pre) if err_pre < 1 else math.nan
    y_pre = sum(1 for a, _ in kept if a.predict == "yes")
    y_post = sum(1 for _, b in kept if b.predict == "yes")
    r = y_post / (y_pre + 1)
    q = (y_post - y_pre) / n
    nd = 1 - math.exp(-r * q)
    return {
        "acc_pre": acc_pre,
        "acc_post": acc_post,
        "induction_rate": ir,
        "rel_error_increase": rei,
        "norm_drop": nd,
        "yes_pre": float(y_pre),
        "yes_post": float(y_post),
        "n_aligned": float(n),
        "n_dropped": float(dropped),
        "ir_undefined": float(n_pre_ok == 0),
    }
