"""Knowledge-adaptation and retention scores of the KORE paper (§4, App. B.3, Eq. 4)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from common.metrics import token_f1 as _squad_token_f1


def _norm(s: str) -> str:
    return re.sub(r"\s+", " ", s.lower()).strip()


def _check_gold(gold: str) -> str:
    if not isinstance(gold, str):
        raise TypeError(f"gold must be a str, got {type(gold).__name__}")
    if not gold.strip():
        raise ValueError("gold answer is empty")
    return gold


def cover_exact_match(pred: str, gold: str) -> float:
    """CEM: 1.0 if the (lower-cased, whitespace-normalised) gold answer occurs in the prediction.

    Paper §4, App. B.3; the normalisation is our inference (the paper does not state one).
    """
    _check_gold(gold)
    return float(_norm(gold) in _norm(pred or ""))


def token_f1(pred: str, gold: str) -> float:
    """Word-level F1 between prediction and gold (App. B.3); 0.0 for an empty prediction.

    :func:`common.metrics.token_f1` with this module's normalisation (lower-case, squeeze
    whitespace; punctuation and articles are kept).
    """
    _check_gold(gold)
    return _squad_token_f1(pred or "", gold, normalize=_norm)


def knowledge_adaptation(preds: Sequence[str], golds: Sequence[str]) -> dict[str, float]:
    """K.A = mean(CEM, F1) in percent over a set of questions (paper §4, App. B.3)."""
    if len(preds) != len(golds) or not golds:
        raise ValueError(f"preds ({len(preds)}) and golds ({len(golds)}) must be equal, non-empty")
    cem = 100 * sum(cover_exact_match(p, g) for p, g in zip(preds, golds)) / len(golds)
    f1 = 100 * sum(token_f1(p, g) for p, g in zip(preds, golds)) / len(golds)
    return {"cem": cem, "f1": f1, "ka": (cem + f1) / 2}


def avg_score(ka: float, kr: float) -> float:
    """Avg = (K.A + K.R) / 2 (paper §4; the Avg column of Table 1)."""
    return (ka + kr) / 2


def hars(ka: float, kr: float, ka0: float, kr0: float) -> float:
    """Harmonic adaptation-retention score (paper Eq. 4).

    ``f_A = 100 (1 - K.A0 / K.A)``, ``f_R = 100 K.R / K.R0``, ``HARS = 2 f_A f_R / (f_A + f_R)``,
    with ``K.A0, K.R0`` the pretrained model's scores.

    Raises:
        ValueError: if ``ka <= 0``, ``ka0 <= 0``, ``kr0 <= 0`` or ``f_A + f_R == 0``.
    """
    if ka <= 0:
        raise ValueError(f"ka must be > 0 for HARS, got {ka}")
    if ka0 <= 0:
        raise ValueError(f"ka0 must be > 0 for HARS, got {ka0}")
    if kr0 <= 0:
        raise ValueError(f"kr0 must be > 0 for HARS, got {kr0}")
    f_a = 100 * (1 - ka0 / ka)
    f_r = 100 * kr / kr0
    if f_a + f_r == 0:
        raise ValueError("f_A + f_R = 0: HARS undefined")
    return 2 * f_a * f_r / (f_a + f_r)
