"""CPU toy: "parallel codebook spelling" learned in sequential and in parallel form.

See docs/methods/threadweaver.md (Results) for the design and the numbers.

A seeded codebook spells each start symbol ``s`` as a chain of ``T`` distinct code tokens. A prompt
``Q: s_1 … s_K`` asks for ``A: c(s_1,T) … c(s_K,T)`` (the last code of each chain). The sequential
trace spells the K chains one after the other; the parallel trace (canonical serializer) puts them in
one ``<Parallel>`` block with one outline and one thread per chain. Arms, trained from the same
initialisation on the same problems with the same hyper-parameters:

* ``seq``  - sequential traces, plain causal LM loss (the sequential baseline);
* ``tw``   - parallel traces, trie packing + parent-gather loss (ThreadWeaver, §3.3);
* ``flat`` - parallel traces, plain causal loss on the joined text (no trie; co-design ablation).

All arms are evaluated through :class:`ParallelOrchestrator` on HF ``generate`` (greedy), which
reports accuracy and token latency (critical path, §3.3); ``tw_ar`` runs the TW model without the
orchestrator (hybrid AR mode, §3.2).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import defaultdict

import torch

from common.config import Run
from common.threads import torch_threads
from common.tiny import tiny_causal_lm
from common.tracking import write_results
from common.train_loop import train_steps

from .config import ThreadWeaverConfig
from .engines import HFGenerateEngine
from .format import ParallelBlock, Trajectory, parse, serialize, validate
from .metrics import parallel_stats, speedup_report
from .orchestrator import OrchestratorConfig, ParallelOrchestrator, tag_ids
from .trie import TrieCollator, build_packed, extract_units, packed_forward, parent_gather_loss

logger = logging.getLogger(__name__)

__all__ = ["make_codebook", "run_toy", "toy_prompt", "toy_tokenizer", "toy_trajectory"]

_SPECIAL = ["<pad>", "<bos>", "<eos>", "<unk>"]


def _words(n_symbols: int, chain_len: int) -> list[str]:
    return (
        ["Q", "A", ";"]
        + [str(i) for i in range(1, n_symbols + 1)]
        + [f"s{i}" for i in range(n_symbols)]
        + [f"c{i}" for i in range(n_symbols * chain_len)]
    )


def toy_tokenizer(n_symbols: int = 16, chain_len: int = 16, num_colon: bool = False):
    """Word-level tokenizer: every tag, word, ``:`` and ``\\n`` is one token; decoding is exact.

    Words carry their leading space (``" s3"``), so ``decode(encode(x)) == x`` on canonical text and
    the orchestrator's headers tokenize exactly as the serialized training text.

    Args:
        n_symbols, chain_len: toy sizes (vocabulary).
        num_colon: make ``"N:"`` (an outline/thread number with its colon) a single token. A thread
            request ends in ``"\\n<Thread>\\nN:"`` and must retrieve the text after
            ``"<Outline>N:"``; with ``"N"`` and ``":"`` as two tokens this is a two-token-key lookup
            that the 2-layer toy model did not learn, with one token it is a plain induction copy.
    """
    from common.tiny import word_tokenizer

    from .format import TAGS

    words = _words(n_symbols, chain_len)
    vocab_list = _SPECIAL + list(TAGS) + ["\n", ":", " "] + words + [" " + w for w in words]
    pattern = r"\n|:| ?[^\s:<]+| "
    if num_colon:
        vocab_list += [f"{i}:" for i in range(1, n_symbols + 1)]
        pattern = r"[0-9]+:|" + pattern
    tok = word_tokenizer(
        {w: i for i, w in enumerate(vocab_list)},
        "<unk>",
        split_regex=pattern,
        whitespace_split=False,
        fuse_decoder=True,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
        extra_special_tokens=list(TAGS),
    )
    return tok


def make_codebook(n_symbols: int, chain_len: int, seed: int) -> list[list[str]]:
    """A random assignment of ``n_symbols × chain_len`` distinct code tokens (seeded)."""
    codes = [f"c{i}" for i in range(n_symbols * chain_len)]
    random.Random(seed).shuffle(codes)
    return [codes[a * chain_len : (a + 1) * chain_len] for a in range(n_symbols)]


def toy_trajectory(
    symbols: list[int], codebook: list[list[str]], form: str, numbered: bool = False
) -> Trajectory:
    """The sequential (``form="seq"``) or parallel (``"par"``) trace for a problem.

    With ``numbered=True`` every chain in the sequential trace starts with its index (``"2: s5 …"``,
    one chain per line), matching the numbered prompt of :func:`toy_prompt`.
    """
    chains = [f"s{s} " + " ".join(codebook[s]) for s in symbols]
    final = "A: " + " ".join(codebook[s][-1] for s in symbols)
    if form == "seq":
        if numbered:
            return Trajectory(["\n".join(f"{i + 1}: {c} ;" for i, c in enumerate(chains))], final)
        return Trajectory([" ; ".join(chains) + " ;"], final)
    if form == "par":
        nums = [str(i + 1) for i in range(len(symbols))]
        block = ParallelBlock(
            outlines=[(n, f"s{s}") for n, s in zip(nums, symbols)],
            threads=list(zip(nums, chains)),
        )
        return Trajectory([block], final)
    raise ValueError(f"form must be 'seq' or 'par', got {form!r}")


def toy_prompt(symbols: list[int], numbered: bool = False) -> str:
    """``"Q: s1 s5 …\\n"`` or, numbered, ``"Q:\\n1: s1\\n2: s5\\n…"`` (one symbol per line)."""
    if numbered:
        return "Q:" + "".join(f"\n{i + 1}: s{s}" for i, s in enumerate(symbols)) + "\n"
    return "Q: " + " ".join(f"s{s}" for s in symbols) + "\n"


def _problems(n: int, cfg: ThreadWeaverConfig, rng: random.Random) -> list[list[int]]:
    return [rng.sample(range(cfg.n_symbols), rng.choice(cfg.k_values)) for _ in range(n)]


def _prompt_ids(tok, symbols: list[int], numbered: bool = False) -> list[int]:
    return [tok.bos_token_id] + tok(toy_prompt(symbols, numbered), add_special_tokens=False)[
        "input_ids"
    ]


def _toy_model(cfg: ThreadWeaverConfig, vocab_size: int, seed: int):
    """The toy's Qwen3 (train mode, SDPA attention); the global RNG continues from the seeded init."""
    model, _ = tiny_causal_lm(
        "qwen3",
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=1024,
        seed=seed,
        vocab_size=vocab_size,
        fork_rng=False,
        record=False,
        train=True,
        attn_implementation="sdpa",
    )
    return model


def _train(model, packs, cfg: ThreadWeaverConfig, pad_id: int, seed: int, desc: str) -> list[float]:
    """AdamW + warm-up/cosine on packed tries with the parent-gather loss (one loop for all arms)."""
    coll = TrieCollator(pad_id)
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.sft_lr, betas=(0.9, 0.95), weight_decay=cfg.sft_weight_decay
    )
    steps = cfg.sft_steps or math.ceil(cfg.sft_epochs * len(packs) / cfg.sft_batch_size)
    warm = max(1, int(cfg.sft_warmup_ratio * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            (s + 1) / warm
            if s < warm
            else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm)))
        ),
    )
    rng = random.Random(seed)

    def loss_fn(_step: int) -> torch.Tensor:
        batch = coll(rng.sample(packs, min(cfg.sft_batch_size, len(packs))))
        logits = packed_forward(model, batch)
        return parent_gather_loss(logits, batch["input_ids"], batch["parent"], batch["loss_mask"])

    losses = train_steps(
        model,
        loss_fn,
        steps,
        optimizer=opt,
        scheduler=sched,
        grad_clip=1.0,
        desc=f"threadweaver sft {desc}",
    )
    model.eval()
    return losses


def _answer(text: str) -> list[str] | None:
    tail = text.rsplit("</think>\n", 1)
    if len(tail) != 2 or not tail[1].startswith("A:"):
        return None
    return tail[1][2:].replace("<eos>", "").split()


def _evaluate(model, tok, problems, codebook, cfg: ThreadWeaverConfig, parallel: bool) -> dict:
    ocfg = OrchestratorConfig(
        budget_total=cfg.budget_total,
        max_model_len=cfg.max_model_len,
        max_iters=cfg.max_iters,
        join_suffix=cfg.join_suffix,
        temperature=0.0,
        top_p=1.0,
        parallel=parallel,
    )
    engine = HFGenerateEngine(model, tok.pad_token_id, batch_size=cfg.eval_batch_size)
    orch = ParallelOrchestrator(engine, tok, ocfg)
    rollouts = orch.run_many([_prompt_ids(tok, p, cfg.toy_numbered) for p in problems])
    rows, samples = [], []
    for p, r in zip(problems, rollouts):
        text = tok.decode(r.response_ids, skip_special_tokens=False)
        gold = [codebook[s][-1] for s in p]
        ok = _answer(text) == gold
        if len(samples) < 3:
            samples.append({"gold": " ".join(gold), "response": text})
        rows.append(
            {
                "k": len(p),
                "correct": ok,
                "format_ok": validate(text.replace("<eos>", ""), strict=True).ok,
                "total": r.stats.total,
                "longest": r.stats.longest,
                "eta": r.stats.eta,
                "parallel": r.stats.has_parallel,
                "malformed": sum(r.malformed.values()),
            }
        )
    return {"rows": rows, "samples": samples}


def _summary(rows: list[dict], seq_rows: list[dict] | None) -> dict[str, float]:
    n = len(rows)
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    out = {
        "accuracy": mean([r["correct"] for r in rows]),
        "format_ok": mean([r["format_ok"] for r in rows]),
        "activation_ratio": mean([r["parallel"] for r in rows]),
        "token_latency": mean([r["longest"] for r in rows]),
        "total_tokens": mean([r["total"] for r in rows]),
        "eta": mean([r["eta"] for r in rows]),
        "malformed": float(sum(r["malformed"] for r in rows)),
        "n": float(n),
    }
    if seq_rows is not None:
        rep = speedup_report(
            [[r["longest"]] for r in seq_rows],
            [[r["longest"]] for r in rows],
            [[r["correct"]] for r in seq_rows],
            [[r["correct"]] for r in rows],
        )
        out.update(rep)
        for k in sorted({r["k"] for r in rows}):
            idx = [i for i, r in enumerate(rows) if r["k"] == k]
            both = [i for i in idx if rows[i]["correct"] and seq_rows[i]["correct"]]
            out[f"speedup_correct_k{k}"] = (
                mean([seq_rows[i]["longest"] / rows[i]["longest"] for i in both])
                if both
                else float("nan")
            )
    return out


def run_toy(cfg: ThreadWeaverConfig, seed: int = 0) -> tuple[dict[str, dict[str, float]], dict]:
    """Train the arms and evaluate them through the orchestrator.

    Returns:
        ``(metrics, extra)``: ``metrics[arm][name]`` for arms ``seq``, ``tw``, ``flat``, ``tw_ar``,
        ``closed_form`` (the serializer's own traces, i.e. a perfect model), and run details.
    """
    t0 = time.time()
    tok = toy_tokenizer(cfg.n_symbols, cfg.chain_len, cfg.toy_num_colon_token)
    ids = tag_ids(tok)
    codebook = make_codebook(cfg.n_symbols, cfg.chain_len, seed)
    rng = random.Random(seed)
    train = _problems(cfg.n_train, cfg, rng)
    evalp = _problems(cfg.n_eval, cfg, random.Random(seed + 10_000))

    def enc(s: str) -> list[int]:
        return tok(s, add_special_tokens=False)["input_ids"]

    def units_for(p: list[int], form: str, trie: bool):
        traj = toy_trajectory(p, codebook, form, cfg.toy_numbered)
        pids = _prompt_ids(tok, p, cfg.toy_numbered)
        _, units = extract_units(pids, traj, enc, tok.eos_token_id, cfg.join_suffix)
        return units if trie else units[:1]

    # Closed form: stats of the canonical traces (what a perfect model would emit).
    closed = {}
    for form, arm in (("seq", "seq"), ("par", "tw")):
        resp = [units_for(p, form, False)[0].completion for p in evalp]
        closed[arm] = [parallel_stats(r, ids) for r in resp]
    closed_rows = {
        arm: [
            {"k": len(p), "correct": True, "format_ok": True, "total": s.total,
             "longest": s.longest, "eta": s.eta, "parallel": s.has_parallel, "malformed": 0}
            for p, s in zip(evalp, st)
        ]
        for arm, st in closed.items()
    }  # fmt: skip
    # Round trip of the serializer on the toy's traces (cheap sanity check in every run).
    for p in evalp[:20]:
        for form in ("seq", "par"):
            t = toy_trajectory(p, codebook, form, cfg.toy_numbered)
            text = serialize(t, cfg.join_suffix)
            if parse(text, cfg.join_suffix) != t or tok.decode(enc(text)) != text:
                raise RuntimeError("toy serializer round trip failed")

    specs = {"seq": ("seq", False), "tw": ("par", True), "flat": ("par", False)}
    results: dict[str, dict] = {}
    extra: dict = {"train_loss_last": {}, "packed_len_mean": {}, "train_time_s": {}}
    seq_state = None
    for arm in sorted(cfg.arms, key=lambda a: a != "seq"):  # seq first (it may initialise tw)
        form, trie = specs[arm]
        packs = [build_packed(units_for(p, form, trie)) for p in train]
        model = _toy_model(cfg, len(tok), seed)
        if arm != "seq" and cfg.toy_tw_init == "seq":
            model.load_state_dict(seq_state)  # parallel SFT of the sequential model (§4, §6.1)
        t1 = time.time()
        losses = _train(model, packs, cfg, tok.pad_token_id, seed, arm)
        extra["train_time_s"][arm] = round(time.time() - t1, 1)
        if arm == "seq":
            seq_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        extra["train_loss_last"][arm] = sum(losses[-10:]) / len(losses[-10:])
        extra["packed_len_mean"][arm] = sum(len(p) for p in packs) / len(packs)
        results[arm] = _evaluate(model, tok, evalp, codebook, cfg, parallel=True)
        if arm == "tw" and cfg.hybrid_eval:
            results["tw_ar"] = _evaluate(model, tok, evalp, codebook, cfg, parallel=False)
        logger.info("threadweaver toy: arm %s done (%.1fs)", arm, time.time() - t1)
    seq_rows = results["seq"]["rows"]
    metrics = {arm: _summary(r["rows"], seq_rows) for arm, r in results.items()}
    metrics["closed_form"] = _summary(closed_rows["tw"], closed_rows["seq"])
    by_k = defaultdict(dict)
    for arm, r in results.items():
        for k in cfg.k_values:
            rows = [x for x in r["rows"] if x["k"] == k]
            by_k[arm][f"acc_k{k}"] = sum(x["correct"] for x in rows) / max(1, len(rows))
    extra["accuracy_by_k"] = dict(by_k)
    extra["samples"] = {arm: r["samples"] for arm, r in results.items()}
    extra["wall_time_s"] = round(time.time() - t0, 1)
    return metrics, extra


_TOY_NOTES = (
    "Arms: seq = sequential traces (baseline); tw = parallel traces, trie packing + "
    "parent-gather loss; flat = parallel traces, plain causal loss; tw_ar = tw model without "
    "the orchestrator (hybrid AR mode); closed_form = the serializer's own traces (a perfect "
    "model). token_latency = mean critical path (tokens); speedup_correct = mean over problems "
    "both arms solve of seq latency / arm latency. Evaluation: greedy, through the orchestrator."
)


@torch_threads(1)  # tiny matmuls: extra OpenMP threads only spin on a busy machine
def toy_stage(run: Run) -> dict[str, float]:
    """``stage=toy``: the codebook-spelling toy; writes ``results.json`` / ``results.md``."""
    t0 = time.time()
    metrics, extra = run_toy(run.method.toy, seed=run.seed)
    return write_results(run.run_dir, "threadweaver", metrics, cfg=run.cfg, extra=extra,
                         wall_time_s=time.time() - t0, notes=_TOY_NOTES)  # fmt: skip
