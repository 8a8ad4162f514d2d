"""Paper-scale pipeline: train on clean prompts, calibrate on XSTest, detect attacks.

Follows the official ``train_probe.py`` and ``eval_attacks.py`` (Exbilar/SALO).

``evaluate_detectors`` is the model- and data-agnostic core; :func:`paper_stage`
(``icml26 experiment=salo_paper method.stage=paper``) wires it to ``model`` and ``benchmark=salo_safety``
(hub ids, or local files through ``benchmark.sets.<set>.path``; ``methods.salo.data`` loaders). Both
are exercised in the tests on a tiny local Llama with fixture files in the benchmarks' formats; the
7-8B runs need a GPU. Attack placement is always explicit: ``attack_type`` ∈ {direct, suffix,
prefill}; the repo's dataset-name heuristic is not replicated.
"""

from __future__ import annotations

import csv
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from common.config import Run, dataset_source, model_id
from common.tracking import write_results
from methods.salo.baselines import LastTokenProbe, MeanPoolMLP, RepEDirection
from methods.salo.calibrate import auroc, calibrate_threshold, detection_rate
from methods.salo.config import ATTACK_SETS, ATTACK_TYPES, CALIBRATION_SET, TRAIN_SETS
from methods.salo.operator import save_detector
from methods.salo.train import SALOConfig, TrainConfig, score_detector, train_detector, train_salo
from methods.salo.volume import collect_volumes

logger = logging.getLogger(__name__)


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


def paper_stage(run: Run) -> dict[str, float]:
    """``stage=paper``: SALO and the static baselines on ``model``, data from ``benchmark``.

    ``benchmark=salo_safety`` sets by role: ``saferlhf`` / ``toxic_chat`` (clean training prompts,
    official ``process_data.py`` caps), ``xstest`` (calibration), ``advbench`` (direct + prefill
    attacks). ``method.paper`` adds the per-model attack files (official CSVs with an explicit
    ``attack_type``, JailbreakBench artifacts, AutoDAN results with a ``placement``) and
    ``gcg_generate`` (run :func:`gcg_attack` on the first ``n_prompts`` AdvBench goals towards their
    targets). Detectors are saved into the run folder.
    """
    t0 = time.time()
    metrics = run_paper(run)
    return write_results(run.run_dir, "salo", metrics, cfg=run.cfg, wall_time_s=time.time() - t0)


def _check_sets(bench) -> None:
    """Every set of the benchmark has a SALO role; a calibration set and a training set exist."""
    sets = bench.sets
    unknown = set(sets) - {*TRAIN_SETS, CALIBRATION_SET, *ATTACK_SETS}
    if unknown:
        raise ValueError(
            f"benchmark {bench.name} has sets {sorted(unknown)} without a SALO role; "
            f"known: train {TRAIN_SETS}, calibration {CALIBRATION_SET!r}, attacks {ATTACK_SETS}"
        )
    if CALIBRATION_SET not in sets or not set(TRAIN_SETS) & set(sets):
        raise ValueError(
            f"benchmark {bench.name} needs an {CALIBRATION_SET!r} set and one of {TRAIN_SETS}"
        )


def _train_data(sets, p) -> tuple[list[str], list[int]]:
    """The clean training prompts and labels: PKU-SafeRLHF and/or ToxicChat (paper §4 setup)."""
    from methods.salo import data

    train_p, train_y = [], []
    if "saferlhf" in sets:
        sp, sy = data.load_saferlhf(dataset_source(sets["saferlhf"]), p.saferlhf_cap)
        train_p, train_y = train_p + sp, train_y + sy
    if "toxic_chat" in sets:
        t = sets["toxic_chat"]
        tp, ty = data.load_toxic_chat(
            dataset_source(t), t.config, p.toxic_chat_cap_per_class, p.toxic_chat_max_chars
        )
        train_p, train_y = train_p + tp, train_y + ty
    return train_p, train_y


def _attack_sets(model, tok, sets, p, seed: int) -> dict[str, AttackSet]:
    """Every attack set the run names: AdvBench direct/prefill (+ GCG generated here), the official
    GCG/AutoDAN CSVs, extra CSVs, JailbreakBench artifacts and AutoDAN result files."""
    from methods.salo import data
    from methods.salo.gcg import gcg_attack

    attacks: dict[str, AttackSet] = {}
    if "advbench" in sets:
        limit = p.advbench_limit or sets["advbench"].limit
        adv = data.load_advbench(dataset_source(sets["advbench"]), limit)
        attacks["advbench_direct"], attacks["advbench_prefill"] = adv["direct"], adv["prefill"]
        gen = p.gcg_generate
        if gen.n_prompts > 0:
            goals = adv["direct"].prompts[: gen.n_prompts]
            targets = adv["prefill"].injections[: gen.n_prompts]
            sfx = [
                gcg_attack(
                    model,
                    tok,
                    g,
                    t,
                    n_tokens=gen.n_tokens,
                    steps=gen.steps,
                    topk=gen.topk,
                    n_candidates=gen.n_candidates,
                    seed=seed + i,
                ).suffix
                for i, (g, t) in enumerate(zip(goals, targets, strict=True))
            ]
            attacks["gcg_generated"] = AttackSet(goals, "suffix", sfx)
    if p.official_gcg_path:
        attacks["gcg"] = load_attack_csv(p.official_gcg_path, "suffix")
    if p.official_autodan_path:
        attacks["autodan"] = load_attack_csv(p.official_autodan_path, "prefill")
    for name, f in p.csv.items():
        attacks[name] = load_attack_csv(f["path"], f.get("attack_type", "suffix"))
    for name, path in p.jbb.items():
        attacks[name] = data.load_jbb_artifact(path)
    for name, f in p.autodan.items():
        attacks[name] = data.load_autodan_results(f["path"], f.get("placement", "user"))
    if not attacks:
        raise ValueError("no attack set: add an advbench set or method.paper.csv/jbb/autodan files")
    return attacks


def run_paper(run: Run) -> dict[str, dict[str, float]]:
    """The paper pipeline of :func:`paper_stage`; returns ``{detector: {metric: value}}``."""
    from common.models import load_model, load_tokenizer
    from methods.salo import data

    mc, p = run.method, run.method.paper
    if run.model is None or run.benchmark is None:
        raise ValueError("stage=paper needs model=<checkpoint> and benchmark=salo_safety")
    spec = model_id(run.model)
    model = load_model(spec, dtype=run.model.dtype)
    model.eval()
    tok = load_tokenizer(spec)
    sets = run.benchmark.sets
    _check_sets(run.benchmark)
    train_p, train_y = _train_data(sets, p)
    cal = sets[CALIBRATION_SET]
    calib = data.load_xstest(dataset_source(cal), cal.split)
    attacks = _attack_sets(model, tok, sets, p, run.seed)
    op = SALOConfig(mc.n_filters, mc.layer_kernel, list(mc.token_kernels), mc.dropout, "max")
    tcfg = TrainConfig(
        mc.epochs, mc.batch_size, mc.lr, mc.weight_decay, grad_clip=mc.grad_clip, seed=run.seed
    )
    meta = {
        "model": run.model.name,
        "window": list(mc.window),
        "hidden_size": model.config.hidden_size,
    }
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
        batch_size=p.batch_size,
        mlp_dim=mc.mlp_dim,
        save_dir=str(run.run_dir),
        meta=meta,
    )
