"""Issue-43 diagnosis of the trained toy: can an induced association reach the answer at all?

``python -m methods.llminertia.diagnose`` trains the stage-0 base model for every cell of a grid of
the two stage-0 knobs of :class:`methods.llminertia.config.TrainedToyConfig`: ``leak_share`` (the
label of explicit known-pair items with B stated absent follows the association, "yes", in that
share of them) and ``n_distractors`` (extra statements about other entities in every explicit item,
a longer evidence). Each base model is then induced on the test pairs at three co-occurrence shares
(graded association strengths; ``continued_pretrain``, the official recipe's shape) and read out:
the plain wrong-"yes" rate on the test pairs' negative-evidence items minus the same rate on
control items that pair the same A and B entities without an association (A_j with B_(j+1)), against
the mean log p(B | "A with") of the test pairs. The generic note and LLMInertia arms run only where
the plain wrong-yes rate is between 5 % and 60 % (there is something to correct and room to do so);
their paired Δ against plain is pooled over the qualifying (seed, share) units of a cell. Writes
``results.json``, ``results.md`` and ``llminertia_diagnose.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time
from pathlib import Path
from typing import Any

from common.metrics import paired_difference as paired
from common.threads import torch_threads
from common.tracking import pyplot, save_plot

from .config import TrainedToyConfig
from .core import answer_plain
from .induction_data import make_cooccurrence_corpus
from .induction_train import continued_pretrain
from .toy import _eval_arms, _induction_args, _stage0, _wrong_yes_all
from .toy_world import (
    TOY_COOC_TEMPLATES,
    TOY_PROMPTS,
    ToyQAChat,
    _last_logits,
    association_logprob,
)

MITIGATION_BAND = (0.05, 0.60)  # plain wrong-yes band where the note arms are run


def control_pairs(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The same A and B entities, re-paired without an association: (A_j, B_(j+1))."""
    return [(a, pairs[(i + 1) % len(pairs)][1]) for i, (a, _) in enumerate(pairs)]


def yes_margin(model: Any, tok: Any, texts: list[str]) -> float:
    """Mean logit(yes) − logit(no) after each prompt: the graded answer behind the argmax."""
    lg = _last_logits(model, tok, texts)
    y, n = tok.convert_tokens_to_ids(["yes", "no"])
    return float((lg[:, y] - lg[:, n]).mean())


def readout(model: Any, tok: Any, world: Any, cfg: TrainedToyConfig, items: dict) -> dict:
    """Plain wrong-yes on test and control items, association strengths, and the note arms where
    the plain rate is inside :data:`MITIGATION_BAND`."""
    chat = ToyQAChat(model, tok, world)
    out = {
        "plain": _wrong_yes_all(answer_plain(chat, items["test"], TOY_PROMPTS)),
        "control": _wrong_yes_all(answer_plain(chat, items["control"], TOY_PROMPTS)),
        "known": _wrong_yes_all(answer_plain(chat, items["known"], TOY_PROMPTS)),
        "margin_test": yes_margin(model, tok, items["test"]),
        "margin_control": yes_margin(model, tok, items["control"]),
        "logp_test": association_logprob(model, tok, world.test),
        "logp_control": association_logprob(model, tok, control_pairs(world.test)),
    }
    if MITIGATION_BAND[0] <= out["plain"] <= MITIGATION_BAND[1]:
        ev = _eval_arms(chat, items["test"], cfg.k)
        out |= {"generic": ev["generic"], "llminertia": ev["llminertia"]}
        out["plain_arms"] = ev["plain"]  # the same plain rate, from the arm evaluation
    return out


def run_unit(cfg: TrainedToyConfig, ratios: list[float], out_dir: str) -> dict:
    """One (cell, seed): stage 0, then induction at each share; one readout per model."""
    world, tok, base, _, acc = _stage0(cfg)
    n, s = cfg.n_test_templates, cfg.seed
    items = {
        "test": world.negative_tests(world.test, n, s)[0],
        "control": world.negative_tests(control_pairs(world.test), n, s)[0],
        "known": world.negative_tests(world.known, n, s + 1)[0],
    }
    rows = [{"ratio": 0.0, "induced": False, **readout(base, tok, world, cfg, items)}]
    for ratio in ratios:
        corpus = make_cooccurrence_corpus(
            world.test, ratio, TOY_COOC_TEMPLATES, world.filler(200, cfg.seed), seed=cfg.seed
        )
        model = copy.deepcopy(base)
        tok.padding_side = "right"
        continued_pretrain(model, tok, corpus, _induction_args(cfg, out_dir, ratio))
        tok.padding_side = "left"
        model.eval()
        rows.append({"ratio": ratio, "induced": True, **readout(model, tok, world, cfg, items)})
    return {"acc_explicit": acc, "rows": rows}


def summarise(units: list[dict]) -> dict:
    """Per strength: mean rates over seeds and the paired test − control Δ; the note arms' paired
    Δ against plain pooled over the qualifying (seed, share) units."""
    per: dict = {}
    for k in range(len(units[0]["rows"])):
        rs = [u["rows"][k] for u in units]
        per[str(rs[0]["ratio"])] = {
            "plain": statistics.mean(r["plain"] for r in rs),
            "control": statistics.mean(r["control"] for r in rs),
            "known": statistics.mean(r["known"] for r in rs),
            "logp_test": statistics.mean(r["logp_test"] for r in rs),
            "test_minus_control": paired([r["plain"] for r in rs], [r["control"] for r in rs]),
            "margin_test_minus_control": paired(
                [r["margin_test"] for r in rs], [r["margin_control"] for r in rs]
            ),
        }
    q = [r for u in units for r in u["rows"] if "llminertia" in r]
    mit = {
        f"{arm}-plain": paired([r[arm] for r in q], [r["plain"] for r in q])
        for arm in ("llminertia", "generic")
    }
    acc = statistics.mean(u["acc_explicit"] for u in units)
    return {"strengths": per, "mitigation": mit, "acc_explicit": acc}


def _ci(p: dict) -> str:
    if p["n"] == 0:
        return "not run"
    return f"{p['delta']:+.3f} [{p['delta'] - p['ci95']:+.3f}, {p['delta'] + p['ci95']:+.3f}]"


def markdown(res: dict) -> str:
    """Table 1: one row per cell × strength (plain arm); table 2: the note arms per cell."""
    lines = [
        "| leak share | distractors | explicit acc (base) | induction share | log p(B given A) test "
        "/ control | wrong yes test | control | known pairs | Δ test − control [95% CI] "
        "| Δ yes−no logit margin, test − control |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in res["cells"]:
        s = c["summary"]
        for ratio, r in s["strengths"].items():
            lp_c = statistics.mean(
                u["rows"][list(s["strengths"]).index(ratio)]["logp_control"] for u in c["units"]
            )
            lines.append(
                f"| {c['leak_share']:g} | {c['n_distractors']} | {s['acc_explicit']:.3f} "
                f"| {'base' if float(ratio) == 0 else ratio} | {r['logp_test']:.2f} / {lp_c:.2f} "
                f"| {r['plain']:.3f} | {r['control']:.3f} | {r['known']:.3f} "
                f"| {_ci(r['test_minus_control'])} | {_ci(r['margin_test_minus_control'])} |"
            )
    lines += [
        "",
        f"Note arms where plain wrong-yes is in {list(MITIGATION_BAND)} (paired over the "
        "qualifying (seed, share) units):",
        "",
        "| leak share | distractors | units | Δ LLMInertia − plain [95% CI] | Δ generic − plain |",
        "|---|---|---|---|---|",
    ]
    for c in res["cells"]:
        m = c["summary"]["mitigation"]
        lines.append(
            f"| {c['leak_share']:g} | {c['n_distractors']} | {m['llminertia-plain']['n']} "
            f"| {_ci(m['llminertia-plain'])} | {_ci(m['generic-plain'])} |"
        )
    return "\n".join(lines) + "\n"


def plot(res: dict, path: Path) -> None:
    """Wrong-yes (test − control) against log p(B | "A with"), one point per seed × strength."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for c in res["cells"]:
        rs = [r for u in c["units"] for r in u["rows"]]
        ax.scatter([r["logp_test"] for r in rs], [r["plain"] - r["control"] for r in rs], s=14,
                   label=f"leak {c['leak_share']:g}, distractors {c['n_distractors']}")  # fmt: skip
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_xlabel('association log p(B | "A with"), test pairs')
    ax.set_ylabel('wrong "yes": test − control pairs')
    ax.legend(fontsize=7)
    save_plot(fig, path)


@torch_threads(1)
def main(argv: list[str] | None = None) -> dict:
    """Parse the arguments, run the grid, write the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leak", type=float, nargs="+", default=[0.0, 0.1, 0.3])
    ap.add_argument("--distractors", type=int, nargs="+", default=[0, 3])
    ap.add_argument("--ratios", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--induce-steps", type=int, default=200)
    ap.add_argument("--base-steps", type=int, default=500)
    ap.add_argument("--out", default="outputs/llminertia_diagnose")
    args = ap.parse_args(argv)
    t0, res = time.perf_counter(), {"args": vars(args), "cells": []}
    for leak in args.leak:
        for nd in args.distractors:
            units = []
            for seed in range(args.seeds):
                cfg = TrainedToyConfig(
                    seed=seed, leak_share=leak, n_distractors=nd,
                    induce_steps=args.induce_steps, base_steps=args.base_steps,
                )  # fmt: skip
                units.append(run_unit(cfg, args.ratios, f"{args.out}/tmp"))
            cell = {"leak_share": leak, "n_distractors": nd, "units": units}
            res["cells"].append(cell | {"summary": summarise(units)})
            print(f"leak {leak} distractors {nd}: {time.perf_counter() - t0:.0f} s", flush=True)
    res["wall_seconds"] = time.perf_counter() - t0
    res["cpu_seconds"] = time.process_time()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(res, indent=1))
    (out / "results.md").write_text(markdown(res) + f"\nrun time {res['wall_seconds']:.0f} s\n")
    plot(res, out / "llminertia_diagnose.png")
    print(markdown(res))
    return res


if __name__ == "__main__":
    main()
