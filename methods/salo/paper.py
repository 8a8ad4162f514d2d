"""Paper-scale pipeline: train on clean prompts, calibrate on XSTest, detect attacks.

Follows the official ``train_probe.py`` and ``eval_attacks.py`` (Exbilar/SALO).

``evaluate_detectors`` is the model- and data-agnostic core; ``run_paper`` wires it to a model and data
sets given by hub id or local path (``methods.salo.data`` loaders). Both are exercised in the tests on a
tiny local Llama with fixture files in the benchmarks' formats; the 7-8B runs need a GPU. Attack placement is always explicit:
``attack_type`` ∈ {direct, suffix, prefill}; the repo's dataset-name heuristic is not replicated.
"""

from __future__ import annotations

import csv
import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from methods.salo.baselines import LastTokenProbe, MeanPoolMLP, RepEDirection
from methods.salo.calibrate import auroc, calibrate_threshold, detection_rate
from methods.salo.operator import save_detector
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
    mlp_dim: int = 512,
    save_dir: str | Path | None = None,
    meta: dict | None = None,
) -> dict[str, dict[str, float]]:
    """Trains SALO (max, mean), the last-token probe, the mean-pooled MLP and RepE-mean on clean
    prompts, thresholds each at ``target_fpr`` on the safe calibration prompts, and reports detection.

    Trained detectors are saved to ``save_dir/<name>.pt`` with ``meta`` (model id, window) when given.

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
    scorers, trained = {}, {}
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
        trained[f"salo_{pooling}"] = det
    torch.manual_seed(train_cfg.seed)
    probe = train_detector(LastTokenProbe(x_tr.shape[-1]), x_tr, m_tr, y_tr, train_cfg)
    scorers["last_token_probe"] = lambda x, m: score_detector(probe, x, m)
    torch.manual_seed(train_cfg.seed)
    mlp = train_detector(
        MeanPoolMLP(x_tr.shape[-1], x_tr.shape[1], mlp_dim), x_tr, m_tr, y_tr, train_cfg
    )
    scorers["mean_pool_mlp"] = lambda x, m: score_detector(mlp, x, m)
    trained.update(last_token_probe=probe, mean_pool_mlp=mlp)
    if save_dir is not None:
        for name, det in trained.items():
            save_detector(det, Path(save_dir) / f"{name}.pt", meta)
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


def run_paper(mc, seed: int = 0, run_dir: str | None = None) -> dict[str, dict[str, float]]:
    """Paper pipeline from ``mc.paper``: model by hub id or path, data by hub id or local file.

    ``mc.paper`` keys (see ``configs/experiment/salo_paper*.yaml``): ``model``, ``dtype``,
    ``train_data.saferlhf`` / ``train_data.toxic_chat`` (``path`` + caps), ``calibration`` (XSTest
    ``path``), ``attacks.advbench`` (direct + prefill), ``attacks.csv`` (official-code CSVs with an
    explicit ``attack_type``), ``attacks.jbb`` (JailbreakBench artifacts), ``attacks.autodan`` (AutoDAN
    results, ``placement`` user or prefill) and ``attacks.gcg_generate`` (run :func:`gcg_attack` on the
    first ``n_prompts`` AdvBench goals towards their targets). Detectors are saved into ``run_dir``.
    """
    from common.models import load_model, load_tokenizer
    from methods.salo import data
    from methods.salo.gcg import gcg_attack

    p = mc.paper
    model_id = p["model"]
    model = load_model(model_id, dtype=p.get("dtype", "float16"))
    model.eval()
    tok = load_tokenizer(model_id)
    td = p["train_data"]
    train_p, train_y = [], []
    if td.get("saferlhf"):
        sp, sy = data.load_saferlhf(td["saferlhf"]["path"], td["saferlhf"].get("cap", 4000))
        train_p, train_y = train_p + sp, train_y + sy
    if td.get("toxic_chat"):
        t = td["toxic_chat"]
        tp, ty = data.load_toxic_chat(
            t["path"], t.get("config"), t.get("cap_per_class", 1500), t.get("max_chars", 400)
        )
        train_p, train_y = train_p + tp, train_y + ty
    cal = p["calibration"]
    calib = data.load_xstest(cal["path"], cal.get("split", "test"))
    att_cfg = p["attacks"]
    attacks: dict[str, AttackSet] = {}
    if att_cfg.get("advbench"):
        adv = data.load_advbench(att_cfg["advbench"]["path"], att_cfg["advbench"].get("limit"))
        attacks["advbench_direct"], attacks["advbench_prefill"] = adv["direct"], adv["prefill"]
        gen = att_cfg.get("gcg_generate") or {}
        n_gcg = int(gen.get("n_prompts", 0))
        if n_gcg > 0:
            goals = adv["direct"].prompts[:n_gcg]
            targets = adv["prefill"].injections[:n_gcg]
            sfx = [
                gcg_attack(
                    model,
                    tok,
                    g,
                    t,
                    n_tokens=int(gen.get("n_tokens", 20)),
                    steps=int(gen.get("steps", 250)),
                    topk=int(gen.get("topk", 256)),
                    n_candidates=int(gen.get("n_candidates", 512)),
                    seed=seed + i,
                ).suffix
                for i, (g, t) in enumerate(zip(goals, targets, strict=True))
            ]
            attacks["gcg_generated"] = AttackSet(goals, "suffix", sfx)
    for name, spec in (att_cfg.get("csv") or {}).items():
        attacks[name] = load_attack_csv(spec["path"], spec["attack_type"])
    for name, path in (att_cfg.get("jbb") or {}).items():
        attacks[name] = data.load_jbb_artifact(path)
    for name, spec in (att_cfg.get("autodan") or {}).items():
        attacks[name] = data.load_autodan_results(spec["path"], spec.get("placement", "user"))
    if not attacks:
        raise ValueError("method.paper.attacks names no attack set")
    op = SALOConfig(mc.n_filters, mc.layer_kernel, list(mc.token_kernels), mc.dropout, "max")
    tcfg = TrainConfig(
        mc.epochs, mc.batch_size, mc.lr, mc.weight_decay, grad_clip=mc.grad_clip, seed=seed
    )
    meta = {"model": model_id, "window": list(mc.window), "hidden_size": model.config.hidden_size}
    return evaluate_detectors(
        model,
        tok,
        tuple(mc.window),
        (train_p, train_y),
        calib,
        attacks,
        op,
        tcfg,
        mc.target_fpr,
        batch_size=int(p.get("batch_size", 8)),
        mlp_dim=mc.mlp_dim,
        save_dir=run_dir,
        meta=meta,
    )
