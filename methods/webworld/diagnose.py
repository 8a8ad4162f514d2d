"""Diagnosis of the toy's lookahead (docs/methods/webworld.md "Diagnosis"; issue 43).

``python -m methods.webworld.diagnose [hydra overrides of experiment=webworld_toy]``

Trains the toy's large world model (the ``data_large`` arm of ``icml26 experiment=webworld_toy``:
same sites, crawls, tokenizer, warm-up and SFT; the small arm is skipped), then runs the
lookahead arms with every decision recorded (candidates, true and predicted next titles, values,
choice), measures the learned simulator's in-context title accuracy, recall of the target and
false-positive rate, and runs noisy oracles: one at the learned model's measured in-context
accuracy, and a sweep over accuracies with two error kinds (a wrong title drawn from the site,
which can name the target; or no change, which cannot). Paired differences against greedy are over
seeds (the arms share every episode's start, target and agent samples). Writes ``results.json``,
``results.md`` and ``lookahead_noise.png`` under ``outputs/webworld_diagnose/`` (``--out``).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import random
import statistics
import tempfile
import time
from pathlib import Path

from common.metrics import ci_halfwidth
from methods.webworld.toy_lookahead import decision_stats, lookahead

logger = logging.getLogger(__name__)

SWEEP = (0.0, 0.25, 0.5, 0.75, 1.0)


def paired(a: list[float], b: list[float]) -> dict[str, float]:
    """Mean of the paired differences ``a - b`` and its 95% half-width (Student t over the pairs)."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    return {"delta": statistics.mean(d), "ci95": ci_halfwidth(d, dist="t"), "n": float(len(d))}


def _model_key(tc, seed: int) -> str:
    keys = ("n_sites", "n_train_sites", "n_pages", "min_steps", "max_steps", "data_sizes")
    keys += ("epochs", "lr", "batch_size", "model", "induction_steps", "prompts", "tokenizer")
    blob = json.dumps({k: getattr(tc, k) for k in keys} | {"seed": seed}, sort_keys=True)
    return hashlib.sha1(blob.encode()).hexdigest()[:10]


def world_model(tc, seed: int, cache: Path):
    """The toy's large world model (trained, or loaded from ``cache/model_<config hash>``) and the
    held-out sites; returns ``(generator, test_sites, effect_metrics)``."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    from common.generation import HFGenerator
    from methods.webworld.toy import _crawls, _grammar_texts, _train_arm
    from methods.webworld.toy_sites import make_sites
    from methods.webworld.train import chat_dataset, site_tokenizer

    rng = random.Random(seed)  # the same draws as toy_stage
    sites = make_sites(tc.n_sites, rng, n_pages=tc.n_pages)
    test_sites = sites[tc.n_train_sites :]
    path = cache / f"model_{_model_key(tc, seed)}"
    if (path / "effects.json").exists():
        model = AutoModelForCausalLM.from_pretrained(path)
        tok = PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
        gen = HFGenerator(model.eval(), tok, batch_size=32)
        return gen, test_sites, json.loads((path / "effects.json").read_text())
    pool = _crawls(sites[: tc.n_train_sites], tc.data_sizes[1], rng, tc)
    evals = _crawls(test_sites, tc.eval_trajectories, rng, tc)
    full = chat_dataset(pool, **dict(tc.prompts or {}))
    corpus = [m["content"] for r in full for m in r["messages"]] + _grammar_texts()
    tok = site_tokenizer(corpus, tc.vocab_size, kind=tc.tokenizer)
    with tempfile.TemporaryDirectory() as tmp:
        gen, eff = _train_arm(tc, tok, full, evals, seed, tmp)
    gen.model.save_pretrained(path)
    tok.save_pretrained(path)
    (path / "effects.json").write_text(json.dumps(eff))
    return gen, test_sites, eff


def _arm(tc, test_sites, gen, seed, log=None, **over):
    tc2 = dataclasses.replace(tc, **over)
    return lookahead(tc2, test_sites, gen, seed, log)


def diagnose(tc, seed: int, out: Path) -> dict:
    """Runs the experiment; returns the results dict (also written to ``out``)."""
    t0 = time.time()
    gen, test_sites, eff = world_model(tc, seed, out)
    t_model = time.time() - t0
    log: list[dict] = []
    base = _arm(tc, test_sites, gen, seed, log, lookahead_arms=["greedy", "bon_learned"])
    base.update(_arm(tc, test_sites, gen, seed, log, lookahead_arms=["bon_oracle"]))
    stats = {
        a: decision_stats([r for r in log if r["arm"] == a]) for a in ("bon_learned", "bon_oracle")
    }
    acc = stats["bon_learned"]["title_acc"]
    base.update(_arm(tc, test_sites, gen, seed, None, lookahead_arms=["bon_noisy"], noisy_acc=acc))
    sweep = {}
    for err in ("title", "copy"):
        for q in SWEEP:
            r = _arm(
                tc,
                test_sites,
                None,
                seed,
                None,
                lookahead_arms=["bon_noisy"],
                noisy_acc=q,
                noisy_error=err,
            )
            sweep[f"{err}@{q}"] = r["bon_noisy"]
    greedy = [statistics.mean(e) for e in base["greedy"]["_episodes"]]
    table = {}
    for arm, m in {**base, **{f"noisy_{k}": v for k, v in sweep.items()}}.items():
        per = [statistics.mean(e) for e in m["_episodes"]]
        table[arm] = {
            "success": statistics.mean(per),
            **{f"vs_greedy_{k}": v for k, v in paired(per, greedy).items()},
        }
    res = dict(
        effects=eff,
        in_context=stats,
        noisy_acc=acc,
        table=table,
        model_s=t_model,
        lookahead_s=time.time() - t0 - t_model,
        decisions=log[:200],
    )
    return res


def _markdown(res: dict) -> str:
    s = res["in_context"]["bon_learned"]
    o = res["in_context"]["bon_oracle"]
    lines = [
        "# WebWorld toy: lookahead diagnosis",
        "",
        f"world model: effect_acc {res['effects']['effect_acc']:.3f} (click "
        f"{res['effects'].get('click_acc', float('nan')):.3f}) on held-out crawls",
        "",
        "| in context (bon_learned decisions) | value |",
        "|---|---|",
        *[f"| {k} | {v:.3f} |" for k, v in s.items()],
        f"| decisive (oracle arm's decisions) | {o['decisive']:.3f} |",
        "",
        "| arm | success | Δ vs greedy | 95% CI | seeds |",
        "|---|---|---|---|---|",
    ]
    for arm, m in res["table"].items():
        lines.append(
            f"| {arm} | {m['success']:.3f} | {m['vs_greedy_delta']:+.3f} | "
            f"±{m['vs_greedy_ci95']:.3f} | {int(m['vs_greedy_n'])} |"
        )
    lines += [
        "",
        f"noisy arm accuracy = measured title_acc {res['noisy_acc']:.3f}; "
        f"model {res['model_s']:.0f} s, lookahead {res['lookahead_s']:.0f} s",
    ]
    return "\n".join(lines) + "\n"


def _plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    t = res["table"]
    for err, lab in (
        ("title", "noisy oracle, error = random title"),
        ("copy", "noisy oracle, error = no change"),
    ):
        ys = [t[f"noisy_{err}@{q}"]["vs_greedy_delta"] for q in SWEEP]
        es = [t[f"noisy_{err}@{q}"]["vs_greedy_ci95"] for q in SWEEP]
        ax.errorbar(SWEEP, ys, yerr=es, marker="o", capsize=3, label=lab)
    for arm in [a for a in t if a.startswith("bon_learned")]:
        ax.errorbar(
            [res["noisy_acc"]],
            [t[arm]["vs_greedy_delta"]],
            yerr=[t[arm]["vs_greedy_ci95"]],
            marker="*",
            ms=12,
            capsize=3,
            ls="none",
            label=f"{arm} (at its in-context acc)",
        )
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel("simulator title accuracy")
    ax.set_ylabel("success − greedy (paired, 95% CI)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> dict:
    from common.config import validate
    from common.registry import compose
    from common.threads import torch_threads

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("overrides", nargs="*", help="hydra overrides of experiment=webworld_toy")
    ap.add_argument("--out", default="outputs/webworld_diagnose")
    args = ap.parse_args(argv)
    run = validate(compose(["experiment=webworld_toy", *args.overrides]))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with torch_threads(run.method.threads):
        res = diagnose(run.method, int(run.seed), out)
    res["overrides"] = args.overrides
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "results.md").write_text(_markdown(res))
    _plot(res, out / "lookahead_noise.png")
    print(_markdown(res))
    return res


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
