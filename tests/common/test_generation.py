"""Tests for common.generation: log-probs pinned to a teacher-forced forward pass."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch

from common.generation import (
    Completion,
    Generator,
    HFGenerator,
    SamplingParams,
    VLLMGenerator,
    render_prompts,
)
from common.tiny import tiny_causal_lm

PROMPTS = ["hello world", "the cat sat on the", "1+1="]


@pytest.fixture(scope="module")
def model_tok(tiny_tok):
    # Our own model (one test edits its generation_config), sharing the session tokenizer.
    model, tok = tiny_causal_lm(arch="qwen2", seed=0, tokenizer=tiny_tok)
    model.eval()
    return model, tok


def _teacher_forced_logits(model, tok, prompt_text: str, gen_ids: list[int]) -> torch.Tensor:
    """Logits predicting each generated token, from one unpadded forward pass. (T, V)"""
    p_ids = tok(prompt_text)["input_ids"]  # plain prompts get the tokenizer's special tokens
    ids = torch.tensor([p_ids + gen_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # (L, V)
    return logits[len(p_ids) - 1 : len(p_ids) - 1 + len(gen_ids)]


def test_logprobs_equal_teacher_forced_forward_at_temperature_one(model_tok):
    model, tok = model_tok
    gen = HFGenerator(model, tok, batch_size=4)  # 2 prompts per call: exercises left padding
    params = SamplingParams(max_new_tokens=12, temperature=1.0, seed=0)
    outs = gen.generate(PROMPTS, n=2, params=params)
    assert len(outs) == len(PROMPTS) and all(len(o) == 2 for o in outs)
    for prompt, samples in zip(PROMPTS, outs):
        for c in samples:
            assert isinstance(c, Completion)
            assert len(c.token_ids) == len(c.logprobs) >= 1
            ref = torch.log_softmax(_teacher_forced_logits(model, tok, prompt, c.token_ids), -1)
            ref_lp = ref.gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref_lp, atol=1e-4, rtol=0)
            assert c.sum_logprob == pytest.approx(float(ref_lp.sum()), abs=1e-3)


def test_logprobs_are_of_the_warped_distribution_with_temperature_and_top_k(model_tok):
    model, tok = model_tok
    temp, k = 0.7, 5
    gen = HFGenerator(model, tok)
    params = SamplingParams(max_new_tokens=10, temperature=temp, top_k=k, seed=1)
    outs = gen.generate(PROMPTS[:2], n=3, params=params)
    for prompt, samples in zip(PROMPTS, outs):
        for c in samples:
            logits = _teacher_forced_logits(model, tok, prompt, c.token_ids) / temp
            kth = logits.topk(k, dim=-1).values[:, -1:]
            warped = logits.masked_fill(logits < kth, float("-inf"))
            ref = torch.log_softmax(warped, -1)
            ref_lp = ref.gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
            assert torch.isfinite(ref_lp).all(), "a sampled token fell outside the top-k set"
            torch.testing.assert_close(torch.tensor(c.logprobs), ref_lp, atol=1e-4, rtol=0)
            # The untruncated model log-prob differs: the reported one is not the raw model's.
            raw = torch.log_softmax(logits * temp, -1).gather(
                -1, torch.tensor(c.token_ids)[:, None]
            )
            assert not torch.allclose(raw.squeeze(-1), ref_lp, atol=1e-3)


def test_greedy_picks_argmax_and_reports_model_logprobs(model_tok):
    model, tok = model_tok
    gen = HFGenerator(model, tok)
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    ((c,),) = gen.generate([PROMPTS[0]], n=1, params=params)
    logits = _teacher_forced_logits(model, tok, PROMPTS[0], c.token_ids)
    assert c.token_ids == logits.argmax(-1).tolist()
    ref = torch.log_softmax(logits, -1).max(-1).values
    torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_seed_makes_sampling_reproducible_and_n_samples_differ(model_tok):
    model, tok = model_tok
    gen = HFGenerator(model, tok)
    params = SamplingParams(max_new_tokens=10, seed=123)
    a = gen.generate(PROMPTS, n=4, params=params)
    b = gen.generate(PROMPTS, n=4, params=params)
    assert [[c.token_ids for c in s] for s in a] == [[c.token_ids for c in s] for s in b]
    assert len({tuple(c.token_ids) for c in a[0]}) > 1  # random-init model: samples differ


def test_stops_at_eos_and_strips_padding(model_tok):
    model, tok = model_tok
    gen = HFGenerator(model, tok)
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    ((first,),) = gen.generate([PROMPTS[1]], params=greedy)
    stop_tok = first.token_ids[2]  # make the third greedy token an eos
    old = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = [tok.eos_token_id, stop_tok]
    try:
        outs = gen.generate([PROMPTS[1], PROMPTS[0]], params=greedy)
    finally:
        model.generation_config.eos_token_id = old
    c = outs[0][0]
    assert c.finish_reason == "stop"
    assert c.token_ids == first.token_ids[: first.token_ids.index(stop_tok) + 1]
    assert len(c.logprobs) == len(c.token_ids)
    assert first.finish_reason == "length" or tok.eos_token_id in first.token_ids


def test_chat_prompts_use_the_chat_template(model_tok):
    model, tok = model_tok
    gen = HFGenerator(model, tok)
    msgs = [{"role": "user", "content": "hi there"}]
    rendered = render_prompts(tok, [msgs])[0]
    assert "hi there" in rendered and rendered != "hi there"
    greedy = SamplingParams(max_new_tokens=5, temperature=0.0)
    a = gen.generate([msgs], params=greedy)[0][0]
    b = gen.generate([rendered], params=greedy)[0][0]
    assert a.token_ids == b.token_ids


def test_protocol_and_bad_input(model_tok):
    model, tok = model_tok
    gen = HFGenerator(model, tok)
    assert isinstance(gen, Generator)
    with pytest.raises(TypeError, match="prompts"):
        gen.generate("a bare string")
    with pytest.raises(ValueError, match="n must be"):
        gen.generate(["x"], n=0)
    with pytest.raises(ValueError, match="role"):
        gen.generate([[{"content": "no role"}]])
    with pytest.raises(TypeError, match=r"prompts\[0\]"):
        gen.generate([123])
    assert gen.generate([]) == []
    for bad in (
        dict(max_new_tokens=0),
        dict(temperature=-0.1),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(top_k=-1),
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingParams(**bad)
    with pytest.raises(ValueError, match="batch_size"):
        HFGenerator(model, tok, batch_size=0)
    with pytest.raises(TypeError, match="generate"):
        HFGenerator(object(), tok)


def test_chat_prompt_without_template_is_a_clear_error(model_tok):
    _, tok = model_tok

    class NoTemplate:
        chat_template = None

    with pytest.raises(ValueError, match="chat_template"):
        render_prompts(NoTemplate(), [[{"role": "user", "content": "x"}]])
    assert render_prompts(tok, ["plain"]) == ["plain"]


def test_vllm_generator_names_the_extra_when_vllm_is_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(ImportError, match=r"icml26\[vllm\]"):
        VLLMGenerator("some/model")
