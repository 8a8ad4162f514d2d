"""RL trainers against TRL's own ``GRPOTrainer``: step time and peak memory (issue 33 point 2).

MaxRL, Geo-RL, KMKC-CDKC, ThreadWeaver P-GRPO and APO train the same tiny random-init Qwen2
(``common.tiny``, seed 0) on the same prompts, batch (4 prompts × 4 generations), completion
length, reward and seed as ``trl.GRPOTrainer``. Per trainer: the median wall time of a training
step after warm-up steps (one ``on_step_begin`` → ``on_step_end`` of the HF ``Trainer``: generation,
reward, advantages, loss, backward, optimizer step), and the peak tensor memory of one training
step (``Trainer.training_step``: generation, scoring, advantages, loss and backward, called in the
main thread and measured with the torch profiler's memory timeline, see ``_harness.peak_memory``;
deterministic: the same bytes on every step and run). The peak resident-memory growth of a
two-step ``train()`` (``_harness.peak_rss``, the whole process incl. the allocator and Python) is
reported as information only: it moves by MiBs between identical runs. The rounds alternate GRPO
and the methods so that a drifting machine load hits all alike; each round starts one trainer
later (no trainer always runs first or after the same one) and collects the previous trainer's
garbage before timing.

Thresholds: ≤ 1.05× GRPO (APO ≤ 1.3×, including its teacher-forced reference Top-K pass).
"""

from __future__ import annotations

import copy
import gc
import os
import statistics
import tempfile
import time
from typing import Any

import torch

from scripts.bench._harness import peak_memory, peak_rss, row

THRESHOLD = {"apo": 1.3}
DEFAULT_THRESHOLD = 1.05
READING = (
    "Reading the rows: at this size a step is ~0.1 s on an idle core (~0.3 s at load ~13 on the "
    "2-core machine), so a few ms move a time ratio by 5-25%; compare the IQRs with GRPO's before "
    "reading a few-% miss as real. **Memory** is the peak tensor bytes of one `training_step` "
    "(profiler memory timeline, deterministic to the byte across steps and runs; generation is "
    "< 0.5 MiB of it). GRPO, MaxRL, Geo-RL and CDKC compute log-probs through TRL's fused chunked "
    "kernel (`trl/kernels/chunked_logprob.py`), whose fp32 scratch of (rows, 32,768) is 56 MiB at "
    "this batch whatever the vocabulary (576 here): it is most of GRPO's peak. APO (its own chunked "
    "log-softmax, issue 33 point 3) and P-GRPO (its packed trie forward) do not use that kernel, so "
    "their ratio far below 1 reflects TRL's scratch at a tiny model, not a saving that carries to "
    "scale. CDKC's +1 MiB is the backward of its entropy term (∂H/∂θ through the LM head); "
    "signal='nll' (Eq. 24) avoids it. The RSS rows (whole process, median of 5) are information: "
    "their 1-3 MiB differences at ~19 MiB were the old misses, and the tensor peaks show they are "
    "allocator and Python noise for MaxRL and Geo-RL (byte-identical to GRPO). Where time goes "
    "(profiled 2026-12-03 on the loaded machine; hook times below when a row misses): **Geo-RL**'s "
    "own work per step is its reward-side embedding and the L-ensemble / LOO gains in "
    "`compute_advantages`, 1-6 ms per step (<= 2% of a step) with this bench's embedder; with the "
    "real `MiniLMEmbedder` the embedding is a second model's forward over every completion, a cost "
    "of the method that this bench does not measure. **CDKC**'s calibration term reuses the loss's "
    "forward (`_token_signal` ~0 ms). Time misses of a few % at this load lie inside GRPO's IQR: "
    "the profiles show GRPO's ops and no extra forward. The GPU smoke (a larger model) is the "
    "better test of the 1.05× bar."
)


def _reward(completions, **kwargs):
    """0/1 with spread inside each group (MaxRL needs binary rewards, CDKC reads > 0.5 as correct)."""
    return [float(len(str(c)) % 2 == 0) for c in completions]


def _quality(completions, **kwargs):
    """The same signal mapped into (0, 1], as Geo-RL's grounding quality must be."""
    return [0.25 + 0.75 * r for r in _reward(completions)]


class _Embedder:
    """Hashed bag-of-characters embedder for Geo-RL (cheap, deterministic).

    Counts in Python lists and builds one tensor: the earlier per-character ``out[i, j] += 1``
    launched one tensor op per character (~1,500 per step, the ``aten::select`` rows of the old
    Geo-RL profile), a cost of the bench's stand-in, not of Geo-RL. Same values."""

    def encode(self, texts):
        rows = []
        for t in texts:
            row = [0.0] * 16
            for ch in str(t):
                row[ord(ch) % 15] += 1.0
            row[-1] += 0.1
            rows.append(row)
        return torch.tensor(rows, dtype=torch.float32)


def _trainers() -> dict[str, tuple[Any, Any, dict, dict]]:
    """name -> (trainer class, config class, extra config kwargs, extra trainer kwargs)."""
    from trl import GRPOConfig, GRPOTrainer

    from methods.apo import APOConfig, APOTrainer
    from methods.georl import GeoRLGRPOConfig, GeoRLTrainer
    from methods.kmkc import CDKCConfig, CDKCTrainer
    from methods.maxrl import MaxRLConfig, MaxRLTrainer
    from methods.threadweaver.pgrpo_trainer import PGRPOConfig, PGRPOTrainer

    return {
        "grpo": (GRPOTrainer, GRPOConfig, {}, {}),
        "maxrl": (MaxRLTrainer, MaxRLConfig, {}, {}),
        "georl": (
            GeoRLTrainer,
            GeoRLGRPOConfig,
            {},
            {"embedder": _Embedder(), "reward_funcs": [_quality]},
        ),
        "kmkc_cdkc": (CDKCTrainer, CDKCConfig, {}, {}),
        "threadweaver_pgrpo": (
            PGRPOTrainer,
            PGRPOConfig,
            {"parallel_rollouts": False, "scale_rewards": "none"},
            {},
        ),
        "apo": (APOTrainer, APOConfig, {}, {}),
    }


class _StepTimer:
    def __init__(self):
        self.times: list[float] = []
        self._t = 0.0

    def on_step_begin(self, args, state, control, **kw):
        self._t = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.times.append(time.perf_counter() - self._t)


def _build(name, spec, model, tok, data, steps: int, completion: int, out: str):
    from transformers import TrainerCallback

    from common.rl import cpu_grpo_kwargs

    cls, cfg_cls, cfg_extra, tr_extra = spec
    kw = cpu_grpo_kwargs(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=completion,
        logging_steps=10_000,
    )
    # Every completion has the full length: with a random model EOS comes at random, and the
    # trainers' different RNG use would otherwise change the generated lengths (and step times).
    kw["generation_kwargs"] = {"min_new_tokens": completion}
    kw.update(cfg_extra)
    if "parallel_rollouts" in kw:
        kw["rollout_budget_tokens"] = completion  # the orchestrator's length bound
    kw.setdefault("loss_type", "dapo")
    kw.setdefault("logging_strategy", "no")
    torch.manual_seed(0)
    tr_extra = {"reward_funcs": [_reward], **tr_extra}
    trainer = cls(
        model=copy.deepcopy(model),
        args=cfg_cls(**kw),
        train_dataset=data,
        processing_class=tok,
        **tr_extra,
    )
    timer = _StepTimer()
    cb = type("_CB", (TrainerCallback,), {})()
    cb.on_step_begin, cb.on_step_end = timer.on_step_begin, timer.on_step_end
    trainer.add_callback(cb)
    return trainer, timer


def _quart(xs: list[float]) -> list[float]:
    return statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3


def _step_peaks(trainer) -> list[int]:
    """Run ``trainer.train()`` with every ``training_step`` under the profiler's memory timeline;
    the peak tensor bytes of each step (growth over the step's start)."""
    orig, peaks = trainer.training_step, []

    def measured(*a, **k):
        out = []
        peaks.append(peak_memory(lambda: out.append(orig(*a, **k))))
        return out[0]

    trainer.training_step = measured
    trainer.train()
    return peaks


HOOKS = ("_calculate_rewards", "compute_advantages", "compute_loss", "_token_signal")


def _timed(obj, attr: str, sink: list[float]) -> None:
    fn = getattr(obj, attr)

    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            sink.append(time.perf_counter() - t)

    setattr(obj, attr, wrapper)


def _profile(name, spec, model, tok, data, completion: int, out: str, top: int = 6) -> str:
    """Top self-CPU ops of a 3-step ``train()`` (torch.profiler) and the median time per step in
    the trainer's hooks (reward incl. Geo-RL's embedder, advantages, loss), as one line."""
    import torch.profiler as tp

    tr, _ = _build(name, spec, model, tok, data, 3, completion, out)
    hooks: dict[str, list[float]] = {}
    for attr in HOOKS:
        if attr in type(tr).__dict__ or attr in ("_calculate_rewards", "compute_loss"):
            _timed(tr, attr, hooks.setdefault(attr, []))
    if hasattr(tr, "embedder"):
        _timed(tr.embedder, "encode", hooks.setdefault("embedder.encode", []))
    with tp.profile(activities=[tp.ProfilerActivity.CPU]) as prof:
        tr.train()
    ev = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:top]
    total = sum(e.self_cpu_time_total for e in prof.key_averages()) / 1e3
    ops = ", ".join(f"`{e.key}` {e.self_cpu_time_total / 1e3:.0f} ms" for e in ev)
    per = ", ".join(f"`{k}` {statistics.median(v) * 1e3:.1f} ms" for k, v in hooks.items() if v)
    return f"{name}: total self CPU {total:.0f} ms; top {ops}; hooks (median per call) {per}"


CDKC_VARIANTS = {
    # every λ = 0: the trainer returns TRL's loss unchanged (no calibration term)
    "λ=0": {"region_weights": {r: [0.0, 0.0] for r in ("mastered", "confused", "missing")}},
    # H = NLL of the sampled token (Eq. 24): its gradient reuses the log-probs' graph
    "signal=nll": {"signal": "nll"},
}


def _cdkc_memory(specs, model, tok, data, completion: int, rounds: int, out: str) -> str:
    """Peak RSS growth of CDKC variants that switch off or swap its calibration term."""
    cls, cfg_cls, extra, tr_extra = specs["kmkc_cdkc"]
    parts = []
    for label, kw in CDKC_VARIANTS.items():
        spec = (cls, cfg_cls, {**extra, **kw}, tr_extra)
        vals = [
            peak_rss(_build("kmkc_cdkc", spec, model, tok, data, 2, completion, out)[0].train)
            for _ in range(rounds)
        ]
        parts.append(f"{label} {statistics.median(vals) / 2**20:.1f} MiB")
    return "; ".join(parts)


def run(quick: bool = False) -> dict:
    from datasets import Dataset

    from common.tiny import tiny_causal_lm

    steps, warm, rounds, completion = (3, 1, 1, 4) if quick else (7, 2, 6, 24)
    rss_rounds = 1 if quick else 5
    from methods.threadweaver.special_tokens import add_threadweaver_tokens

    model, tok = tiny_causal_lm("qwen2", seed=0)
    add_threadweaver_tokens(model, tok)  # P-GRPO's tags; the same model and tokenizer for all
    regions = ["mastered", "confused", "missing", "missing"]
    data = Dataset.from_dict(
        {"prompt": [f"{i}+{i % 7}=" for i in range(64)], "region": regions * 16}
    )
    specs = _trainers()
    times: dict[str, list[float]] = {n: [] for n in specs}
    peaks: dict[str, list[int]] = {n: [] for n in specs}
    step_peak: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # process warm-up (first-call costs of torch/TRL), so GRPO, run first, is not penalised
        _build("grpo", specs["grpo"], model, tok, data, 2, completion, tmp)[0].train()
        names = list(specs)
        for r in range(rounds):  # each round starts one trainer later: no trainer owns a slot
            for name in names[r % len(names) :] + names[: r % len(names)]:
                tr, timer = _build(name, specs[name], model, tok, data, steps, completion, tmp)
                gc.collect()  # the previous trainer's garbage is not collected inside this one's steps
                tr.train()
                times[name] += timer.times[warm:]
        for name, spec in specs.items():  # deterministic: one 2-step run per trainer
            step_peak[name] = _step_peaks(
                _build(name, spec, model, tok, data, 2, completion, tmp)[0]
            )
        for _ in range(rss_rounds):  # medians over rounds: one 2-step RSS reading moves by MiBs
            for name, spec in specs.items():
                tr, _ = _build(name, spec, model, tok, data, 2, completion, tmp)
                peaks[name].append(peak_rss(tr.train))
    peak = {n: statistics.median(v) for n, v in peaks.items()}
    g_med = statistics.median(times["grpo"])
    rows = []
    for name in specs:
        if name == "grpo":
            continue
        thr = THRESHOLD.get(name, DEFAULT_THRESHOLD)
        med = statistics.median(times[name])
        q = _quart(times[name])
        rows.append(
            row(
                f"{name}: s/step",
                med,
                g_med,
                spread=f"IQR {q[0]:.3f}–{q[2]:.3f} s (n={len(times[name])})",
                max_ratio=thr,
            )
        )
        sp, gp = max(step_peak[name]), max(step_peak["grpo"])
        rows.append(
            row(
                f"{name}: peak tensor MiB per step",
                sp / 2**20,
                gp / 2**20,
                spread=f"{min(step_peak[name]) / 2**20:.2f}–{sp / 2**20:.2f} MiB "
                f"(n={len(step_peak[name])} steps)",
                max_ratio=thr,
            )
        )
        rows.append(
            row(
                f"{name}: peak RSS growth MiB (info)",
                peak[name] / 2**20,
                peak["grpo"] / 2**20,
                spread=f"{min(peaks[name]) / 2**20:.1f}–{max(peaks[name]) / 2**20:.1f} MiB "
                f"(n={len(peaks[name])})",
            )
        )
    missed = sorted({r["metric"].split(":")[0] for r in rows if r["met"] is False})
    profiles = []
    if missed:
        with tempfile.TemporaryDirectory() as tmp:
            for name in ["grpo", *missed]:
                profiles.append(_profile(name, specs[name], model, tok, data, completion, tmp))
            if any(
                r["met"] is False and r["metric"] == "kmkc_cdkc: peak tensor MiB per step"
                for r in rows
            ):
                profiles.append(
                    f"kmkc_cdkc peak RSS growth (median of {rss_rounds}): default (signal=entropy) "
                    f"{peak['kmkc_cdkc'] / 2**20:.1f} MiB; "
                    + _cdkc_memory(specs, model, tok, data, completion, rss_rounds, tmp)
                    + f"; GRPO {peak['grpo'] / 2**20:.1f} MiB"
                )
    gq = _quart(times["grpo"])
    notes = (
        f"Baseline `trl.GRPOTrainer`: {g_med:.3f} s/step (IQR {gq[0]:.3f}–{gq[2]:.3f} s, "
        f"n={len(times['grpo'])}), peak tensor memory {max(step_peak['grpo']) / 2**20:.2f} MiB per step, RSS growth {peak['grpo'] / 2**20:.1f} MiB (median of {rss_rounds}). Setup: tiny Qwen2 "
        f"(common.tiny, seed 0), 16 completions (4 prompts × 4) × {completion} tokens, "
        f"min_new_tokens = max_completion_length (equal lengths), loss_type='dapo' (P-GRPO: scale_rewards='none', the only one it implements), {steps} steps per run of which {warm} warm-up, "
        f"{rounds} round(s) alternating the trainers (rotated start, gc before each). P-GRPO runs with parallel_rollouts=False "
        "(its sequential path through the orchestrator and HFGenerateEngine, not TRL's generate).\n\n"
        + "Load average (1/5/15 min) at the end of this run: "
        + "/".join(f"{x:.1f}" for x in os.getloadavg())
        + ".\n\n"
        + READING
    )
    if profiles:
        notes += (
            "\n\nProfiles of the trainers that missed a threshold (torch.profiler, 3 steps; hook times by wrapping the trainer methods):\n\n"
            + "\n".join(f"- {p}" for p in profiles)
        )
    return {
        "title": "RL trainers vs trl.GRPOTrainer",
        "command": "python -m scripts.bench rl_trainers",
        "rows": rows,
        "notes": notes,
    }
