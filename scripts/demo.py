"""The tour behind ``make demo``: every registered method's toy at its demo size, then one table.

For each ``methods/<slug>/run.py`` it composes ``experiment=<slug>_toy`` plus the module's
``DEMO_OVERRIDES``, runs it into ``$ICML26_DEMO_DIR/demo/<slug>/`` (default ``<tmp>/icml26/demo``, never the checkout) and reads the two ``HEADLINE`` keys (the
method's headline metric and its baseline's). A first row always exercises the shared pieces on their
own: a few GRPO steps of a tiny Qwen2 on the arithmetic task through ``common/rl.py``.

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


def _row(name, metric, value, base_metric, base_value, seconds, error=""):
    ratio = value / base_value if (value is not None and base_value) else None
    return {
        "method": name,
        "metric": metric,
        "value": value,
        "baseline_metric": base_metric,
        "baseline": base_value,
        "ratio": ratio,
        "wall_s": round(seconds, 1),
        "error": error,
    }


def _fmt(v) -> str:
    return "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


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
            _row(
                "common (GRPO, arithmetic)",
                "reward, last quarter",
                m["grpo/reward_last_quarter"],
                "first quarter",
                m["grpo/reward_first_quarter"],
                time.time() - t0,
            )
        )
    for slug in [s for s in slugs if not wanted or s in wanted]:
        t0 = time.time()
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
                _row(slug, key, metrics.get(key), base_key, metrics.get(base_key), time.time() - t0)
            )
        except Exception as err:  # noqa: BLE001 - the tour reports every failure and goes on
            traceback.print_exc()
            rows.append(
                _row(slug, "", None, "", None, time.time() - t0, f"{type(err).__name__}: {err}")
            )
        print(f"[demo] {slug}: {time.time() - t0:.1f} s", flush=True)

    header = "| method | metric | value | baseline metric | baseline | ratio | wall s |"
    lines = [header, "|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = [r["method"], r["metric"], r["value"], r["baseline_metric"], r["baseline"]]
        cells += [r["ratio"], r["wall_s"]]
        if r["error"]:
            cells[1] = f"FAILED: {r['error'][:80]}"
        lines.append("| " + " | ".join(_fmt(c) for c in cells) + " |")
    total = time.time() - t_all
    table = "\n".join(lines)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "demo.md").write_text(
        f"# icml26 tour\n\nCommand: `make demo`; total {total:.0f} s.\n\n{table}\n"
    )
    (RESULTS / "demo.json").write_text(json.dumps({"total_s": total, "rows": rows}, indent=2))
    print("\n" + table + f"\n\ntotal {total:.0f} s; written to {RESULTS / 'demo.md'}")
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
