"""Paper-scale pipeline (spec §3.7, §5, §7): train on clean prompts, calibrate on XSTest, detect attacks.

``evaluate_detectors`` is the model- and data-agnostic core (tested on a tiny LM); ``run_paper`` wires it
to hub models and data sets by id (GPU only, not run in CI). Attack placement is always explicit:
``attack_type`` ∈ {direct, suffix, prefill}; the repo's dataset-name heuristic is not replicated.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from methods.salo.baselines import LastTokenProbe, RepEDirection
from methods.salo.calibrate import auroc, calibrate_threshold, detection_rate
from methods.salo.train import SALOConfig, TrainConfig, score_detector, train_detector, train_salo
from methods.salo.volume import collect_volumes

logger = logging.getLogger(__name__)
ATTACK_TYPES = ("direct", "suffix", "prefill")


@dataclass
class AttackSet:
    """Harmful prompts with per-prompt injections and an explicit placement."""

    prompts: list[str]
    attack_type: str = "direct"
    injections: list[str] | None = None

    def __post_init__(self) -> None:
        if self.attack_type not in ATTACK_TYPES:
            raise ValueError(f"attack_type must be one of {ATTACK_TYPES}, got {self.attack_type!r}")
        if self.attack_type != "direct" and (
            self.injections is None or len(self.injections) != len(self.prompts)
        ):
            raise ValueError(f"attack_type {self.attack_type!r} needs one injection per prompt")

    def kwargs(self) -> dict:
        if self.attack_type == "suffix":
            return {"suffix": self.injections}
        if self.attack_type == "prefill":
            return {"prefill": self.injections}
        return {}


def load_attack_csv(path: str | Path, attack_type: str) -> AttackSet:
    """Reads a CSV with columns ``prompt`` and ``injection`` (repo format) into an :class:`AttackSet`.

    Raises:
        ValueError: on missing columns or an unknown ``attack_type``.
    """
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        cols = set(reader.fieldnames or [])
        if not {"prompt", "injection"} <= cols:
            raise ValueError(
                f"attack CSV {path} needs columns 'prompt' and 'injection', got {cols}"
            )
        rows = list(reader)
    return AttackSet([r["prompt"] for r in rows], attack_type, [r["injection"] for r in rows])


def evaluate_detectors(
    model,
    tokenizer,
    window: tuple[int, int],
    train: tuple[list[str], list[int]],
    calib: tuple[list[str], list[int]],
    attacks: dict[str, AttackSet],
    operator: SALOConfig,
    train_cfg: TrainConfig,
    target_fpr: float = 0.10,
    batch_size: int = 8,
) -> dict[str, dict[str, float]]:
    """Trains SALO (max, mean), the last-token probe and RepE-mean; reports calibrated detection.

    Returns:
        ``{detector: {"cal_auroc", "tau", <attack>: detection rate}}``.
    """

    def vols(prompts, **kw):
        return collect_volumes(model, tokenizer, prompts, window, batch_size=batch_size, **kw)

    x_tr, m_tr = vols(train[0])
    y_tr = torch.tensor(train[1]).long()
    x_cal, m_cal = vols(calib[0])
    y_cal = torch.tensor(calib[1]).long().numpy()
    att = {name: vols(a.prompts, **a.kwargs()) for name, a in attacks.items()}
    scorers = {}
    for pooling in ("max", "mean"):
        op = SALOConfig(
            operator.n_filters,
            operator.layer_kernel,
            operator.token_kernels,
            operator.dropout,
            pooling,
        )
        det = train_salo(x_tr, m_tr, y_tr, op, train_cfg)
        scorers[f"salo_{pooling}"] = lambda x, m, d=det: score_detector(d, x, m)
    torch.manual_seed(train_cfg.seed)
    probe = train_detector(LastTokenProbe(x_tr.shape[-1]), x_tr, m_tr, y_tr, train_cfg)
    scorers["last_token_probe"] = lambda x, m: score_detector(probe, x, m)
    scorers["repe_mean"] = RepEDirection("roi_mean").fit(x_tr, m_tr, y_tr).score
    out = {}
    for name, score in scorers.items():
        s_cal = score(x_cal, m_cal).float().numpy()
        tau = calibrate_threshold(s_cal[y_cal == 0], target_fpr)
        row = {"cal_auroc": auroc(s_cal, y_cal), "tau": tau}
        for a_name, (x, m) in att.items():
            row[a_name] = detection_rate(score(x, m).float().numpy(), tau)
        out[name] = row
    return out


def run_paper(mc, seed: int = 0) -> dict[str, dict[str, float]]:  # pragma: no cover - GPU only
    """Loads the hub model and data sets named in ``mc.paper`` and runs :func:`evaluate_detectors`."""
    from datasets import load_dataset

    from common.models import load_model, load_tokenizer

    p = mc.paper
    model_id = p["model"]
    model = load_model(model_id, dtype=p.get("dtype", "float16"))
    tok = load_tokenizer(model_id)
    safe = load_dataset(p["train_data"]["saferlhf"]["id"], split="train")
    cap = p["train_data"]["saferlhf"]["cap"]
    train_p, train_y = [], []
    for r in safe.select(range(min(cap, len(safe)))):
        train_p.append(r["prompt"])
        train_y.append(int(not (r["is_response_0_safe"] and r["is_response_1_safe"])))
    xs = load_dataset(p["calibration"], split="test")
    calib = ([r["prompt"] for r in xs], [int(r["label"] == "unsafe") for r in xs])
    adv = load_dataset(p["attacks"]["advbench"], split="train")
    harmful = [r["prompt"] for r in adv]
    attacks = {
        "direct": AttackSet(harmful),
        "prefill": AttackSet(harmful, "prefill", [r["target"] for r in adv]),
    }
    for name, spec in p["attacks"].get("csv", {}).items():
        attacks[name] = load_attack_csv(spec["path"], spec["attack_type"])
    op = SALOConfig(mc.n_filters, mc.layer_kernel, list(mc.token_kernels), mc.dropout, "max")
    tcfg = TrainConfig(
        mc.epochs, mc.batch_size, mc.lr, mc.weight_decay, grad_clip=mc.grad_clip, seed=seed
    )
    return evaluate_detectors(
        model, tok, tuple(mc.window), (train_p, train_y), calib, attacks, op, tcfg, mc.target_fpr
    )
