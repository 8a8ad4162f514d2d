"""The CPU toy stage of Swordsman: adaptive vs fixed blocks, with and without the dynamic threshold.

Trains a tiny bidirectional masked-diffusion LM on the synthetic phrase grammar (``toy.py``), then decodes
the same held-out prompts greedily with six decoders sharing one hyper-parameter setting:

- ``fixed``: Fast-dLLM, fixed blocks of ``block_len`` and τ = ``tau_max``;
- ``fixed_dpu``: fixed blocks + dynamic threshold (B); ``adaptive``: entropy partition + fixed τ (C);
- ``swordsman``: entropy partition + dynamic threshold (D);
- ``fixed_dpu_stress`` / ``swordsman_stress``: B and D with τ_min = ``stress_tau_min`` (E).

The same arms are then run on the exact grammar posterior (``GrammarPosteriorLM``, what a perfectly trained
denoiser outputs) on the first ``n_oracle`` prompts, with keys prefixed ``oracle_``.
Per arm: validity, NFE, tokens per NFE, boundary alignment, wall time per sample. Arm ``erh`` holds the
mean entropy rise at gold phrase starts vs inside phrases on the all-masked first pass (the ERH premise).
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

import torch

from common.threads import torch_threads
from common.tracking import progress, pyplot, save_plot, write_results
from methods.swordsman.adapters import HFMaskedLMAdapter
from methods.swordsman.alignment import boundary_alignment
from methods.swordsman.config import SwordsmanConfig, SwordsmanRunConfig
from methods.swordsman.decoder import DecodeResult, swordsman_generate
from methods.swordsman.toy_world import (
    EOS,
    MASK,
    GrammarPosteriorLM,
    PhraseGrammar,
    tiny_mdm,
    train_mdm,
)

logger = logging.getLogger(__name__)


def _arms(cfg: SwordsmanRunConfig) -> dict[str, SwordsmanConfig]:
    t = cfg.toy
    fixed = dict(min_block_len=t.block_len, max_block_len=t.block_len)
    adaptive = dict(min_block_len=cfg.decoder.min_block_len, max_block_len=t.block_len)
    no_dpu = dict(tau_min=cfg.decoder.tau_max)
    stress = dict(tau_min=t.stress_tau_min)
    g = dict(gen_length=t.gen_length)
    return {
        "fixed": cfg.decoder_config(**g, **fixed, **no_dpu),
        "fixed_dpu": cfg.decoder_config(**g, **fixed),
        "adaptive": cfg.decoder_config(**g, **adaptive, **no_dpu),
        "swordsman": cfg.decoder_config(**g, **adaptive),
        "fixed_dpu_stress": cfg.decoder_config(**g, **fixed, **stress),
        "swordsman_stress": cfg.decoder_config(**g, **adaptive, **stress),
    }


def _score(grammar: PhraseGrammar, res: DecodeResult, c0: int) -> tuple[float, float, float]:
    """(valid, phrase accuracy, alignment) of one decode; alignment over boundaries before <eos>."""
    out = res.generated.tolist()
    valid, _ = grammar.parse(out, c0)
    phrase_acc = grammar.phrase_accuracy(out, c0)
    eos_at = out.index(EOS) if EOS in out else len(out)
    gold = [s for s in grammar.gold_starts(c0) if s <= eos_at] + [eos_at]
    cuts = [b - res.prompt_len for b in res.boundaries[:-1] if b - res.prompt_len < eos_at]
    return float(valid), phrase_acc, boundary_alignment(cuts, gold) if cuts else float("nan")


def _decode_arms(
    adapter: HFMaskedLMAdapter,
    arms: dict[str, SwordsmanConfig],
    grammar: PhraseGrammar,
    data: list,
    gen_length: int,
    prefix: str,
) -> dict[str, dict[str, float]]:
    """Decode every prompt of ``data`` with every arm; per-arm means of the toy metrics."""
    metrics: dict[str, dict[str, float]] = {}
    for arm, dcfg in progress(list(arms.items()), desc=f"swordsman toy {prefix}", unit="arm"):
        valid, phrase, align, nfe, wall = [], [], [], [], []
        for prompt, _, c0 in data:
            res = swordsman_generate(adapter, torch.tensor([prompt]), dcfg)
            v, pa, a = _score(grammar, res, c0)
            valid.append(v)
            if pa == pa:  # nan when the response is all <eos>
                phrase.append(pa)
            nfe.append(res.nfe)
            wall.append(res.wall_time)
            if a == a:  # skip nan (no interior boundary before <eos>)
                align.append(a)
        n = len(data)
        metrics[prefix + arm] = {
            "validity": sum(valid) / n,
            "phrase_acc": sum(phrase) / max(len(phrase), 1),
            "nfe": sum(nfe) / n,
            "tokens_per_nfe": gen_length * n / sum(nfe),
            "alignment": sum(align) / max(len(align), 1),
            "wall_ms_per_sample": 1000 * sum(wall) / n,
        }
    return metrics


def _erh(grammar: PhraseGrammar, model, prompts) -> dict[str, float]:
    """Mean entropy rise d_j = H_j - H_{j-1} at phrase starts vs inside phrases, all-masked pass: the
    paper's entropy-reduction premise (§1) measured on the toy."""
    from methods.swordsman.uncertainty import token_entropy

    start, inside = [], []
    for prompt, resp, c0 in prompts:
        x = torch.tensor([prompt + [MASK] * grammar.gen_length])
        with torch.no_grad():
            h = token_entropy(model(input_ids=x).logits)[0, len(prompt) :]  # [G]
        eos_at = resp.index(EOS) if EOS in resp else len(resp)
        starts = set(grammar.gold_starts(c0))
        for j in range(1, eos_at):
            (start if j in starts else inside).append(float(h[j] - h[j - 1]))
    mean = lambda v: sum(v) / max(len(v), 1)  # noqa: E731
    return {"dH_phrase_start": mean(start), "dH_inside_phrase": mean(inside)}


def _plot(metrics: dict[str, dict[str, float]], path: Path) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    for arm, row in metrics.items():
        if "tokens_per_nfe" in row:
            ax.scatter(row["tokens_per_nfe"], row["phrase_acc"], label=arm)
    ax.set_xlabel("tokens per model call (higher = faster)")
    ax.set_ylabel("phrase accuracy (fraction of well-formed phrases)")
    ax.set_title("Swordsman toy: phrase grammar, tiny masked-diffusion LM")
    ax.legend(fontsize=7)
    save_plot(fig, path)


def run_toy(run) -> dict[str, float]:
    """``stage=toy``: train the toy MDM, decode with the six arms, write results and the plot."""
    rcfg: SwordsmanRunConfig = run.method
    cfg = run.cfg
    t = rcfg.toy
    seed = int(run.seed)
    run_dir = Path(run.run_dir)
    start = time.perf_counter()
    with torch_threads(1):  # tiny matmuls: threads only add overhead (seeded by the registry)
        grammar = PhraseGrammar(
            typo_prob=t.typo_prob, max_phrases=t.max_phrases, gen_length=t.gen_length
        )
        model = tiny_mdm(grammar.vocab_size, t.hidden_size, t.num_layers, seed=seed)
        losses = train_mdm(
            model, grammar, t.train_steps, t.batch_size, t.lr, seed=seed, weighting=t.weighting
        )
        train_s = time.perf_counter() - start
        rng = random.Random(seed + 10_000)  # held-out prompts, same for every arm
        data = [grammar.sample(rng) for _ in range(t.n_eval)]
        arms = _arms(rcfg)
        adapter = HFMaskedLMAdapter(model, mask_id=MASK, eos_ids={EOS})
        metrics = _decode_arms(adapter, arms, grammar, data, t.gen_length, "")
        if t.n_oracle > 0:
            # The same decoders on the exact grammar posterior (a perfectly trained denoiser).
            oracle = HFMaskedLMAdapter(GrammarPosteriorLM(grammar), mask_id=MASK, eos_ids={EOS})
            metrics |= _decode_arms(
                oracle, arms, grammar, data[: t.n_oracle], t.gen_length, "oracle_"
            )
        metrics["erh"] = _erh(grammar, model, data)
    _plot(metrics, run_dir / "swordsman_toy.png")
    notes = (
        f"Toy: phrase grammar (G={t.gen_length}, <= {t.max_phrases} phrases, typo p={t.typo_prob}), "
        f"BertForMaskedLM hidden {t.hidden_size} x {t.num_layers} layers trained {t.train_steps} steps "
        f"(final loss {sum(losses[-20:]) / len(losses[-20:]):.3f}, {train_s:.0f} s); {t.n_eval} held-out "
        f"prompts, greedy. Fixed blocks = {t.block_len}; adaptive blocks in "
        f"[{rcfg.decoder.min_block_len}, {t.block_len}], δ={rcfg.decoder.min_jump}; "
        f"τ_max={rcfg.decoder.tau_max}, DPU τ_min={rcfg.decoder.tau_min} "
        f"(stress {t.stress_tau_min}), γ={rcfg.decoder.gamma}. alignment = fraction of block boundaries before "
        "the <eos> tail that fall on a phrase start; erh = mean entropy rise at phrase starts vs inside."
    )
    return write_results(
        run_dir,
        "swordsman",
        metrics,
        cfg=cfg,
        extra={"train_loss_last": losses[-1], "train_s": train_s},
        wall_time_s=time.perf_counter() - start,
        notes=notes,
    )
