"""Diagnosis of the toy: does a representation's distance predict the loss once relevance is graded?

``python -m methods.instruction_selection.diagnose`` builds the toy pool with graded near-target
families (``add~q``: pool-phrased additions right with probability ``q``, :mod:`.toy_graded`), the
toy's base model and the RDS+ / EMBED / LESS similarities, then

* a family probe: fine-tune on ``per_quantile`` rows of one family at a time (the transfer order the
  graded pool is built to have; subtraction reported apart);
* the distance-quantile protocol (paper Figs. 2–3) per representation: RR order, 10 chunks, the
  first ``per_quantile`` of each fine-tuned for a fixed number of epochs (not steps) with several
  fine-tune seeds; each chunk's family histogram and ``W₁`` to the queries; Spearman ρ(W₁, loss)
  with a bootstrap 95% interval;
* paired Δ = loss(RR top-B) − loss(random B) at equal budget (B = ``per_quantile``), per fine-tune
  seed (the random subset is drawn with the same seed), mean and Student-t 95% interval.

Writes results.json, results.md and diagnosis.png to ``--out``. Our diagnostic experiment
(docs/methods/instruction_selection.md, "Diagnosis"), not the paper's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import yaml

from common.metrics import ci_halfwidth, spearman
from common.threads import torch_threads
from methods.instruction_selection import toy
from methods.instruction_selection.config import InstructionSelectionConfig
from methods.instruction_selection.toy_graded import finetune_steps, near_family

__all__ = ["bootstrap_spearman", "diagnosis_config", "main", "paired_delta", "run_diagnosis"]

PRESET = Path(__file__).resolve().parents[2] / "configs/experiment/instruction_selection_toy.yaml"
GRADES: tuple[float, ...] = (0.75, 0.5, 0.25, 0.0)


def diagnosis_config(**overrides) -> InstructionSelectionConfig:
    """The toy preset (``configs/experiment/instruction_selection_toy.yaml``) with ``overrides``."""
    preset = yaml.safe_load(PRESET.read_text())["method"]
    preset.pop("stage", None)
    return InstructionSelectionConfig(**{**preset, **overrides})


def paired_delta(a: list[float], b: list[float]) -> dict[str, float]:
    """Mean of ``a[i] − b[i]`` and its Student-t 95% half-width (NaN below two pairs)."""
    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    return {"delta": float(d.mean()), "ci": ci_halfwidth(d, dist="t"), "n": int(d.size)}


def bootstrap_spearman(
    x: list[float], losses: list[list[float]], n_boot: int = 2000, seed: int = 0
) -> dict[str, float]:
    """Spearman ρ of ``x`` against the per-chunk mean loss, and a 95% percentile bootstrap interval
    that resamples the chunks (pairs) and, within each chunk, its fine-tune seeds."""
    x = np.asarray(x, dtype=float)
    rho = spearman(x, [float(np.mean(v)) for v in losses])
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_boot):
        means = np.array([np.mean(rng.choice(v, size=len(v))) for v in losses])
        idx = rng.integers(0, len(x), size=len(x))
        if len(set(x[idx])) > 2:
            draws.append(spearman(x[idx], means[idx]))
    lo, hi = np.nanpercentile(draws, [2.5, 97.5])
    return {"rho": float(rho), "lo": float(lo), "hi": float(hi)}


class _Setup:
    """Pool, queries, test set, base model, similarities and the fine-tune evaluator of one run."""

    def __init__(self, cfg: InstructionSelectionConfig, seed: int = 0):
        from methods.instruction_selection.pipeline import similarities

        self.cfg, self.seed = cfg, seed
        torch.manual_seed(seed)
        tok = toy.char_tokenizer()
        self.pad = tok.pad_token_id
        self.pool = toy.make_pool(
            cfg.pool_size, cfg.target_frac, seed, cfg.near_grades, cfg.near_frac
        )
        self.families = [r["dataset"] for r in self.pool]
        queries = toy.make_target(cfg.n_queries, seed + 1)
        self.items = toy._encode_pool(self.pool, tok)
        self.test = toy._encode_queries(toy.make_target(cfg.n_test, seed + 2), tok)
        self.base = toy.pretrain_base(tok, cfg.pretrain_steps, seed)
        self.zero_shot = toy.target_loss(self.base, self.test, self.pad)
        self.sims = similarities(cfg, self.base, tok, self.pool, queries, seed)
        self.n_finetunes = 0

    def loss(self, subset: list[int], ft_seed: int) -> float:
        """Target-test loss after fine-tuning a copy of the base on ``subset`` (seed ``ft_seed``)."""
        cfg = self.cfg
        items = [self.items[j] for j in subset]
        steps = finetune_steps(cfg, len(items))
        model = toy.finetune_copy(
            self.base, items, steps, cfg.train_batch, cfg.train_lr, ft_seed, self.pad
        )
        self.n_finetunes += 1
        return toy.target_loss(model, self.test, self.pad)


def _family_probe(st: _Setup, seeds: list[int]) -> dict[str, dict[str, float]]:
    """Loss after fine-tuning on ``per_quantile`` random rows of each family (unrelated families
    pooled as ``other``): the transfer order the graded pool is built to have."""
    rng = np.random.default_rng(st.seed + 7)
    groups: dict[str, list[int]] = {}
    for j, f in enumerate(st.families):
        key = f if f in ("add", "sub") or f.startswith("add~") else "other"
        groups.setdefault(key, []).append(j)
    out = {}
    for fam in ["add", *(near_family(q) for q in st.cfg.near_grades), "sub", "other"]:
        if fam not in groups:
            continue
        rows = groups[fam]
        sub = [int(j) for j in rng.choice(rows, min(st.cfg.per_quantile, len(rows)), replace=False)]
        losses = [st.loss(sub, s) for s in seeds]
        out[fam] = {"n": len(sub), "loss": float(np.mean(losses)), "losses": losses}
    return out


def _quantiles(st: _Setup, rep: str, seeds: list[int], chunk_seeds: int, n_boot: int) -> dict:
    """The distance-quantile protocol for one representation: per chunk its family histogram, W₁
    to the queries and losses (chunk 0 with every seed, the others with the first ``chunk_seeds``)."""
    from methods.instruction_selection.distance import wasserstein1
    from methods.instruction_selection.experiments import distance_quantiles
    from methods.instruction_selection.selectors import round_robin

    S = st.sims[rep]
    chunks = distance_quantiles(round_robin(S, S.shape[1]), st.cfg.n_quantiles, st.cfg.per_quantile)
    rows = []
    for q, c in enumerate(chunks):
        use = seeds if q == 0 else seeds[:chunk_seeds]
        losses = [st.loss(c, s) for s in use]
        hist = dict(Counter(st.families[j] for j in c).most_common())
        rows.append({"chunk": q, "w1": wasserstein1(S, c), "losses": losses, "families": hist})
    w1 = [r["w1"] for r in rows]
    losses = [r["losses"] for r in rows]
    return {
        "chunks": rows,
        "rho_w1_loss": bootstrap_spearman(w1, losses, n_boot),
        "rho_chunk_loss": bootstrap_spearman(list(range(len(rows))), losses, n_boot),
    }


def run_diagnosis(
    cfg: InstructionSelectionConfig,
    seeds: list[int],
    chunk_seeds: int = 3,
    n_boot: int = 2000,
    probe: bool = True,
) -> dict:
    """Every piece of the experiment on one pool and base (module docstring); returns the results."""
    from methods.instruction_selection.selectors import random_select

    t0 = time.time()
    st = _Setup(cfg)
    t_setup = time.time() - t0
    B = cfg.per_quantile
    random_losses = [st.loss(random_select(len(st.pool), B, seed=s), s) for s in seeds]
    out: dict = {
        "zero_shot": st.zero_shot,
        "budget": B,
        "seeds": seeds,
        "random": random_losses,
        "pool_families": dict(Counter(st.families).most_common()),
        "family_probe": _family_probe(st, seeds[:chunk_seeds]) if probe else {},
        "representations": {},
    }
    for rep in cfg.representations:
        res = _quantiles(st, rep, seeds, chunk_seeds, n_boot)
        res["paired_vs_random"] = paired_delta(res["chunks"][0]["losses"], random_losses)
        out["representations"][rep] = res
    out.update(setup_s=t_setup, wall_s=time.time() - t0, n_finetunes=st.n_finetunes)
    return out


def _f(x: float, nd: int = 3) -> str:
    return f"{x:+.{nd}f}" if np.isfinite(x) else "nan"


def _markdown(res: dict, command: str) -> str:
    reps = res["representations"]
    lines = [
        f"Command: `{command}` ({res['wall_s']:.0f} s, {res['n_finetunes']} fine-tunes). "
        f"Zero-shot target loss {res['zero_shot']:.3f}; budget B = {res['budget']}; "
        f"random B: {np.mean(res['random']):.3f} (mean of {len(res['seeds'])} seeds).",
        "",
        "| representation | ρ(W₁, loss) [95% CI] | ρ(chunk, loss) [95% CI] | loss q0 | "
        "Δ top-B − random [95% CI] (n) |",
        "|---|---|---|---|---|",
    ]
    for rep, r in reps.items():
        a, c, d = r["rho_w1_loss"], r["rho_chunk_loss"], r["paired_vs_random"]
        q0 = float(np.mean(r["chunks"][0]["losses"]))
        lines.append(
            f"| {rep} | {_f(a['rho'], 2)} [{_f(a['lo'], 2)}, {_f(a['hi'], 2)}] | {_f(c['rho'], 2)} "
            f"[{_f(c['lo'], 2)}, {_f(c['hi'], 2)}] | {q0:.3f} | {_f(d['delta'])} "
            f"[{_f(d['delta'] - d['ci'])}, {_f(d['delta'] + d['ci'])}] ({d['n']}) |"
        )
    probe = res["family_probe"]
    if probe:
        lines += [
            "",
            "| family probe (rows of one family) | n | loss | Δ vs zero-shot | "
            "paired Δ vs add [95% CI] |",
            "|---|---|---|---|---|",
        ]
        for fam, p in probe.items():
            d = paired_delta(p["losses"], probe["add"]["losses"]) if "add" in probe else None
            ci = f"{_f(d['delta'])} [{_f(d['delta'] - d['ci'])}, {_f(d['delta'] + d['ci'])}]"
            lines.append(
                f"| {fam} | {p['n']} | {p['loss']:.3f} | {_f(p['loss'] - res['zero_shot'])} | "
                f"{ci if d else ''} |"
            )
    for rep, r in reps.items():
        lines += ["", f"| {rep} chunk | W₁ | mean loss | families |", "|---|---|---|---|"]
        for ch in r["chunks"]:
            fams = ", ".join(f"{k} {v}" for k, v in ch["families"].items())
            lines.append(
                f"| q{ch['chunk']} | {ch['w1']:.3f} | {np.mean(ch['losses']):.3f} | {fams} |"
            )
    return "\n".join(lines) + "\n"


def _plot(res: dict, path: Path) -> None:
    from common.tracking import pyplot, save_plot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for rep, r in res["representations"].items():
        w1 = [c["w1"] for c in r["chunks"]]
        mean = [np.mean(c["losses"]) for c in r["chunks"]]
        err = [np.std(c["losses"]) for c in r["chunks"]]
        ax.errorbar(w1, mean, yerr=err, marker="o", capsize=2, label=f"{rep} (RR chunks)")
    ax.axhline(res["zero_shot"], color="grey", ls="--", label="zero-shot")
    ax.axhline(float(np.mean(res["random"])), color="black", ls=":", label="random B")
    ax.set(xlabel="chunk W₁ to the queries (own representation)", ylabel="target test loss")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_plot(fig, path)
    plt.close(fig)


@torch_threads(1)
def main(argv: list[str] | None = None) -> dict:
    """CLI: parse, run, write results.json / results.md / diagnosis.png under ``--out``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(5)))
    ap.add_argument("--chunk-seeds", type=int, default=3, help="fine-tune seeds of chunks 1..9")
    ap.add_argument("--grades", type=float, nargs="*", default=list(GRADES))
    ap.add_argument("--near-frac", type=float, default=0.05)
    ap.add_argument("--epochs", type=float, default=10.0, help="fine-tune epochs (0: fixed steps)")
    ap.add_argument("--per-quantile", type=int, default=120)
    ap.add_argument("--representations", nargs="*", default=["rds", "embed", "less"])
    ap.add_argument("--pool-size", type=int, default=3000)
    ap.add_argument("--pretrain-steps", type=int, default=300)
    ap.add_argument("--n-test", type=int, default=200)
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--no-probe", action="store_true", help="skip the family probe")
    ap.add_argument("--out", default="outputs/instruction_selection_diagnosis")
    a = ap.parse_args(argv)
    cfg = diagnosis_config(
        near_grades=a.grades,
        near_frac=a.near_frac,
        train_epochs=a.epochs,
        per_quantile=a.per_quantile,
        representations=a.representations,
        pool_size=a.pool_size,
        pretrain_steps=a.pretrain_steps,
        n_test=a.n_test,
    )
    res = run_diagnosis(cfg, a.seeds, a.chunk_seeds, a.n_boot, probe=not a.no_probe)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python -m methods.instruction_selection.diagnose " + " ".join(
        sys.argv[1:] if argv is None else argv
    )
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(_markdown(res, command.strip()))
    _plot(res, out / "diagnosis.png")
    print((out / "results.md").read_text())
    return res


if __name__ == "__main__":
    main()
