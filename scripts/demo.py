"""The tour behind ``make demo``: every registered method's toy at its demo size, then one table.

For each ``methods/<slug>/run.py`` it composes ``experiment=<slug>_toy`` plus the module's
``DEMO_OVERRIDES``, runs it into ``$ICML26_DEMO_DIR/demo/<slug>/`` (default ``<tmp>/icml26/demo``, never the checkout) and reads the two ``HEADLINE`` keys (the
method's headline metric and its baseline's). A first row always exercises the shared pieces on their
own: a few GRPO steps of a tiny Qwen2 on the arithmetic task through ``common/rl.py``.

Each row of the summary puts the demo-size pair next to the documented full-toy pair
(``TOY_RESULT`` of the method's ``run.py``, see ``common.demo``) and its command, says whether the
demo's direction (better / worse / tie against the baseline) agrees with the full toy's, and for a
method whose toy is negative or inconclusive gives the doc's verdict and reason.

    python -m scripts.demo                 # all methods
    python -m scripts.demo maxrl georl     # a subset
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("ICML26_PROGRESS", "0")

from common.demo import ToyResult, direction  # noqa: E402
from common.registry import compose, discover_methods, get_method, run_method  # noqa: E402

logger = logging.getLogger("icml26.demo")
# outside the checkout: $ICML26_DEMO_DIR, else <tmp>/icml26/demo
RESULTS = Path(os.environ.get("ICML26_DEMO_DIR") or Path(tempfile.gettempdir()) / "icml26" / "demo")


def foundation_demo(run_dir: Path, steps: int = 24, seed: int = 0) -> dict[str, float]:
    """GRPO through ``common.rl`` on arithmetic: mean reward of the first vs last quarter of steps.

    The reward is 1 for the exact answer plus the fraction of completion characters that are digits
    (a dense format signal that a random-init tiny model can pick up within a few dozen steps).
    """
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig

    from common.rl import GroupAdvantageGRPOTrainer, cpu_grpo_kwargs
    from common.tasks import make_arithmetic_dataset, verify_arithmetic
    from common.tiny import tiny_causal_lm

    def reward(completions, answer, **_):
        out = []
        for c, a in zip(completions, answer, strict=True):
            fmt = sum(ch.isdigit() for ch in c) / max(len(c), 1)
            out.append(verify_arithmetic(c, a) + fmt)
        return out

    history: list[float] = []

    class _Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                history.append(float(logs["reward"]))

    model, tok = tiny_causal_lm("qwen2", seed=seed)
    train = make_arithmetic_dataset(steps * 4, seed=seed)
    args = GRPOConfig(
        **cpu_grpo_kwargs(
            output_dir=str(run_dir / "trainer"),
            max_steps=steps,
            learning_rate=1e-2,
            per_device_train_batch_size=8,
            num_generations=8,
            max_completion_length=4,
            seed=seed,
        )
    )
    trainer = GroupAdvantageGRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=train,
        processing_class=tok,
        callbacks=[_Record()],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    q = max(1, len(history) // 4)
    return {
        "grpo/reward_last_quarter": sum(history[-q:]) / q,
        "grpo/reward_first_quarter": sum(history[:q]) / q,
        "grpo/steps": float(len(history)),
    }


def summarize(
    name: str,
    metric: str,
    value: float | None,
    base_metric: str,
    base_value: float | None,
    toy: ToyResult | None,
    seconds: float,
    error: str = "",
    higher_is_better: bool = True,
) -> dict:
    """One row of the tour: the demo-size pair next to the documented full toy, and what they say.

    ``agrees`` is whether the demo's direction (better / worse / tie against the baseline) is the
    full toy's; ``status`` is ``effect shown`` / ``effect not shown at demo size`` for a method whose
    doc reports an effect, the doc's verdict and reason for a negative or inconclusive toy, and
    ``error`` / ``missing metric`` when the run failed. ``toy=None`` (the shared-pieces row) compares
    against "the method is better" with ``higher_is_better``.
    """
    hib = toy.higher_is_better if toy is not None else higher_is_better
    row = {
        "method": name,
        "metric": metric,
        "baseline_metric": base_metric,
        "higher_is_better": hib,
        "value": value,
        "baseline": base_value,
        "ratio": value / base_value if (value is not None and base_value) else None,
        "toy_value": toy.method if toy else None,
        "toy_baseline": toy.baseline if toy else None,
        "toy_verdict": toy.verdict if toy else None,
        "command": toy.command if toy else f"python -m scripts.demo {name.split()[0]}",
        "demo_direction": None,
        "toy_direction": None,
        "agrees": None,
        "status": "",
        "wall_s": round(seconds, 1),
        "error": error,
    }
    if error:
        row["status"] = "error"
        return row
    if value is None or base_value is None:
        row["status"] = "missing metric"
        return row
    row["demo_direction"] = direction(value, base_value, hib)
    row["toy_direction"] = direction(toy.method, toy.baseline, hib) if toy else "better"
    row["agrees"] = row["demo_direction"] == row["toy_direction"]
    if toy is None or toy.verdict == "effect":
        row["status"] = "effect shown" if row["agrees"] else "effect not shown at demo size"
    else:
        row["status"] = f"{toy.verdict} toy (doc): {toy.note}"
    return row


def _fmt(v) -> str:
    return "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def table(rows: list[dict]) -> str:
    """The summary table in Markdown, one line per row of ``summarize``."""
    lines = [
        "| method | metric (baseline) | demo: method vs baseline | full toy: method vs baseline "
        "| direction agrees | verdict | full-toy command | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        arrow = "↑" if r["higher_is_better"] else "↓"
        metric = f"{r['metric']} {arrow} ({r['baseline_metric']})" if r["metric"] else ""
        demo = f"{_fmt(r['value'])} vs {_fmt(r['baseline'])}"
        toy = (
            "—"
            if r["toy_value"] is None
            else f"{_fmt(r['toy_value'])} vs {_fmt(r['toy_baseline'])}"
        )
        agrees = {True: "yes", False: "no", None: "—"}[r["agrees"]]
        status = f"FAILED: {r['error'][:80]}" if r["error"] else r["status"]
        cells = [r["method"], metric, demo, toy, agrees, status, f"`{r['command']}`", r["wall_s"]]
        lines.append("| " + " | ".join(_fmt(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    wanted = list(argv if argv is not None else sys.argv[1:])
    slugs = discover_methods()
    unknown = [s for s in wanted if s not in slugs and s != "common"]
    if unknown:
        print(f"unknown methods {unknown}; registered: {', '.join(slugs)}", file=sys.stderr)
        return 2
    rows = []
    t_all = time.time()
    if not wanted or "common" in wanted:
        t0 = time.time()
        m = foundation_demo(RESULTS / "demo" / "common")
        rows.append(
            summarize(
                "common (GRPO, arithmetic)",
                "reward, last quarter",
                m["grpo/reward_last_quarter"],
                "first quarter",
                m["grpo/reward_first_quarter"],
                None,
                time.time() - t0,
            )
        )
    for slug in [s for s in slugs if not wanted or s in wanted]:
        t0 = time.time()
        module = None
        try:
            module = get_method(slug)
            run_dir = RESULTS / "demo" / slug
            cfg = compose(
                [f"experiment={slug}_toy", *getattr(module, "DEMO_OVERRIDES", [])], run_dir
            )
            from transformers import set_seed

            set_seed(int(cfg.seed))
            metrics = run_method(cfg)
            key, base_key = module.HEADLINE
            rows.append(
                summarize(
                    slug,
                    key,
                    metrics.get(key),
                    base_key,
                    metrics.get(base_key),
                    module.TOY_RESULT,
                    time.time() - t0,
                )
            )
        except Exception as err:  # noqa: BLE001 - the tour reports every failure and goes on
            traceback.print_exc()
            key, base_key = getattr(module, "HEADLINE", ("", ""))
            toy = getattr(module, "TOY_RESULT", None)
            error = f"{type(err).__name__}: {err}"
            rows.append(summarize(slug, key, None, base_key, None, toy, time.time() - t0, error))
        print(f"[demo] {slug}: {time.time() - t0:.1f} s", flush=True)

    total = time.time() - t_all
    text = table(rows)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "demo.md").write_text(
        f"# icml26 tour\n\nCommand: `make demo`; total {total:.0f} s.\n\n{text}\n"
    )
    (RESULTS / "demo.json").write_text(json.dumps({"total_s": total, "rows": rows}, indent=2))
    print("\n" + text + f"\n\ntotal {total:.0f} s; written to {RESULTS / 'demo.md'}")
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
