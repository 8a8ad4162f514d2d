"""The tour behind ``make demo``: every registered method's toy at its demo size, then one table.

For each ``methods/<slug>/run.py`` it composes ``experiment=<slug>_toy`` plus the module's
``DEMO_OVERRIDES``, runs it into ``outputs/demo/<slug>/`` of the checkout (``$ICML26_DEMO_DIR``
overrides the folder) and reads the two ``HEADLINE`` keys (the method's headline metric and its
baseline's). A first row exercises the shared pieces on their own: a few GRPO steps of a tiny Qwen2
on the arithmetic task through ``common/rl.py``.

What a user sees on the console is ``[demo]`` lines (one when a method starts, one with its time and
reading when it ends) and the final table; everything the libraries print (TRL's metric dicts,
progress bars, warnings, tracebacks) goes to ``outputs/demo/<slug>/demo.log``. Every run starts
fresh: the previous ``outputs/demo`` is moved to ``outputs/demo.previous``. Each method runs on one
torch thread (``common.threads.torch_threads``), so the tour does not spin when the machine is busy.

Each row puts the demo-size pair next to the documented full-toy pair (``TOY_RESULT`` of the
method's ``run.py``, see ``common.demo``). ``direction`` compares method and baseline in the metric's
good direction; equal numbers say that the demo cannot separate the arms. For a toy whose doc shows
the effect, a demo that does not show it says how to see it (the full toy's command and time); for a
negative or inconclusive toy the row gives the doc's verdict and reason.

    python -m scripts.demo                 # all methods
    python -m scripts.demo maxrl georl     # a subset
"""

from __future__ import annotations

import os

# One intra-op thread everywhere, set before torch loads: on a busy 2-core machine OpenMP's extra
# threads spin (ENVIRONMENT.md: a demo step was 28x slower with two threads beside another job).
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("ICML26_PROGRESS", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import contextlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TextIO  # noqa: E402

from common.demo import ToyResult, direction  # noqa: E402
from common.registry import REPO_ROOT, compose, discover_methods, get_method, run_method  # noqa: E402

logger = logging.getLogger("icml26.demo")
RESULTS = Path(os.environ.get("ICML26_DEMO_DIR") or REPO_ROOT / "outputs" / "demo")
BWRAP_SKIP = "skipped: needs bubblewrap (apt-get install bubblewrap)"


def fresh_dir(root: Path) -> Path | None:
    """Makes ``root`` an empty folder; a previous non-empty one moves to ``<root>.previous``.

    Returns where the previous run went (None when there was none). An older ``.previous`` is
    removed, so at most two runs are kept.
    """
    moved = None
    if root.exists() and any(root.iterdir()):
        moved = root.with_name(root.name + ".previous")
        if moved.exists():
            shutil.rmtree(moved)
        root.rename(moved)
    root.mkdir(parents=True, exist_ok=True)
    return moved


@contextlib.contextmanager
def captured(log_path: Path) -> Iterator[None]:
    """Sends everything written to file descriptors 1 and 2 (Python, C, subprocesses) to ``log_path``.

    TRL prints its metric dicts, tqdm draws bars on stderr and libraries log through handlers that
    hold ``sys.stderr``: redirecting the descriptors themselves (and ``sys.stdout`` / ``sys.stderr``,
    for a caller that replaced them, and the root logger's stream handlers) catches all of them.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    with (
        open(log_path, "a", buffering=1) as fh,
        contextlib.redirect_stdout(fh),
        contextlib.redirect_stderr(fh),
    ):
        os.dup2(fh.fileno(), 1)
        os.dup2(fh.fileno(), 2)
        streams = [
            (h, h.setStream(fh))
            for h in logging.getLogger().handlers
            if type(h) is logging.StreamHandler
        ]
        try:
            yield
        finally:
            for h, stream in streams:
                h.setStream(stream)
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


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
    shutil.rmtree(run_dir / "trainer", ignore_errors=True)
    q = max(1, len(history) // 4)
    return {
        "grpo/reward_last_quarter": sum(history[-q:]) / q,
        "grpo/reward_first_quarter": sum(history[:q]) / q,
        "grpo/steps": float(len(history)),
    }


_DIRECTION_TEXT = {
    "better": "method better",
    "worse": "method worse",
    "tie": "cannot separate (equal)",
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
    skipped: str = "",
) -> dict:
    """One row of the tour: the demo-size pair, its direction, and what the row tells the reader.

    ``direction`` is ``"better"`` / ``"worse"`` / ``"tie"`` of the method against its baseline in the
    metric's good direction (``common.demo.direction``); a tie means the demo's numbers cannot
    separate the arms. ``status``:

    - ``effect shown``: the doc reports an effect and the demo shows it too;
    - ``effect needs the full toy (N min): `<command>` ``: the doc reports an effect that the demo
      size does not show (worse, or a tie);
    - ``<verdict> toy (doc): <note>`` for a negative or inconclusive toy, whatever the demo shows;
    - ``skipped: ...``, ``error`` or ``missing metric``.

    ``toy=None`` (the shared-pieces row) expects the method to be better, in ``higher_is_better``.
    """
    hib = toy.higher_is_better if toy is not None else higher_is_better
    row = {
        "method": name,
        "metric": metric,
        "baseline_metric": base_metric,
        "higher_is_better": hib,
        "value": value,
        "baseline": base_value,
        "toy_value": toy.method if toy else None,
        "toy_baseline": toy.baseline if toy else None,
        "toy_verdict": toy.verdict if toy else None,
        "toy_minutes": toy.minutes if toy else None,
        "command": toy.command if toy else f"python -m scripts.demo {name.split()[0]}",
        "direction": None,
        "effect_shown": None,
        "status": "",
        "wall_s": round(seconds, 1),
        "error": error,
    }
    if skipped:
        row["status"] = skipped
        return row
    if error:
        row["status"] = "error"
        return row
    if value is None or base_value is None:
        row["status"] = "missing metric"
        return row
    row["direction"] = direction(value, base_value, hib)
    if toy is None or toy.verdict == "effect":
        row["effect_shown"] = row["direction"] == "better"
        if row["effect_shown"]:
            row["status"] = "effect shown"
        elif toy is None:
            row["status"] = "effect not shown"
        else:
            took = f" ({toy.minutes:g} min)" if toy.minutes else ""
            row["status"] = f"effect needs the full toy{took}: `{toy.command}`"
    else:
        row["status"] = f"{toy.verdict} toy (doc): {toy.note}"
    return row


def _fmt(v) -> str:
    return "" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def table(rows: list[dict]) -> str:
    """The summary table in Markdown, one line per row of ``summarize``."""
    lines = [
        "| method | metric (baseline) | demo: method vs baseline | direction "
        "| full toy: method vs baseline | what it says | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        arrow = "↑" if r["higher_is_better"] else "↓"
        metric = f"{r['metric']} {arrow} ({r['baseline_metric']})" if r["metric"] else ""
        demo = "—" if r["value"] is None else f"{_fmt(r['value'])} vs {_fmt(r['baseline'])}"
        toy = (
            "—"
            if r["toy_value"] is None
            else f"{_fmt(r['toy_value'])} vs {_fmt(r['toy_baseline'])} ({r['toy_verdict']})"
        )
        where = "—" if r["direction"] is None else _DIRECTION_TEXT[r["direction"]]
        status = f"FAILED: {r['error'][:120]}" if r["error"] else r["status"]
        cells = [r["method"], metric, demo, where, toy, status, r["wall_s"]]
        lines.append("| " + " | ".join(_fmt(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def _say(console: TextIO, text: str) -> None:
    console.write(text + "\n")
    console.flush()


def _is_sandbox_missing(err: BaseException) -> bool:
    from common.sandbox import SandboxUnavailableError

    return isinstance(err, SandboxUnavailableError)


def run_one(slug: str, run_dir: Path) -> dict:
    """Runs one method's demo into ``run_dir`` (output captured in ``run_dir/demo.log``); one row."""
    from common.threads import torch_threads

    t0 = time.time()
    module = None
    with captured(run_dir / "demo.log"):
        try:
            module = get_method(slug)
            cfg = compose(
                [f"experiment={slug}_toy", *getattr(module, "DEMO_OVERRIDES", [])], run_dir
            )
            with torch_threads(1):
                metrics = run_method(cfg)
            key, base_key = module.HEADLINE
            return summarize(
                slug, key, metrics.get(key), base_key, metrics.get(base_key),
                module.TOY_RESULT, time.time() - t0,
            )  # fmt: skip
        except Exception as err:  # noqa: BLE001 - the tour reports every failure and goes on
            traceback.print_exc()  # into demo.log
            key, base_key = getattr(module, "HEADLINE", ("", ""))
            toy = getattr(module, "TOY_RESULT", None)
            if _is_sandbox_missing(err):
                return summarize(slug, key, None, base_key, None, toy, time.time() - t0,
                                 skipped=BWRAP_SKIP)  # fmt: skip
            error = f"{type(err).__name__}: {err}".splitlines()[0]
            return summarize(slug, key, None, base_key, None, toy, time.time() - t0, error)


def run_common(run_dir: Path) -> dict:
    """The shared-pieces row (GRPO on arithmetic), captured like a method."""
    from common.threads import torch_threads

    t0 = time.time()
    name = "common (GRPO, arithmetic)"
    with captured(run_dir / "demo.log"):
        try:
            with torch_threads(1):
                m = foundation_demo(run_dir)
            return summarize(
                name, "reward, last quarter", m["grpo/reward_last_quarter"],
                "first quarter", m["grpo/reward_first_quarter"], None, time.time() - t0,
            )  # fmt: skip
        except Exception as err:  # noqa: BLE001
            traceback.print_exc()
            error = f"{type(err).__name__}: {err}".splitlines()[0]
            return summarize(name, "reward, last quarter", None, "first quarter", None, None,
                             time.time() - t0, error)  # fmt: skip


def _reading(row: dict) -> str:
    if row["error"]:
        return f"FAILED ({row['error'][:100]}; see its demo.log)"
    if row["direction"] is None:
        return row["status"]
    pair = f"{_fmt(row['value'])} vs {_fmt(row['baseline'])}"
    return f"{pair}, {_DIRECTION_TEXT[row['direction']]}; {row['status'].split(':')[0]}"


def main(argv: list[str] | None = None) -> int:
    wanted = list(argv if argv is not None else sys.argv[1:])
    slugs = discover_methods()
    unknown = [s for s in wanted if s not in slugs and s != "common"]
    if unknown:
        print(f"unknown methods {unknown}; registered: {', '.join(slugs)}", file=sys.stderr)
        return 2
    console = os.fdopen(os.dup(1), "w")
    # libraries log into each method's demo.log (the handler writes to fd 2, captured per method)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, force=True)
    moved = fresh_dir(RESULTS)
    if moved is not None:
        _say(console, f"[demo] the previous run moved to {moved}")
    todo = (["common"] if not wanted or "common" in wanted else []) + [
        s for s in slugs if not wanted or s in wanted
    ]
    rows = []
    load0 = os.getloadavg()[0]
    t_all = time.time()
    for i, slug in enumerate(todo, 1):
        run_dir = RESULTS / slug
        _say(console, f"[demo] {slug} ({i}/{len(todo)}) … log: {run_dir / 'demo.log'}")
        row = run_common(run_dir) if slug == "common" else run_one(slug, run_dir)
        rows.append(row)
        _say(console, f"[demo] {slug}: {row['wall_s']:.1f} s: {_reading(row)}")
    total = time.time() - t_all
    load = (
        f"1-min load {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end, {os.cpu_count()} cores"
    )
    text = table(rows)
    (RESULTS / "demo.md").write_text(
        f"# icml26 tour\n\nCommand: `make demo`; total {total:.0f} s ({load}).\n\n{text}\n"
    )
    (RESULTS / "demo.json").write_text(
        json.dumps({"total_s": total, "load": load, "rows": rows}, indent=2)
    )
    _say(console, "\n" + text + f"\n\ntotal {total:.0f} s; written to {RESULTS / 'demo.md'}")
    console.close()
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
