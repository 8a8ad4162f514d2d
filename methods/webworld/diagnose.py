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

from common.metrics import paired_difference as paired
from methods.webworld.toy_lookahead import decision_stats, lookahead

logger = logging.getLogger(__name__)

SWEEP = (0.0, 0.25, 0.5, 0.75, 1.0)


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


def diagnose(tc, seed: int, out: Path, variants: dict | None = None) -> dict:
    """Runs the experiment; returns the results dict. ``variants``: more ``{label: run config}``
    learned arms (another world model, a confidence threshold), each with its own decision stats."""
    t0 = time.time()
    learned = {"bon_learned": tc, **(variants or {})}
    log: list[dict] = []
    base = _arm(
        tc, test_sites_of(tc, seed), None, seed, log, lookahead_arms=["greedy", "bon_oracle"]
    )
    effects, stats, t_model = (
        {},
        {"bon_oracle": decision_stats([r for r in log if r["arm"] == "bon_oracle"])},
        0.0,
    )
    for label, vtc in learned.items():
        t1 = time.time()
        gen, test_sites, effects[label] = world_model(vtc, seed, out)
        t_model += time.time() - t1
        vlog: list[dict] = []
        base[label] = _arm(vtc, test_sites, gen, seed, vlog, lookahead_arms=["bon_learned"])[
            "bon_learned"
        ]
        stats[label] = decision_stats(vlog)
        log += [dict(r, arm=label) for r in vlog]
    acc = stats["bon_learned"]["title_acc"]
    ts = test_sites_of(tc, seed)
    base["bon_noisy@measured"] = _arm(
        tc, ts, None, seed, None, lookahead_arms=["bon_noisy"], noisy_acc=acc
    )["bon_noisy"]
    for err in ("title", "copy"):
        for q in SWEEP:
            r = _arm(
                tc, ts, None, seed, None, lookahead_arms=["bon_noisy"], noisy_acc=q, noisy_error=err
            )
            base[f"noisy_{err}@{q}"] = r["bon_noisy"]
    greedy = [statistics.mean(e) for e in base["greedy"]["_episodes"]]
    table = {}
    for arm, m in base.items():
        per = [statistics.mean(e) for e in m["_episodes"]]
        d = paired(per, greedy)
        table[arm] = {
            "success": statistics.mean(per),
            **{f"vs_greedy_{k}": v for k, v in d.items()},
        }
    return dict(
        effects=effects,
        in_context=stats,
        noisy_acc=acc,
        table=table,
        model_s=t_model,
        lookahead_s=time.time() - t0 - t_model,
        decisions=[r for r in log if r["arm"] == "bon_learned"][:200],
    )


def test_sites_of(tc, seed: int) -> list:
    """The held-out sites of the toy run with ``seed`` (the first draws of ``toy_stage``)."""
    from methods.webworld.toy_sites import make_sites

    return make_sites(tc.n_sites, random.Random(seed), n_pages=tc.n_pages)[tc.n_train_sites :]


def _markdown(res: dict) -> str:
    st = res["in_context"]
    labels = list(st)
    lines = [
        "# WebWorld toy: lookahead diagnosis",
        "",
        "| in context | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for k in st["bon_learned"]:
        lines.append(f"| {k} | " + " | ".join(f"{st[a][k]:.3f}" for a in labels) + " |")
    for k in ("effect_acc", "click_acc", "go_back_acc"):
        row = [f"{res['effects'][a][k]:.3f}" if a in res["effects"] else "-" for a in labels]
        lines.append(f"| held-out crawls: {k} | " + " | ".join(row) + " |")
    lines += [
        "",
        "| arm | success | Δ vs greedy (paired) | 95% CI | seeds |",
        "|---|---|---|---|---|",
    ]
    for arm, m in res["table"].items():
        lo, hi = (
            m["vs_greedy_delta"] - m["vs_greedy_ci95"],
            m["vs_greedy_delta"] + m["vs_greedy_ci95"],
        )
        lines.append(
            f"| {arm} | {m['success']:.3f} | {m['vs_greedy_delta']:+.3f} | "
            f"[{lo:+.3f}, {hi:+.3f}] | {int(m['vs_greedy_n'])} |"
        )
    lines += [
        "",
        f"bon_noisy@measured: accuracy = bon_learned's in-context title_acc {res['noisy_acc']:.3f}, "
        f"random-title errors; world models {res['model_s']:.0f} s, lookahead {res['lookahead_s']:.0f} s",
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
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="another learned arm: 'label=override[;override...]' (added to the base overrides)",
    )
    args = ap.parse_args(argv)
    base = ["experiment=webworld_toy", *args.overrides]
    run = validate(compose(base))
    variants = {}
    for v in args.variant:
        label, ov = v.split("=", 1)
        variants[f"bon_learned[{label}]"] = validate(compose([*base, *ov.split(";")])).method
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with torch_threads(run.method.threads):
        res = diagnose(run.method, int(run.seed), out, variants)
    res["overrides"] = args.overrides
    res["variants"] = args.variant
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    (out / "results.md").write_text(_markdown(res))
    _plot(res, out / "lookahead_noise.png")
    print(_markdown(res))
    return res


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
