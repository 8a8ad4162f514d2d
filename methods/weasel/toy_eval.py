"""The SynthWeb toy's measurement (our toy, not in the paper): the greedy-decoded action parsed and
scored per field (name, bid, text), plus teacher-forced per-field accuracy. The paper measures task
success in BrowserGym instead (docs/methods/weasel.md, Deviations: "toy headline")."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

__all__ = ["action_fields", "evaluate_policy", "score_actions"]

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
