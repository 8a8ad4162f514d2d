"""The SynthWeb toy (``stage=toy``): a tiny SFT policy per training subset, scored per field.

Five training sets at the same per-trajectory budget T0 except Full: ``full`` (every step),
``random`` (T0 random steps per trajectory), ``weasel`` (λ = 1), ``importance_only`` (λ = 0) and
``diversity_only`` (Φ ≡ 0). Each set trains the same tiny policy (a word-level tokenizer built from
the corpus; a 2-layer GPT-2 or ``common.tiny`` Llama, optionally warmed up once per seed on the
random-token lookup task of ``common.tiny.induction_warmup``) with TRL's ``SFTTrainer``
(prompt–completion, completion-only loss). The prompt is the goal, the AXTree and the last action;
the completion is the action call. The greedy-decoded action is scored per field (name, bid, text)
on in-domain and held-out-site (OOD) essential steps.
"""

from __future__ import annotations

import logging
import re
import tempfile
from collections.abc import Sequence
from typing import Any

from .config import POLICY_ARCHS
from .synthweb import SITES, make_synthweb, policy_example

__all__ = [
    "POLICY_ARCHS",
    "SITES",
    "action_fields",
    "build_policy",
    "build_word_tokenizer",
    "evaluate_policy",
    "make_synthweb",
    "policy_example",
    "run_toy",
    "score_actions",
    "train_policy",
]

logger = logging.getLogger(__name__)

_TOKEN_RE = r"\w+|[^\w\s]"


def build_word_tokenizer(texts: Sequence[str]) -> Any:
    """Word-level tokenizer (words and single punctuation marks) built from the corpus."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = ["<pad>", "<eos>", "<unk>"]
    seen = set(vocab)
    for t in texts:
        for w in re.findall(_TOKEN_RE, t):
            if w not in seen:
                seen.add(w)
                vocab.append(w)
    for b in range(10, 400):  # every bid, so unseen test bids are not <unk>
        if str(b) not in seen:
            seen.add(str(b))
            vocab.append(str(b))
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(vocab)}, unk_token="<unk>"))
    # Whitespace is split off first, so no pre-token is a bare space (a lone ``Split(..., "isolated")``
    # keeps the gaps between matches as pre-tokens, and they are all <unk>).
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(_TOKEN_RE), "isolated")]
    )
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )


def build_policy(
    tokenizer: Any,
    arch: str = "gpt2",
    n_embd: int = 64,
    max_length: int = 256,
    seed: int = 0,
) -> Any:
    """A random-init 2-layer causal LM over ``tokenizer``'s vocabulary, in train mode.

    ``arch="gpt2"``: GPT-2 (learned absolute positions, 4 heads, no dropout), the original toy
    policy. ``arch="llama"``: ``common.tiny``'s Llama (rotary positions, 4 heads, 2 KV heads,
    untied embeddings), which forms the copy (induction) circuit of ``common.tiny.induction_warmup``
    on this budget where the GPT-2 does not.

    Raises:
        ValueError: on an unknown ``arch``.
    """
    import torch

    if arch not in POLICY_ARCHS:
        raise ValueError(f"arch must be one of {POLICY_ARCHS}, got {arch!r}")
    torch.manual_seed(seed)
    if arch == "llama":
        from common.tiny import tiny_causal_lm

        model, _ = tiny_causal_lm(
            "llama",
            hidden_size=n_embd,
            intermediate_size=2 * n_embd,
            max_position_embeddings=max_length,
            seed=seed,
            tokenizer=tokenizer,
            tie_word_embeddings=False,
        )
        model.train()
        return model
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=max_length,
        n_embd=n_embd,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return GPT2LMHeadModel(cfg)


def train_policy(
    examples: list[dict[str, str]],
    tokenizer: Any,
    seed: int = 0,
    epochs: float = 2.0,
    lr: float = 1e-3,
    batch_size: int = 16,
    n_embd: int = 64,
    max_length: int = 256,
    model: Any | None = None,
) -> tuple[Any, dict[str, float]]:
    """SFT of the toy policy with TRL ``SFTTrainer`` (completion-only loss).

    ``model``: a policy from :func:`build_policy` (for instance one warmed up on the random-token
    lookup task, ``common.tiny.induction_warmup``, shared by every arm of a seed); None builds a
    random-init 2-layer GPT-2 of width ``n_embd``.
    """
    import time

    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    if model is None:
        model = build_policy(tokenizer, "gpt2", n_embd, max_length, seed)
    args = SFTConfig(
        output_dir=tempfile.mkdtemp(prefix="weasel_sft_"),
        learning_rate=lr,
        num_train_epochs=epochs,
        per_device_train_batch_size=batch_size,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_length=max_length,
        completion_only_loss=True,
        save_strategy="no",
        report_to="none",
        logging_steps=10,
        use_cpu=True,
        bf16=False,
        dataloader_pin_memory=False,
        disable_tqdm=True,
        seed=seed,
        data_seed=seed,
    )
    ds = Dataset.from_list(examples)
    t0 = time.time()
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tokenizer)
    trainer.train()
    wall = time.time() - t0
    n_tokens = sum(len(x) for x in trainer.train_dataset["input_ids"]) * epochs
    model.eval()
    return model, {
        "train_tokens": float(n_tokens),
        "train_seconds": wall,
        "n_train": float(len(ds)),
    }


_ACTION_RE = re.compile(r"^(\w+)\((.*)\)$")


def action_fields(action: str) -> tuple[str | None, str | None, str | None]:
    """``(name, bid, text)`` of a BrowserGym action call; whitespace is ignored.

    ``click('12')`` -> ``("click", "12", None)``, ``fill('7', 'rake')`` -> ``("fill", "7", "rake")``,
    ``scroll(0, 300)`` -> ``("scroll", None, None)``. The bid is the first quoted argument and the
    text the second. Anything that is not ``name(args)`` yields ``(None, None, None)``.

    Raises:
        TypeError: if ``action`` is not a string.
    """
    if not isinstance(action, str):
        raise TypeError(f"action must be a str, got {type(action).__name__}")
    m = _ACTION_RE.match("".join(action.split()))
    if m is None:
        return None, None, None
    quoted = re.findall(r"'([^']*)'", m.group(2))
    return (
        m.group(1),
        quoted[0] if quoted else None,
        quoted[1] if len(quoted) > 1 else None,
    )


def score_actions(predictions: Sequence[str], golds: Sequence[str]) -> dict[str, float]:
    """Per-field accuracy of predicted action strings against the gold ones.

    ``action_acc``: the whole call matches (whitespace ignored). ``name_acc``: the action name
    matches, over all steps. ``bid_acc``: the bid matches, over gold steps that have a bid.
    ``text_acc``: the typed text matches, over gold ``fill`` steps. A field with no gold step is
    NaN. ``parse_failures``: predictions that are not a ``name(args)`` call (counted, not dropped:
    they score 0 on every field).

    Raises:
        ValueError: if the two lists differ in length.
    """
    if len(predictions) != len(golds):
        raise ValueError(
            f"predictions and golds must have the same length, got {len(predictions)} and "
            f"{len(golds)}"
        )
    exact = name = bid = text = n_bid = n_text = fails = 0
    for pred, gold in zip(predictions, golds):
        p, g = action_fields(pred), action_fields(gold)
        fails += p[0] is None
        exact += "".join(pred.split()) == "".join(gold.split())
        name += p[0] is not None and p[0] == g[0]
        if g[1] is not None:
            n_bid += 1
            bid += p[1] == g[1]
        if g[2] is not None:
            n_text += 1
            text += p[2] == g[2]
    n = len(golds)
    nan = float("nan")
    return {
        "action_acc": exact / n if n else nan,
        "name_acc": name / n if n else nan,
        "bid_acc": bid / n_bid if n_bid else nan,
        "text_acc": text / n_text if n_text else nan,
        "parse_failures": float(fails),
    }


def _prompt_bids(prompt: str) -> list[str]:
    return re.findall(r"\[(\w+)\]", prompt.split(" last :")[0])


def evaluate_policy(
    model: Any, tokenizer: Any, examples: list[dict[str, str]], batch_size: int = 64
) -> dict[str, float]:
    """Greedy-decoded action scored per field (:func:`score_actions`), plus teacher-forced scores.

    Also ``bid_in_tree``: the share of bid-carrying steps whose predicted bid is one of the page's
    bids (the model copies from the tree rather than inventing a number), and ``bid_chance``: the
    accuracy of a uniform guess among the page's bids (a reference line, the same for every arm).
    """
    import torch

    preds: list[str] = []
    for s in range(0, len(examples), batch_size):
        chunk = examples[s : s + batch_size]
        enc = tokenizer([e["prompt"] for e in chunk], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=16,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        for row in out[:, enc["input_ids"].shape[1] :].tolist():
            if tokenizer.eos_token_id in row:
                row = row[: row.index(tokenizer.eos_token_id)]
            # Word-level tokens joined without spaces: the gold is compared whitespace-free too.
            preds.append("".join(tokenizer.convert_ids_to_tokens(row)))
    golds = [e["completion"] for e in examples]
    res = score_actions(preds, golds)
    in_tree = chance = n_bid = 0.0
    for e, pred, gold in zip(examples, preds, golds):
        if action_fields(gold)[1] is None:
            continue
        bids = _prompt_bids(e["prompt"])
        n_bid += 1
        in_tree += action_fields(pred)[1] in bids
        chance += 1.0 / max(len(bids), 1)
    res["bid_in_tree"] = in_tree / n_bid if n_bid else float("nan")
    res["bid_chance"] = chance / n_bid if n_bid else float("nan")
    res.update(_teacher_forced(model, tokenizer, examples, batch_size))
    return res


def _field_labels(tokens: Sequence[str]) -> list[str]:
    """Field of each gold action token: name (the first), bid / text (inside the first / second
    quotes), else syntax."""
    out, quotes = [], 0
    for k, t in enumerate(tokens):
        if k == 0:
            out.append("name")
        elif t == "'":
            quotes += 1
            out.append("syntax")
        elif quotes == 1:
            out.append("bid")
        elif quotes == 3:
            out.append("text")
        else:
            out.append("syntax")
    return out


def _teacher_forced(
    model: Any, tokenizer: Any, examples: list[dict[str, str]], batch_size: int
) -> dict[str, float]:
    """Next-token accuracy and mean NLL over the gold action tokens (+ eos), prompt given; and the
    teacher-forced accuracy per field (``tf_name_acc``, ``tf_bid_acc``, ``tf_text_acc``).

    A graded companion to the greedy per-field scores; the per-field split shows whether the overall
    token accuracy comes from the fixed template (brackets, quotes, eos) or from the fields.
    """
    import torch

    correct = total = 0
    nll = 0.0
    per_field = {f: [0, 0] for f in ("name", "bid", "text")}
    for s in range(0, len(examples), batch_size):
        chunk = examples[s : s + batch_size]
        rows, labels, fields = [], [], []
        for e in chunk:
            p = tokenizer(e["prompt"], add_special_tokens=False)["input_ids"]
            c = tokenizer(e["completion"], add_special_tokens=False)["input_ids"]
            fields.append(_field_labels(tokenizer.convert_ids_to_tokens(c)) + ["eos"])
            c = c + [tokenizer.eos_token_id]
            rows.append(p + c)
            labels.append([-100] * len(p) + c)
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), tokenizer.pad_token_id)
        lab = torch.full((len(rows), width), -100)
        att = torch.zeros((len(rows), width), dtype=torch.long)
        for k, (r, lb) in enumerate(zip(rows, labels)):  # right padding: positions stay aligned
            ids[k, : len(r)] = torch.tensor(r)
            lab[k, : len(lb)] = torch.tensor(lb)
            att[k, : len(r)] = 1
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]  # [b, L-1, V]
        tgt = lab[:, 1:]  # [b, L-1]
        mask = tgt != -100
        logp = torch.log_softmax(logits.float(), dim=-1)
        tok_logp = logp.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)  # [b, L-1]
        nll -= float(tok_logp[mask].sum())
        hit = logits.argmax(-1) == tgt  # [b, L-1]
        correct += int(hit[mask].sum())
        total += int(mask.sum())
        for k, f in enumerate(fields):
            row_hits = hit[k][mask[k]].tolist()  # the completion tokens of row k, in order
            for lab_k, h in zip(f, row_hits):
                if lab_k in per_field:
                    per_field[lab_k][0] += int(h)
                    per_field[lab_k][1] += 1
    total = max(total, 1)
    out = {"action_token_acc": correct / total, "action_nll": nll / total}
    for f, (c_, n_) in per_field.items():
        out[f"tf_{f}_acc"] = c_ / n_ if n_ else float("nan")
    return out


# ---------------------------------------------------------------- the toy stage
_STD_KEYS = ("action_acc", "name_acc", "bid_acc", "text_acc", "action_token_acc", "tf_bid_acc")


def similarity_for(rc: Any) -> Any:
    """The run config's scorer: ``JaccardSimilarity`` or the BERTScore-style token matching."""
    from .scoring import JaccardSimilarity, TokenMatchSimilarity

    if rc.scorer == "jaccard":
        return JaccardSimilarity()
    model = rc.scorer_path or rc.scorer_model
    return TokenMatchSimilarity(model, num_layers=rc.num_layers, max_length=rc.max_length)


def _arm_indices(arm: str, records: list[dict], rc: Any, sim: Any, seed: int) -> list[int]:
    import dataclasses
    import random

    from .data import parse_records, segment_by_goal
    from .pipeline import WeaselSelector

    if arm == "full":
        return list(range(len(records)))
    if arm == "random":
        steps, _ = parse_records(records)
        rng = random.Random(seed)
        out: list[int] = []
        for tr in segment_by_goal(steps):
            k = min(rc.selection.budget_fixed, len(tr.index))
            out += sorted(rng.sample(tr.index, k))
        return out
    sel_cfg = dataclasses.replace(rc.selection, prune=False)  # already pruned once for all arms
    if arm == "importance_only":
        sel_cfg.lam = 0.0
    elif arm == "diversity_only":
        sel_cfg.importance_off = True
    return WeaselSelector(sim, sel_cfg).select_indices(records)[1]


def run_toy(run: Any) -> dict[str, float]:
    """``stage=toy``: every arm on one SynthWeb corpus, for each seed; writes results."""
    import copy
    import statistics
    import time

    import datasets
    import torch

    from common.tiny import induction_warmup
    from common.tracking import write_results

    from .pruning import PruneStats, prune_record

    rc = run.method
    datasets.disable_progress_bars()
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    t0 = time.time()
    train, test_id, test_ood = make_synthweb(rc.n_train_traj, rc.n_test_steps, rc.data_seed)
    # Pruning (official prune_axtree.py) applies to every arm's training prompts; test
    # prompts stay unpruned.
    stats = PruneStats()
    s = rc.selection
    pruned = [prune_record(r, s.window, s.fallback, stats)[0] for r in train]
    for p, r in zip(pruned, train):
        p["kind"] = r["kind"]
    nf = rc.name_first_tree
    ex_train = [policy_example(r, nf) for r in pruned]
    ex_id = [policy_example(r, nf) for r in test_id]
    ex_ood = [policy_example(r, nf) for r in test_ood]
    tok = build_word_tokenizer([e["prompt"] + e["completion"] for e in ex_train + ex_id + ex_ood])
    sim = similarity_for(rc)
    per_arm: dict[str, list[dict[str, float]]] = {a: [] for a in rc.arms}
    t_sel: dict[str, float] = {}
    cached: dict[str, list[int]] = {}  # deterministic arms are selected once, not once per seed
    for seed in rc.seeds:
        seed = int(run.seed) + int(seed)
        # One initial policy per seed, shared by every arm (warmed up once when asked).
        base = build_policy(tok, rc.arch, rc.n_embd, seed=seed)
        warm: dict[str, float] = {}
        if rc.induction_steps > 0:
            n_special = len(tok.all_special_ids)
            warm = induction_warmup(base, n_special, len(tok), rc.induction_steps, seed=seed)
        init_state = copy.deepcopy(base.state_dict())
        for arm in rc.arms:
            ts = time.time()
            if arm in cached:
                idx = cached[arm]
            else:
                idx = _arm_indices(arm, pruned, rc, sim, seed)
                t_sel[arm] = time.time() - ts
                if arm != "random":
                    cached[arm] = idx
            kinds = [pruned[i]["kind"] for i in idx]
            policy = build_policy(tok, rc.arch, rc.n_embd, seed=seed)
            policy.load_state_dict(init_state)
            policy.train()
            model, info = train_policy(
                [ex_train[i] for i in idx],
                tok,
                seed=seed,
                epochs=rc.epochs,
                lr=rc.lr,
                batch_size=rc.batch_size,
                n_embd=rc.n_embd,
                model=policy,
            )
            row = {f"ood_{k}": v for k, v in evaluate_policy(model, tok, ex_ood).items()}
            row.update({f"id_{k}": v for k, v in evaluate_policy(model, tok, ex_id).items()})
            row.update(info)
            row.update(warm)
            row["essential_frac"] = kinds.count("essential") / max(len(kinds), 1)
            per_arm[arm].append(row)
            logger.info("weasel toy seed %d arm %s: %s", seed, arm, row)
    metrics: dict[str, dict[str, float]] = {}
    for arm, rows in per_arm.items():
        metrics[arm] = {k: statistics.mean(r[k] for r in rows) for k in rows[0]}
        if len(rows) > 1:
            for split in ("ood", "id"):
                for key in _STD_KEYS:
                    k = f"{split}_{key}"
                    metrics[arm][f"{k}_std"] = statistics.stdev(r[k] for r in rows)
    if "full" in metrics:
        for arm in metrics:
            metrics[arm]["token_ratio_vs_full"] = (
                metrics["full"]["train_tokens"] / metrics[arm]["train_tokens"]
            )
    extra = {
        "prune": stats.as_dict(),
        "n_train_steps": len(train),
        "selection_seconds": t_sel,
        "scorer": rc.scorer,
        "per_seed": per_arm,
    }
    return write_results(
        run.run_dir, "weasel", metrics, cfg=run.cfg, extra=extra, wall_time_s=time.time() - t0
    )
