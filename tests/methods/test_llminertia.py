"""Tests for methods.llminertia: parsers, matching, notes, pipeline call budget, data, metrics.

Official-code fixture: ``methods/llminertia/fixtures/official_parsing.json`` holds the outputs of
``map_result`` (evaluation/eval_overthink.py), ``find_entity_pairs_in_input`` and
``build_entity_pair_prompt`` (scripts/vllm_infer_evidence_medical.py) of THUMLP/LLMInertia at commit
6bbdf257efd3bb8a42c518f0a2df4535f5f68bca on 24 replies and one probe reply (docs/methods/llminertia.md).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from common.llm import ScriptedChat
from methods.llminertia import (
    COOCCURRENCE_TEMPLATES,
    MEDICAL,
    MEDICAL_PAIRS,
    NEGATIVE_TEMPLATES,
    SYNTHETIC_PAIRS,
    LLMInertiaPipeline,
    Pred,
    build_note,
    fill_template,
    induction_metrics,
    make_cooccurrence_corpus,
    make_negative_evidence_tests,
    match_pairs,
    parse_entity_list,
    parse_pairs,
    parse_yes_no,
)

# ---------------------------------------------------------------- parsers


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("【Conclusion】No.", "no"),
        ("[conclusion]: yes", "yes"),
        ("Conclusion: No", "no"),
        ("(Conclusion): Yes", "yes"),
        ("Answer: yes", "yes"),
        ("答案：否", "no"),
        ("No", "no"),
        (" yes. ", "yes"),
        ("maybe", "error"),
        ("", "error"),
        ("I cannot tell.", "error"),
        ("Yes, it seems so... 【Conclusion】: No", "no"),
    ],
)
def test_parse_yes_no_lenient(text, want):
    assert parse_yes_no(text, rule="lenient") == want


OFFICIAL = json.loads(
    (
        Path(__file__).resolve().parents[2] / "methods/llminertia/fixtures/official_parsing.json"
    ).read_text(encoding="utf-8")
)


def test_parse_yes_no_matches_official_map_result():
    got = [parse_yes_no(r["reply"]) for r in OFFICIAL["yes_no"]]
    assert got == [r["official"] for r in OFFICIAL["yes_no"]]
    # the cases where the earlier parser differs: bare "No."/"Yes." are errors, "Nope" after a field is no
    assert parse_yes_no("No.") == "error" and parse_yes_no("No.", "lenient") == "no"
    assert parse_yes_no("Yes.") == "error" and parse_yes_no("Yes.", "lenient") == "yes"
    assert (
        parse_yes_no("Conclusion: Nope") == "no"
        and parse_yes_no("Conclusion: Nope", "lenient") == "error"
    )
    assert parse_yes_no("N o") == "no"  # official removes every space before the bare test
    with pytest.raises(ValueError, match="rule"):
        parse_yes_no("yes", rule="strict")


def test_pairs_and_note_match_official():
    f = OFFICIAL["pairs"]
    pairs = parse_pairs(f["probe_reply"])
    got = match_pairs(f["text"], pairs)
    assert got == [tuple(p) for p in f["official_pairs"]]
    assert build_note(got, MEDICAL_OFFICIAL_NOTE) == f["official_note"]
    # the earlier filters (min length 3, stopwords, dedup) keep fewer pairs
    ours = match_pairs(
        f["text"], parse_pairs(f["probe_reply"], dedup=True), min_len=3, stopwords=True, dedup=True
    )
    assert len(ours) < len(got)
    with pytest.raises(ValueError, match="min_len"):
        match_pairs(f["text"], pairs, min_len=-1)


# reminder wording of the official build_entity_pair_prompt (our MEDICAL set words it differently)
MEDICAL_OFFICIAL_NOTE = __import__("dataclasses").replace(
    MEDICAL,
    reminder_pair="{a} and {b} may not necessarily be related. Please examine the original text "
    "carefully and make a thorough judgment.",
)


def test_parse_yes_no_type_error():
    with pytest.raises(TypeError, match="text"):
        parse_yes_no(None)


def test_parse_pairs_cases():
    assert parse_pairs("") == []
    assert parse_pairs("no tuples here") == []
    reply = "(Cough ,  Pneumonia) (Cough, Asthma)\n(Fever (high), Flu) and so on (x, X)"
    got = parse_pairs(reply, dedup=True)
    assert got == [("Cough", "Pneumonia"), ("Cough", "Asthma"), ("Fever (high)", "Flu")]
    assert parse_pairs("(a, b) (A, B) (, b)", dedup=True) == [
        ("a", "b")
    ]  # dedup, empty side dropped
    # official: every regex match, stripped, repeats and empty sides kept
    assert parse_pairs("(a, b) (A, B) (, b)") == [("a", "b"), ("A", "B"), ("", "b")]
    assert parse_pairs(reply)[-1] == ("x", "X")


def test_parse_entity_list():
    assert parse_entity_list("Cough, fever, cough ,, Fever.") == ["Cough", "fever"]
    assert parse_entity_list("just one entity") == ["just one entity"]
    assert parse_entity_list("   ") == []


# ---------------------------------------------------------------- matching and notes


def test_match_pairs_matchers():
    text = "The patient was coughing; no Pneumonia on CT."
    pairs = [("Cough", "pneumonia"), ("cough", "asthma"), ("pneumonia", "Cough")]
    assert match_pairs(text, pairs, "substring", dedup=True) == [
        ("Cough", "pneumonia")
    ]  # either order
    assert len(match_pairs(text, pairs, "substring")) == 2  # official keeps the repeat
    assert match_pairs(text, pairs, "word_boundary") == []  # "coughing" is not the word "cough"
    assert match_pairs("A cough, and pneumonia.", pairs, "word_boundary", dedup=True) == [
        ("Cough", "pneumonia")
    ]
    # both sides required; short entities excluded only with min_len
    assert match_pairs("cough only", [("cough", "flu")]) == []
    assert match_pairs("an ox and flu", [("ox", "flu")], min_len=3) == []
    assert match_pairs("an ox and flu", [("ox", "flu")]) == [("ox", "flu")]
    # min_len is the shortest length allowed (inclusive): "flu" (3) matches at 3, not at 4
    assert match_pairs("flu and cold", [("flu", "cold")], min_len=3) == [("flu", "cold")]
    assert match_pairs("flu and cold", [("flu", "cold")], min_len=4) == []
    assert match_pairs("  flu and cold", [(" flu ", "cold")], min_len=3) == [("flu", "cold")]
    assert match_pairs("it is the flu", [("the", "flu")], stopwords=True) == []
    with pytest.raises(ValueError, match="matcher"):
        match_pairs(text, pairs, "regex")


def test_build_note():
    assert build_note([], MEDICAL) == MEDICAL.reminder_generic
    pairs = [("Cough", "Asthma"), ("Fever", "Flu"), ("Cough", "Asthma")]
    note = build_note(pairs, MEDICAL, dedup=True)
    assert note.count("not make them related") == 2
    assert build_note(pairs, MEDICAL).count("not make them related") == 3  # official: one per pair
    assert note.index("Cough") < note.index("Fever")
    assert MEDICAL.reminder_generic not in note


# ---------------------------------------------------------------- pipeline


def test_answer_plain_bare_input_is_official():
    from methods.llminertia import answer_plain

    seen: list[str] = []

    def fn(messages):
        seen.append(messages[-1]["content"])
        return "【Conclusion】: No"

    chat = ScriptedChat(fn)
    q = "Description: Cough, no asthma.\nQuestion: Does Asthma exist or hold?"
    assert answer_plain(chat, [q]) == ["no"]
    assert seen[-1] == q  # official: the bare input, no template
    answer_plain(chat, [q], note="")
    assert seen[-1] != q and q in seen[-1]  # earlier behaviour: the answer template
    with pytest.raises(TypeError, match="note"):
        answer_plain(chat, [q], note=3)


class CountingChat(ScriptedChat):
    def __init__(self, fn):
        super().__init__(fn)
        self.batch_sizes: list[int] = []

    def chat_batch(self, batch, **kw):
        self.batch_sizes.append(len(batch))
        return super().chat_batch(batch, **kw)


def _scripted(msgs):
    c = msgs[-1]["content"]
    if c.startswith("List every important medical entity"):
        text = c.split("Text: ")[-1]
        return ", ".join(
            e for e in ("Headache", "Hypertension", "Fever") if e.lower() in text.lower()
        )
    if c.startswith("For each entity"):
        ents = c.split("Entities: ")[-1].split("\nReply")[0]
        out = []
        if "Headache" in ents:
            out.append("(Headache, Hypertension) (Headache, Migraine) (Headache, Stroke)")
        if "Fever" in ents:
            out.append("(Fever, Flu) (Fever, Sepsis) (Fever, Malaria)")
        return "\n".join(out) or "I do not know."
    note = c.split("\nNote: ")[-1]  # the note of the actual question, after the few-shot examples
    return "【Conclusion】: No" if "not make them related" in note else "【Conclusion】: Yes"


def test_pipeline_three_batched_calls_and_adaptive_note():
    llm = CountingChat(_scripted)
    texts = [
        "Headache present. No hypertension found. Does Hypertension exist?",  # pair matches
        "Fever present. The patient is calm. Does Hypertension exist?",  # probe, no match
        "Nothing notable. Does anything exist?",  # no entities -> no probe
    ]
    recs = LLMInertiaPipeline(llm, MEDICAL, k=3, batch_size=8).run(texts)
    assert llm.batch_sizes == [3, 2, 3]  # extract, probe (non-empty lists), answer
    assert len(llm.batch_sizes) == 3
    assert recs[0].matched == [("Headache", "Hypertension")]
    assert "Headache and Hypertension" in recs[0].note and recs[0].predict == "no"
    assert recs[1].matched == [] and recs[1].note == MEDICAL.reminder_generic
    assert recs[2].n_entities == 0 and recs[2].note == MEDICAL.reminder_generic
    assert recs[1].predict == "yes"
    assert all(r.note in r.augmented_input and r.prompt in r.augmented_input for r in recs)


def test_pipeline_batches_and_bad_input():
    llm = CountingChat(_scripted)
    texts = ["Headache present. No hypertension. Does Hypertension exist?"] * 5
    recs = LLMInertiaPipeline(llm, MEDICAL, batch_size=2, max_pairs=1).run(texts)
    assert len(recs) == 5 and len(llm.batch_sizes) == 3 * 3  # 3 batches x 3 steps
    with pytest.raises(ValueError, match="texts"):
        LLMInertiaPipeline(llm).run([])
    with pytest.raises(ValueError, match="texts"):
        LLMInertiaPipeline(llm).run(["ok", "  "])
    with pytest.raises(ValueError, match="matcher"):
        LLMInertiaPipeline(llm, matcher="nope")


def test_pipeline_unparsable_answer_is_error():
    llm = ScriptedChat(lambda m: "Headache" if "entity" in m[-1]["content"][:40] else "hmm")
    recs = LLMInertiaPipeline(llm).run(["Headache but what?"])
    assert recs[0].predict == "error" and recs[0].pairs == []


# ---------------------------------------------------------------- data


def _glued(text: str, entity: str) -> bool:
    return any(
        (m.start() > 0 and text[m.start() - 1].isalnum())
        or (m.end() < len(text) and text[m.end()].isalnum())
        for m in re.finditer(re.escape(entity), text)
    )


def test_templates_never_glue_entities():
    pairs = MEDICAL_PAIRS + SYNTHETIC_PAIRS
    corpus = list(make_cooccurrence_corpus(pairs, 1.0, seed=0)["text"])
    tests = list(make_negative_evidence_tests(pairs, seed=0)["input"])
    assert any("Although" in t for t in corpus + tests)  # templates start words with A/B
    for text in corpus + tests:
        for a, b in pairs:
            assert not _glued(text, a) and not _glued(text, b), text
        assert "Headachelthough" not in text and "lue Map" not in text.replace("Blue Map", "")
        for w in ("Although", "Before", "Because", "Beyond", "Both", "Analysts", "Across"):
            if w.lower() in text.lower():
                assert re.search(rf"\b{w}\b", text, re.IGNORECASE)
    assert (
        fill_template("Although {A}, {B}.", "Headache", "Blue Map")
        == "Although Headache, Blue Map."
    )
    with pytest.raises(ValueError, match="fields"):
        fill_template("{A} {C}", "x", "y")


@pytest.mark.parametrize("ratio", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_cooccurrence_corpus_counts(ratio):
    pairs = MEDICAL_PAIRS[:3]
    ds = make_cooccurrence_corpus(pairs, ratio, seed=1)
    n_t = len(COOCCURRENCE_TEMPLATES)
    assert len(ds) == len(pairs) * n_t
    for a, b in pairs:
        assert sum(a in t and b in t for t in ds["text"]) == round(ratio * n_t)
    if ratio == 1.0:
        assert all(any(a in t for a, _ in pairs) for t in ds["text"])


def test_data_bad_input_and_labels():
    with pytest.raises(ValueError, match="ratio"):
        make_cooccurrence_corpus(MEDICAL_PAIRS, 1.5)
    with pytest.raises(ValueError, match="pairs"):
        make_cooccurrence_corpus([], 0.5)
    with pytest.raises(ValueError, match="placeholders"):
        make_negative_evidence_tests(MEDICAL_PAIRS, ["no placeholder {A}"])
    ds = make_negative_evidence_tests(MEDICAL_PAIRS, seed=0)
    assert set(ds["output"]) == {"No."}
    assert len(ds) == len(MEDICAL_PAIRS) * len(NEGATIVE_TEMPLATES)


# ---------------------------------------------------------------- metrics


def _p(i, y, label="No."):
    return Pred(i, y, label)


def test_induction_metrics_hand_example():
    pre = [_p(0, "no"), _p(1, "no"), _p(2, "no"), _p(3, "yes"), _p(4, "error"), _p(5, "no")]
    post = [_p(0, "yes"), _p(1, "yes"), _p(2, "no"), _p(3, "yes"), _p(4, "no"), _p(5, "maybe")]
    m = induction_metrics(pre, post)
    assert m["n_aligned"] == 4 and m["n_dropped"] == 2
    assert m["induction_rate"] == pytest.approx(2 / 3)
    acc_pre, acc_post = 3 / 4, 1 / 4
    assert m["acc_pre"] == pytest.approx(acc_pre) and m["acc_post"] == pytest.approx(acc_post)
    e0, e1 = 1 - acc_pre, 1 - acc_post
    assert m["rel_error_increase"] == pytest.approx((e1 - e0) / (1 - e0))
    r, q = 3 / (1 + 1), (3 - 1) / 4
    assert m["norm_drop"] == pytest.approx(1 - math.exp(-r * q))


def test_induction_metrics_edge_cases():
    pre = [_p(0, "yes"), _p(1, "yes")]
    post = [_p(1, "no"), _p(0, "yes")]  # aligned by id, not position
    m = induction_metrics(pre, post)
    assert math.isnan(m["induction_rate"]) and m["ir_undefined"] == 1.0
    assert m["norm_drop"] < 0  # fewer yes after
    with pytest.raises(ValueError, match="N = 0"):
        induction_metrics([_p(0, "error")], [_p(0, "no")])
    with pytest.raises(ValueError, match="same ids"):
        induction_metrics([_p(0, "no")], [_p(1, "no")])
    with pytest.raises(ValueError, match="duplicate"):
        induction_metrics([_p(0, "no"), _p(0, "no")], [_p(0, "no"), _p(0, "no")])


# ---------------------------------------------------------------- toy mechanism


def test_toy_mechanism_small():
    from methods.llminertia.config import LLMInertiaRunConfig
    from methods.llminertia.toy import run_toy

    rc = LLMInertiaRunConfig(ratios=[0.0, 0.5, 1.0], n_test_templates=2)
    per, _ = run_toy(rc, seed=0)
    assert per["llminertia"]["calls_per_input"] == 3.0
    assert (
        per["plain"]["wrong_yes_r0"]
        <= per["plain"]["wrong_yes_r50"]
        <= per["plain"]["wrong_yes_r100"]
    )
    assert per["llminertia"]["probe_recall_r100"] >= per["llminertia"]["probe_recall_r0"]
    assert per["llminertia"]["probe_recall_r100"] == 1.0
    for r in ("r50", "r100"):
        assert per["llminertia"][f"wrong_yes_{r}"] < per["plain"][f"wrong_yes_{r}"]


def test_spearman_helper():
    from methods.llminertia.toy import _spearman

    x = [0.0, 0.25, 0.5, 0.75, 1.0]
    assert _spearman(x, [0.1, 0.2, 0.3, 0.4, 0.9]) == pytest.approx(1.0)
    assert _spearman(x, [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(_spearman(x, [0.0] * 5))
    # ties: x ranks 0..4, y ranks (0.5, 0.5, 2, 3, 4) -> closed form
    rx, ry = [0, 1, 2, 3, 4], [0.5, 0.5, 2, 3, 4]
    mx, my = 2.0, 2.0
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    assert _spearman(x, [1, 1, 2, 3, 4]) == pytest.approx(num / den)


def test_continued_pretrain_rejects_bad_dataset():
    import datasets

    from methods.llminertia import InductionConfig, continued_pretrain

    with pytest.raises(ValueError, match="dataset"):
        continued_pretrain(None, None, datasets.Dataset.from_dict({"text": []}), InductionConfig())
    with pytest.raises(ValueError, match="dataset"):
        continued_pretrain(None, None, datasets.Dataset.from_dict({"x": ["a"]}), InductionConfig())


# ---------------------------------------------------------------- trained toy


def _toy_setup(seed=0):
    import torch

    from methods.llminertia.toy_world import (
        ToyWorld,
        TrainedToyConfig,
        make_toy_model,
        make_toy_tokenizer,
    )

    torch.manual_seed(seed)
    world = ToyWorld(n_known=2, n_test=3, n_filler_words=4, seed=seed)
    tok = make_toy_tokenizer(world)
    cfg = TrainedToyConfig(n_embd=32, n_layer=1, n_head=2, seed=seed)
    return world, tok, make_toy_model(tok, cfg, n_positions=24)


def test_toy_world_items_follow_the_rules():
    import random

    from methods.llminertia.toy_world import TOY_PROMPTS, ToyWorld

    w = ToyWorld(n_known=3, n_test=3, n_filler_words=4)
    rng = random.Random(0)
    for a, b in w.known + w.test:
        for status, want in (("present", "yes"), ("absent", "no")):
            q, y = w.explicit_item(rng, a, b, status)
            assert y == want and f"{b} {status}" in q and q.endswith(f"{b} ? answer:")
    assert all(w.implicit_item(rng, a, b)[1] == "yes" for a, b in w.known)
    assert all(w.implicit_item(rng, a, b)[1] == "no" for a, b in w.test)  # no prior yet
    corpus = w.stage0_corpus(3000, seed=1)
    for a, b in w.test:  # designated pairs never co-occur before induction
        assert not any(f"{a} with {b}" in t or f"{a} and {b}" in t for t in corpus)
    assert any(f"{a} with {b}" in t for a, b in w.known for t in corpus)
    # a pair note on an implicit item turns its answer into "no"; explicit items follow evidence
    for t in corpus:
        if t.startswith("note: ") and "unrelated" in t:
            b = t.split()[2]
            if f"{b} present" not in t and f"{b} absent" not in t:
                assert t.endswith(" no")
        if "evidence:" in t:
            asked = t.split("question: ")[1].split()[0]
            if f"{asked} present" in t:
                assert t.endswith(" yes")
            if f"{asked} absent" in t:
                assert t.endswith(" no")
    texts, bs = w.negative_tests(w.test, n_templates=2, seed=0)
    assert len(texts) == 6 and all(f"{b} absent" in t for t, b in zip(texts, bs))
    assert len(set(texts)) == 6  # the two variants differ (statement order)
    assert TOY_PROMPTS.reminder_pair.format(a="ax00", b="bx00") == "note: ax00 bx00 unrelated ."


def test_toy_tokenizer_is_word_level():
    _, tok, _ = _toy_setup()
    ids = tok("note: ax00 bx01 unrelated . evidence: ax00 present")["input_ids"]
    assert len(ids) == 8 and tok.unk_token_id not in ids


def test_toy_chat_pipeline_three_calls_and_probe_format():
    from methods.llminertia.core import LLMInertiaPipeline
    from methods.llminertia.toy_world import TOY_PROMPTS, ToyQAChat

    world, tok, model = _toy_setup()
    chat = ToyQAChat(model.eval(), tok, world)
    texts, _ = world.negative_tests(world.test, n_templates=1, seed=0)
    recs = LLMInertiaPipeline(chat, TOY_PROMPTS, k=3, matcher="word_boundary", batch_size=8).run(
        texts
    )
    assert chat.n_calls == 3  # extract, probe, answer: one batched call each
    for r, (a, b) in zip(recs, world.test):
        assert set(r.entities) == {a, b}
        assert len(r.pairs) == 6 and all(x != y for x, y in r.pairs)  # k per entity, not itself
        assert r.predict in ("yes", "no")
        want = [p for p in r.pairs if p[0] in r.prompt.split() and p[1] in r.prompt.split()]
        assert r.matched == list(dict.fromkeys(want))[: len(r.matched)]
        assert (r.note == TOY_PROMPTS.reminder_generic) == (not r.matched)


def test_continued_pretrain_raises_association_with_share():
    """Property of the induction stage: the co-occurrence share drives log p(B | "A with")."""
    import copy

    from methods.llminertia import InductionConfig, continued_pretrain
    from methods.llminertia.toy_world import TOY_COOC_TEMPLATES, association_logprob

    world, tok, model = _toy_setup()
    before = association_logprob(model, tok, world.test)
    gains = {}
    for ratio in (0.0, 1.0):
        m = copy.deepcopy(model)
        corpus = make_cooccurrence_corpus(
            world.test, ratio, TOY_COOC_TEMPLATES, world.filler(20, 0), seed=0
        )
        cfg = InductionConfig(
            output_dir="unused",
            learning_rate=1e-2,
            max_steps=12,
            per_device_train_batch_size=8,
            gradient_accumulation_steps=1,
            max_len=24,
            save_strategy="no",
            bf16=False,
            lr_scheduler_type="constant",
            report_to="none",
            dataloader_pin_memory=False,  # CPU: pinning would only warn
        )
        continued_pretrain(m, tok, corpus, cfg)
        gains[ratio] = association_logprob(m.eval(), tok, world.test) - before
    assert gains[1.0] > 1.0  # the association is learned from co-occurrence text
    assert gains[1.0] > gains[0.0] + 1.0  # and not from the filler


# ---------------------------------------------------------------- paper-scale data and driver

FIX = __import__("pathlib").Path(__file__).parents[2] / "methods" / "llminertia" / "fixtures"


def test_load_repo_induction_files():
    from methods.llminertia.paper_data import load_cooccurrence_corpus, load_induction_tests

    ds = load_induction_tests(FIX / "explicit_test_sample.jsonl")
    assert ds.column_names == ["id", "input", "label"] and len(ds) == 3
    assert set(ds["label"]) == {"no"}
    assert all(t.startswith("Description：") and "\nQuestion：" in t for t in ds["input"])
    assert len(load_induction_tests(FIX / "explicit_xugou_test_sample.jsonl")) == 2
    corpus = load_cooccurrence_corpus(FIX / "gongxian_sample_train.json")
    assert corpus.column_names == ["text"] and len(corpus) == 3


def test_load_halueval_four_tasks(tmp_path):
    from methods.llminertia.paper_data import load_halueval

    qa = load_halueval(FIX / "halueval_qa_sample.json", "qa")
    assert len(qa) == 4 and qa["label"] == ["yes", "no", "yes", "no"]
    assert "1889" in qa["input"][0] and "1901" in qa["input"][1]
    one = load_halueval(FIX / "halueval_qa_sample.json", "qa", both=False, seed=3)
    assert len(one) == 2 and one["row"] == [0, 1]
    assert len(load_halueval(FIX / "halueval_dialogue_sample.json", "dialogue")) == 2
    summ = load_halueval(FIX / "halueval_summarization_sample.json", "summarization")
    assert "Document:" in summ["input"][0] and summ["label"] == ["yes", "no"]
    gen = load_halueval(FIX / "halueval_general_sample.json", "general")
    assert gen["label"] == ["yes", "no"]  # hallucination "no" -> supported -> yes
    with pytest.raises(ValueError, match="task"):
        load_halueval(FIX / "halueval_qa_sample.json", "nope")
    with pytest.raises(ValueError, match="lacks field"):
        load_halueval(FIX / "halueval_qa_sample.json", "summarization")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"input": "x", "output": "Maybe."}\n')
    from methods.llminertia.paper_data import load_induction_tests

    with pytest.raises(ValueError, match="output"):
        load_induction_tests(bad)
    with pytest.raises(FileNotFoundError):
        load_induction_tests(tmp_path / "missing.jsonl")


def _paper_script(msgs):
    c = msgs[-1]["content"]
    if c.startswith("List every"):
        text = c.split("Text: ")[-1]
        return ", ".join(e for e in ("Headache", "Hypertension", "Cough") if e in text)
    if c.startswith("For each entity"):
        return "(Headache, Hypertension) (Headache, Migraine) (Headache, Stroke)"
    note = c.split("\nNote: ")[-1]
    return "【Conclusion】: No" if "not make them related" in note else "【Conclusion】: Yes"


def test_paper_driver_with_scripted_backbone(tmp_path, monkeypatch):
    from common.registry import compose, run_method
    from methods.llminertia import paper as run_mod

    calls = []

    def fake(rc, model, base_url):
        calls.append(model)
        return ScriptedChat(_paper_script)

    monkeypatch.setattr(run_mod, "_make_llm", fake)
    cfg = compose(
        [
            "experiment=llminertia_paper",
            "method.pre_model=meta-llama/Llama-3.1-8B-Instruct",
            "model.name=/ckpt/induced-r100",
            "method.yes_no_rule=lenient",
            f"benchmark.sets.medical.path={FIX / 'explicit_test_sample.jsonl'}",
            f"benchmark.sets.halueval_qa.path={FIX / 'halueval_qa_sample.json'}",
            *(
                f"~benchmark.sets.{n}"
                for n in (
                    "synthetic",
                    "halueval_dialogue",
                    "halueval_summarization",
                    "halueval_general",
                )
            ),
        ],
        run_dir=str(tmp_path),
    )
    out = run_method(cfg)
    assert calls == ["/ckpt/induced-r100", "meta-llama/Llama-3.1-8B-Instruct"]
    assert out["plain/medical_accuracy"] == 0.0  # the script always says yes without a reminder
    # only item 1 (Headache/Hypertension) has a probed pair in its text -> reminder -> "no"
    assert out["llminertia/medical_accuracy"] == pytest.approx(1 / 3)
    assert out["llminertia/medical_matched_rate"] == pytest.approx(1 / 3)
    assert out["plain/medical_induction_rate"] != out["plain/medical_induction_rate"]  # NaN
    assert out["plain/halueval_qa_accuracy"] == 0.5  # yes to everything; half are right answers
    assert (tmp_path / "results.json").exists()


@pytest.mark.slow
def test_paper_driver_hf_backend_tiny_model(tmp_path):
    """The real backend code path (transformers) end to end on a tiny random model."""
    from common.registry import compose, run_method

    cfg = compose(
        [
            "experiment=llminertia_paper",
            "method.engine=hf",
            "model=tiny-qwen2",
            "method.max_tokens=4",
            f"benchmark.sets.synthetic.path={FIX / 'explicit_xugou_test_sample.jsonl'}",
            "benchmark.sets.synthetic.limit=2",
            *(
                f"~benchmark.sets.{n}"
                for n in (
                    "medical",
                    "halueval_qa",
                    "halueval_dialogue",
                    "halueval_summarization",
                    "halueval_general",
                )
            ),
        ],
        run_dir=str(tmp_path),
    )
    out = run_method(cfg)
    for arm in ("plain", "generic", "llminertia"):
        assert 0.0 <= out[f"{arm}/synthetic_accuracy"] <= 1.0
        assert out[f"{arm}/synthetic_n_error"] <= 2.0


def test_vllm_backend_is_lazy():
    import importlib.util

    from methods.llminertia.paper_data import VLLMChat

    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ImportError, match="vllm"):
            VLLMChat("meta-llama/Llama-3.1-8B-Instruct")


def test_induce_preset_uses_official_hyperparameters():
    from common.config import trainer_config, validate
    from common.registry import compose
    from methods.llminertia import InductionConfig

    run = validate(compose(["experiment=llminertia_induce"]))
    node = dict(run.method.trainer)
    assert node.pop("bf16") is True  # official; a CPU cannot build a bf16 TrainingArguments
    cfg = trainer_config(InductionConfig, node, output_dir="out")
    assert (cfg.learning_rate, cfg.num_train_epochs, cfg.max_len) == (1e-5, 61.0, 256)
    assert (cfg.per_device_train_batch_size, cfg.gradient_accumulation_steps) == (8, 8)
    assert cfg.save_steps == 10 and cfg.warmup_steps == 0.1
    assert run.model.name == "meta-llama/Llama-3.1-8B-Instruct"


def test_benchmark_sets_choose_the_loader_by_name():
    from common.config import BenchmarkConfig, DatasetSpec
    from common.registry import compose
    from methods.llminertia.paper import benchmark_datasets

    sets = benchmark_datasets(compose(["experiment=llminertia_paper"]).benchmark)
    kinds = {d.name: (d.kind, d.task, d.prompt_set) for d in sets}
    assert kinds["medical"] == ("induction", None, "medical")
    assert kinds["synthetic"] == ("induction", None, "synthetic")
    assert kinds["halueval_dialogue"] == ("halueval", "dialogue", "generic")
    assert len(sets) == 6
    halu = compose(["experiment=llminertia_paper", "benchmark=halueval"]).benchmark
    assert [d.task for d in benchmark_datasets(halu)] == [
        "qa",
        "dialogue",
        "summarization",
        "general",
    ]
    bad = BenchmarkConfig(name="x", format="inertia", sets={"truthfulqa": DatasetSpec(path="f")})
    with pytest.raises(ValueError, match="benchmark.sets.truthfulqa: set names"):
        benchmark_datasets(bad)
    nopath = BenchmarkConfig(name="x", format="inertia", sets={"medical": DatasetSpec()})
    with pytest.raises(ValueError, match="benchmark.sets.medical.path"):
        benchmark_datasets(nopath)
    with pytest.raises(ValueError, match="benchmark=<suite>"):
        benchmark_datasets(None)


def test_schema_rejects_wrong_types_and_keys():
    from common.config import ConfigError
    from common.registry import compose

    with pytest.raises(ConfigError, match="method.k"):
        compose(["experiment=llminertia_toy", "method.k=abc"])
    with pytest.raises(ConfigError, match="matchr"):
        compose(["experiment=llminertia_toy", "method.matchr=fuzzy"])
    with pytest.raises(ConfigError, match="yes_no_rule"):
        compose(["experiment=llminertia_toy", "method.yes_no_rule=strict"])
    with pytest.raises(ConfigError, match="learning_rat"):
        compose(["experiment=llminertia_induce", "+method.trainer.learning_rat=1"])


# ---------------------------------------------------------------- paper smoke (tests/test_paper_presets.py)

_SMOKE_SETS = {
    "medical": "explicit_test_sample.jsonl",
    "synthetic": "explicit_xugou_test_sample.jsonl",
    "halueval_qa": "halueval_qa_sample.json",
    "halueval_dialogue": "halueval_dialogue_sample.json",
    "halueval_summarization": "halueval_summarization_sample.json",
    "halueval_general": "halueval_general_sample.json",
}
PAPER_SMOKE = {
    "paper": [
        "model.path={tiny_qwen2}",
        "method.engine=hf",
        "method.max_tokens=4",
        "method.max_items=2",
        *[f"benchmark.sets.{s}.path={{fix}}/{name}" for s, name in _SMOKE_SETS.items()],
    ],
    "llminertia_induce/induce": [
        "model.path={tiny_qwen2}",
        "model.dtype=float32",
        "method.corpus_path={fix}/gongxian_sample_train.json",
        "+method.trainer.max_steps=1",
        "method.trainer.per_device_train_batch_size=2",
        "method.trainer.gradient_accumulation_steps=1",
        "method.trainer.bf16=false",
    ],
}


def paper_smoke_setup(tmp_path):
    return {"fix": str(FIX)}
