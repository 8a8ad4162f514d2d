"""SynthWeb: a seeded synthetic web-agent corpus and a tiny SFT policy for the CPU toy (spec §6).

Twelve site templates (eight for training, four held out with disjoint element words) share three
interaction patterns: search (fill the search box, submit, open the result), menu (category →
subcategory → item) and form (fill fields, submit). Each trajectory has 4–6 essential steps and
about twice as many noise steps: ``scroll`` on an identical state, ``hover`` on an irrelevant promo
page, and an erroneous click followed by ``go_back``. Records are AgentLab-format chat messages, so
the library's pruning, parsing and selection run on them unchanged.

The policy is a 2-layer GPT-2 from random initialisation with a word-level tokenizer built from the
corpus, trained with TRL's ``SFTTrainer`` (prompt–completion, completion-only loss). The prompt is
the goal, the AXTree and the last action; the completion is the action call.
"""

from __future__ import annotations

import logging
import random
import re
import tempfile
from collections.abc import Sequence
from typing import Any

__all__ = [
    "SITES",
    "build_word_tokenizer",
    "evaluate_policy",
    "make_synthweb",
    "policy_example",
    "train_policy",
]

logger = logging.getLogger(__name__)

_WORDS = (
    "garden tools shovel rake hose seeds soil pots lamp sofa chair table shelf rug pillow blanket "
    "laptop phone tablet cable charger mouse keyboard monitor printer camera novel poetry comics "
    "atlas cookbook journal magazine guitar piano violin drums flute trumpet ukulele tent boots "
    "jacket gloves scarf helmet bike skates kayak paddle rope lantern stove kettle blender toaster "
    "oven mixer whisk ladle spoon fork plate bowl mug teapot candle vase mirror clock frame basket "
    "wallet purse belt watch ring necklace perfume soap shampoo brush comb towel robe slippers "
    "ticket flight hotel cruise train rental museum concert stadium theatre ferry bus taxi visa "
    "invoice ledger payroll budget report ticketing incident change request asset license vendor "
    "quartz amber cobalt indigo maroon olive"
).split()
_SITE_NAMES = (
    "homegoods electromart bookbarn musicland outdoorhub kitchenpro fashionfit wellness "
    "travelnow servicedesk citymarket archivebay"
).split()
_FILLER = "home about contact help cart account login deals news careers privacy terms".split()
_PROMO = "sale offer banner coupon newsletter promo popup advert sponsor".split()


def _site_pools() -> list[dict]:
    pools = []
    for k, name in enumerate(_SITE_NAMES):
        words = _WORDS[k * 10 : (k + 1) * 10]
        pools.append({"name": name, "words": words, "ood": k >= 8})
    return pools


SITES = _site_pools()


def _tree(rng: random.Random, site: str, names: Sequence[tuple[str, str]]) -> tuple[str, dict]:
    """AXTree text and a name -> bid map; bids are random distinct integers."""
    bids = rng.sample(range(10, 400), len(names))
    lines = [f"RootWebArea '{site}', focused"]
    bid_of = {}
    for (role, name), b in zip(names, bids):
        lines.append(f"\t[{b}] {role} '{name}'")
        bid_of[name] = str(b)
    return "\n".join(lines), bid_of


def _page(
    rng: random.Random, site: dict, must: Sequence[tuple[str, str]], n_lines: int
) -> tuple[str, dict]:
    others = [w for w in site["words"] if w not in {n for _, n in must}]
    extra = [("link", w) for w in rng.sample(others, min(len(others), 4))]
    extra += [("link", w) for w in rng.sample(_FILLER, max(0, n_lines - len(must) - len(extra)))]
    items = list(must) + extra
    rng.shuffle(items)
    return _tree(rng, site["name"], items)


def _prompt(goal: str, axtree: str, history: list[str]) -> str:
    hist = "\n".join(history[-3:]) if history else "none"
    return (
        "# Instructions\nYou are a web agent. Reply with <think> and <action>.\n\n"
        f"## Goal:\n{goal}\n\n# Observation of current step:\n## AXTree:\n{axtree}\n\n"
        f"# History of interaction with the task:\n{hist}\n\n"
        "# Action space:\nclick(bid) fill(bid, text) hover(bid) scroll(dx, dy) go_back()\n"
    )


def _record(goal: str, axtree: str, history: list[str], why: str, action: str, kind: str) -> dict:
    return {
        "messages": [
            {"role": "system", "content": "You are a helpful web agent."},
            {"role": "user", "content": _prompt(goal, axtree, history)},
            {"role": "assistant", "content": f"<think>{why}</think><action>{action}</action>"},
        ],
        "kind": kind,
    }


def _essential_plan(rng: random.Random, site: dict) -> tuple[str, list[tuple[str, str, str]]]:
    """Goal and a list of (page role, target name, action kind) for the essential steps."""
    w = rng.sample(site["words"], 4)
    pattern = rng.choice(["search", "menu", "form"])
    if pattern == "search":
        goal = f"search for {w[0]} and open the {w[1]} result"
        plan = [
            ("textbox", "search", "fill:" + w[0]),
            ("button", "submit", "click"),
            ("link", w[1], "click"),
            ("button", "add", "click"),
        ]
    elif pattern == "menu":
        goal = f"open {w[0]} then {w[1]} then the {w[2]} item"
        plan = [("link", w[0], "click"), ("link", w[1], "click"), ("link", w[2], "click")]
        plan.append(("link", w[3], "click"))
        goal += f" and {w[3]}"
    else:
        goal = f"fill the form with name {w[0]} and city {w[1]} then submit"
        plan = [
            ("textbox", "name", "fill:" + w[0]),
            ("textbox", "city", "fill:" + w[1]),
            ("button", "submit", "click"),
        ]
        plan.append(("link", "confirm", "click"))
    if rng.random() < 0.5:
        plan.append(("link", "done", "click"))
    if rng.random() < 0.3:
        plan.append(("link", "receipt", "click"))
    return goal, plan


def _trajectory(rng: random.Random, site: dict, noise: bool) -> list[dict]:
    goal, plan = _essential_plan(rng, site)
    history: list[str] = []
    recs: list[dict] = []
    for role, name, kind in plan:
        axtree, bid_of = _page(rng, site, [(role, name)], rng.randint(6, 10))
        b = bid_of[name]
        if kind.startswith("fill:"):
            text = kind.split(":", 1)[1]
            action, why = (
                f"fill('{b}', '{text}')",
                f"The goal mentions {text}, so I type it into {name}.",
            )
        else:
            action, why = f"click('{b}')", f"The goal needs {name}, so I click the {name} element."
        if noise:
            for _ in range(rng.choice([0, 1, 1, 2])):  # (a) redundant scroll, identical state
                recs.append(
                    _record(
                        goal,
                        axtree,
                        history,
                        "I scroll to see more of the page.",
                        "scroll(0, 300)",
                        "scroll",
                    )
                )
                history = history + ["scroll(0, 300)"]
            if rng.random() < 0.5:  # (b) hover on an irrelevant promo page
                promo, pbid = _tree(rng, "promo", [("link", p) for p in rng.sample(_PROMO, 5)])
                hb = rng.choice(list(pbid.values()))
                recs.append(
                    _record(
                        goal,
                        promo,
                        history,
                        "I hover over the banner to inspect it.",
                        f"hover('{hb}')",
                        "hover",
                    )
                )
                history = history + [f"hover('{hb}')"]
            if rng.random() < 0.5:  # (c) erroneous click, then go_back from an unrelated page
                wrong = rng.choice([n for n in bid_of if n != name])
                recs.append(
                    _record(
                        goal,
                        axtree,
                        history,
                        f"I click the {wrong} element.",
                        f"click('{bid_of[wrong]}')",
                        "error",
                    )
                )
                history = history + [f"click('{bid_of[wrong]}')"]
                off, _ = _page(rng, site, [("link", rng.choice(_FILLER))], rng.randint(6, 10))
                recs.append(
                    _record(
                        goal,
                        off,
                        history,
                        "This page does not match the goal, I go back.",
                        "go_back()",
                        "back",
                    )
                )
                history = history + ["go_back()"]
        recs.append(_record(goal, axtree, history, why, action, "essential"))
        history = history + [action]
    return recs


def make_synthweb(
    n_train_traj: int = 150, n_test_steps: int = 200, seed: int = 0
) -> tuple[list[dict], list[dict], list[dict]]:
    """``(train records, in-domain test steps, OOD test steps)``; test steps are essential only."""
    rng = random.Random(seed)
    train_sites = [s for s in SITES if not s["ood"]]
    ood_sites = [s for s in SITES if s["ood"]]
    train = [
        r for _ in range(n_train_traj) for r in _trajectory(rng, rng.choice(train_sites), True)
    ]

    def _test(sites: list[dict]) -> list[dict]:
        out: list[dict] = []
        while len(out) < n_test_steps:
            out += _trajectory(rng, rng.choice(sites), False)
        return out[:n_test_steps]

    return train, _test(train_sites), _test(ood_sites)


def policy_example(rec: dict) -> dict[str, str]:
    """Compact prompt/completion for the tiny policy: goal, AXTree, last action → action."""
    from .data import parse_agentlab_prompt

    sec = parse_agentlab_prompt(rec["messages"][1]["content"])
    last = sec["history"].split("\n")[-1]
    action = re.search(r"<action>(.*?)</action>", rec["messages"][2]["content"]).group(1)
    tree = re.sub(r"RootWebArea[^\n]*\n?", "", sec["axtree"]).replace("'", "")
    prompt = f"goal : {sec['goal']} tree : {tree} last : {last} action :"
    return {"prompt": " ".join(prompt.split()), "completion": " " + action}


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
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(_TOKEN_RE), behavior="isolated")
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<eos>",
        unk_token="<unk>",
        padding_side="left",
    )


def train_policy(
    examples: list[dict[str, str]],
    tokenizer: Any,
    seed: int = 0,
    epochs: float = 2.0,
    lr: float = 1e-3,
    batch_size: int = 16,
    n_embd: int = 64,
    max_length: int = 256,
) -> tuple[Any, dict[str, float]]:
    """Trains a 2-layer GPT-2 from random init with TRL ``SFTTrainer`` (completion-only loss)."""
    import time

    import torch
    from datasets import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel
    from trl import SFTConfig, SFTTrainer

    torch.manual_seed(seed)
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
    model = GPT2LMHeadModel(cfg)
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


def evaluate_policy(
    model: Any, tokenizer: Any, examples: list[dict[str, str]], batch_size: int = 64
) -> dict[str, float]:
    """Greedy-decoded action: exact match of the token sequence, and match of the action name."""
    import torch

    exact = name_ok = 0
    for s in range(0, len(examples), batch_size):
        chunk = examples[s : s + batch_size]
        enc = tokenizer([e["prompt"] for e in chunk], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=12,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        for e, row in zip(chunk, out[:, enc["input_ids"].shape[1] :].tolist()):
            if tokenizer.eos_token_id in row:
                row = row[: row.index(tokenizer.eos_token_id)]
            gold = tokenizer(e["completion"], add_special_tokens=False)["input_ids"]
            exact += row == gold
            name_ok += bool(row) and row[0] == gold[0]
    n = max(len(examples), 1)
    tf = _teacher_forced(model, tokenizer, examples, batch_size)
    return {"action_acc": exact / n, "action_name_acc": name_ok / n, **tf}


def _teacher_forced(
    model: Any, tokenizer: Any, examples: list[dict[str, str]], batch_size: int
) -> dict[str, float]:
    """Next-token accuracy and mean NLL over the gold action tokens (+ eos), prompt given.

    A graded companion to exact match: a 2-layer model rarely copies a whole bid right, but its
    per-token accuracy on the gold action still separates training sets.
    """
    import torch

    correct = total = 0
    nll = 0.0
    for s in range(0, len(examples), batch_size):
        chunk = examples[s : s + batch_size]
        rows, labels = [], []
        for e in chunk:
            p = tokenizer(e["prompt"], add_special_tokens=False)["input_ids"]
            c = tokenizer(e["completion"], add_special_tokens=False)["input_ids"] + [
                tokenizer.eos_token_id
            ]
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
        correct += int((logits.argmax(-1) == tgt)[mask].sum())
        total += int(mask.sum())
    total = max(total, 1)
    return {"action_token_acc": correct / total, "action_nll": nll / total}
