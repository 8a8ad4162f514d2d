import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from common.models import ModelNotAvailableError, load_model, load_tokenizer, resolve_dtype
from common.tiny import EOS_TOKEN, PAD_TOKEN, save_tiny, tiny_causal_lm, tiny_tokenizer

TEXT = "What is 12 + 30?  The  answer\n is 42. café"


def test_tokenizer_specials_and_left_padding(tiny_tok):
    assert tiny_tok.pad_token == PAD_TOKEN and tiny_tok.eos_token == EOS_TOKEN
    assert tiny_tok.pad_token_id != tiny_tok.eos_token_id
    batch = tiny_tok(["hi", "What is 1 + 1?"], padding=True)
    first = batch["input_ids"][0]
    assert first[0] == tiny_tok.pad_token_id and first[-1] != tiny_tok.pad_token_id
    # Byte-level: any text round-trips.
    assert tiny_tok.decode(tiny_tok(TEXT)["input_ids"]) == TEXT


def test_chat_template_ends_with_generation_prompt(tiny_tok):
    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    text = tiny_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n") and "What is 2 + 3?<|im_end|>" in text


@pytest.mark.parametrize("arch", ["qwen2", "llama", "qwen3"])
def test_save_and_reload_identically(arch, tmp_path, tiny_tok):
    model, tok = tiny_causal_lm(arch, seed=3, tokenizer=tiny_tok)
    save_tiny(model, tok, tmp_path)
    model2 = AutoModelForCausalLM.from_pretrained(tmp_path)
    tok2 = AutoTokenizer.from_pretrained(tmp_path)
    assert tok2(TEXT)["input_ids"] == tok(TEXT)["input_ids"]
    assert (tok2.pad_token_id, tok2.eos_token_id, tok2.padding_side) == (
        tok.pad_token_id,
        tok.eos_token_id,
        "left",
    )
    ids = torch.tensor([tok(TEXT)["input_ids"]])
    torch.testing.assert_close(model(ids).logits, model2(ids).logits, atol=0, rtol=0)
    # Through the project's own loader too (a local path).
    torch.testing.assert_close(
        load_model(str(tmp_path), device="cpu")(ids).logits, model(ids).logits
    )
    assert load_tokenizer(str(tmp_path))(TEXT)["input_ids"] == tok(TEXT)["input_ids"]


def test_seed_controls_weights(tiny_tok):
    a, _ = tiny_causal_lm(seed=1, tokenizer=tiny_tok)
    b, _ = tiny_causal_lm(seed=1, tokenizer=tiny_tok)
    c, _ = tiny_causal_lm(seed=2, tokenizer=tiny_tok)
    wa, wb, wc = (m.model.embed_tokens.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_bad_sizes_and_arch():
    with pytest.raises(ValueError, match="arch"):
        tiny_causal_lm("gpt9")
    with pytest.raises(ValueError, match="num_attention_heads"):
        tiny_causal_lm(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match="vocab_size"):
        tiny_tokenizer(vocab_size=100)


def test_tiny_llava_forward_and_generate(tiny_llava_model):
    from PIL import Image

    model, processor = tiny_llava_model
    img = Image.fromarray((np.random.default_rng(0).random((40, 40, 3)) * 255).astype("uint8"))
    inputs = processor(images=[img], text=["<image> describe the photo"], return_tensors="pt")
    n_image_tokens = int((inputs["input_ids"] == model.config.image_token_id).sum())
    assert n_image_tokens == 16  # (32 / 8) ** 2 patches
    logits = model(**inputs).logits
    assert logits.shape[:2] == inputs["input_ids"].shape
    out = model.generate(**inputs, max_new_tokens=4, do_sample=False)
    assert (
        out.shape[1] == inputs["input_ids"].shape[1] + 4
        or out[0, -1] == processor.tokenizer.eos_token_id
    )


def test_tiny_llava_chat_template_takes_content_parts(tiny_llava_model):
    _, processor = tiny_llava_model
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": " describe"}]}]
    text = processor.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\n<image> describe<|im_end|>\n<|im_start|>assistant\n"
    plain = [{"role": "user", "content": "hi"}]
    assert processor.apply_chat_template(plain, tokenize=False).startswith("<|im_start|>user\nhi")


def test_load_model_tiny_specs():
    m = load_model("tiny-llama", device="cpu", seed=5)
    assert type(m).__name__ == "LlamaForCausalLM" and m.dtype == torch.float32
    assert load_tokenizer("tiny-qwen2").pad_token == PAD_TOKEN
    with pytest.raises(ValueError, match="tiny-qwen2"):
        load_model("tiny-gpt9")


def test_hub_id_offline_gives_actionable_error(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # empty cache
    with pytest.raises(ModelNotAvailableError, match="Provide the weights"):
        load_model("no-such-org/no-such-model-xyz", device="cpu")
    with pytest.raises(ModelNotAvailableError, match="local path"):
        load_tokenizer("no-such-org/no-such-model-xyz")


def test_dtype_resolution():
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("fp8", torch.device("cpu"))


def test_induction_batch_targets_follow_the_first_occurrence():
    """Query i's target is the context token right after the first occurrence of query i."""
    from common.tiny import induction_batch

    ids, targets = induction_batch(np.random.default_rng(3), 4, 12, 5, 9)  # few ids: repeats
    assert ids.shape == (4, 23) and targets.shape == (4, 11)
    assert int(ids.min()) >= 5 and int(ids.max()) < 9
    for b in range(4):
        ctx, queries = ids[b, :12].tolist(), ids[b, 12:].tolist()
        assert sorted(queries) == sorted(
            ctx[:11]
        )  # every context slot but the last is queried once
        for q, t in zip(queries, targets[b].tolist(), strict=True):
            j = ctx.index(q)  # first occurrence
            assert j < 11 and t == ctx[j + 1]
    with pytest.raises(ValueError, match="n_ctx"):
        induction_batch(np.random.default_rng(0), 2, 1, 5, 9)


def test_induction_warmup_updates_the_model_and_checks_its_range():
    from common.tiny import induction_warmup

    model, tok = tiny_causal_lm("llama", hidden_size=32, intermediate_size=64, seed=0)
    before = model.get_input_embeddings().weight.detach().clone()
    stats = induction_warmup(model, 4, len(tok), steps=2, batch=2, n_ctx=8)
    assert set(stats) == {"induction_loss", "induction_acc"} and 0.0 <= stats["induction_acc"] <= 1
    assert not model.training
    assert not torch.equal(before, model.get_input_embeddings().weight)
    with pytest.raises(ValueError, match="vocab size"):
        induction_warmup(model, 0, len(tok) + 1, steps=1)
    with pytest.raises(ValueError, match="steps"):
        induction_warmup(model, 0, 10, steps=-1)


def test_induction_warmup_is_adamw_on_the_query_positions():
    """Same parameters and EMA statistics as the recipe written out by hand: AdamW (betas 0.9,
    0.98), cross-entropy on the ``n_ctx - 1`` query positions only, gradient clipping at 1.0."""
    from common.tiny import induction_batch, induction_warmup

    kw = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, vocab_size=30, seed=1)
    model, _ = tiny_causal_lm("llama", **kw, record=False)
    ref, _ = tiny_causal_lm("llama", **kw, record=False)
    stats = induction_warmup(model, 2, 30, steps=3, batch=4, n_ctx=6, lr=1e-2, seed=5)
    rng = np.random.default_rng(5)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, betas=(0.9, 0.98))
    loss_ema, acc_ema = 0.0, 0.0
    for step in range(3):
        ids, targets = induction_batch(rng, 4, 6, 2, 30)
        logits = ref(input_ids=ids).logits[:, 6:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 30), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        opt.step()
        loss_ema = loss.item() if step == 0 else 0.9 * loss_ema + 0.1 * loss.item()
        acc_ema = 0.9 * acc_ema + 0.1 * float((logits.argmax(-1) == targets).float().mean())
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        assert torch.equal(p, q), name
    assert stats == {"induction_loss": loss_ema, "induction_acc": acc_ema}


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_fork_rng_restores_or_continues_from_the_seeded_init(arch):
    """fork_rng=True leaves the caller's stream untouched; False leaves it where
    ``torch.manual_seed(seed)`` + building the model by hand leaves it (the toys' old way)."""
    kw = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, vocab_size=24, seed=7)
    torch.manual_seed(99)
    before = torch.get_rng_state()
    forked, _ = tiny_causal_lm(arch, **kw, record=False)
    assert torch.equal(torch.get_rng_state(), before)
    torch.manual_seed(99)
    cont, _ = tiny_causal_lm(arch, **kw, fork_rng=False, record=False)
    after = torch.get_rng_state()
    assert not torch.equal(after, before)
    torch.manual_seed(7)
    by_hand = type(cont)(cont.config)
    assert torch.equal(torch.get_rng_state(), after)
    for (name, p), q, r in zip(
        by_hand.named_parameters(), cont.parameters(), forked.parameters(), strict=True
    ):
        assert torch.equal(p, q) and torch.equal(p, r), name


def test_vocab_size_without_or_beyond_the_tokenizer(tiny_tok):
    model, tok = tiny_causal_lm("llama", vocab_size=37, record=False)
    assert tok is None and model.get_input_embeddings().num_embeddings == 37
    assert model.config.pad_token_id is None  # no tokenizer: the config's own default ids
    wide, tok = tiny_causal_lm("qwen2", vocab_size=len(tiny_tok) + 5, tokenizer=tiny_tok)
    assert tok is tiny_tok and wide.get_output_embeddings().out_features == len(tiny_tok) + 5
    assert wide.config.pad_token_id == tiny_tok.pad_token_id
    with pytest.raises(ValueError, match="vocab_size"):
        tiny_causal_lm(vocab_size=len(tiny_tok) - 1, tokenizer=tiny_tok)


def test_mode_and_record_options(tiny_tok):
    from common.tracking import models_loaded, reset_models_loaded

    reset_models_loaded()
    model, _ = tiny_causal_lm("qwen3", tokenizer=tiny_tok, train=True, record=False)
    assert model.training and all(m.training for m in model.modules())
    assert models_loaded() == []
    model, _ = tiny_causal_lm("qwen3", tokenizer=tiny_tok, seed=4)
    assert not any(m.training for m in model.modules())
    assert models_loaded() == [
        {"spec": "tiny-qwen3 (in-process)", "hidden": "64", "layers": "2", "seed": "4"}
    ]
    reset_models_loaded()


def test_gpt_architectures_sizes_overrides_and_errors(tiny_tok):
    gpt2, _ = tiny_causal_lm(
        "gpt2", hidden_size=32, num_attention_heads=2, tokenizer=tiny_tok, resid_pdrop=0.0,
        bos_token_id=tiny_tok.eos_token_id, record=False,
    )  # fmt: skip
    c = gpt2.config
    assert (c.n_embd, c.n_head, c.n_layer, c.n_positions, c.resid_pdrop) == (32, 2, 2, 1024, 0.0)
    assert gpt2.transformer.h[0].mlp.c_fc.nf == 4 * 32  # GPT-2's own MLP width
    assert c.bos_token_id == tiny_tok.eos_token_id == gpt2.generation_config.bos_token_id
    assert gpt2.get_input_embeddings().num_embeddings == len(tiny_tok)
    neox, _ = tiny_causal_lm("gpt_neox", hidden_size=32, vocab_size=50, record=False)
    assert type(neox).__name__ == "GPTNeoXForCausalLM" and neox.config.intermediate_size == 128
    with pytest.raises(ValueError, match="num_key_value_heads"):
        tiny_causal_lm("gpt2", num_key_value_heads=2, vocab_size=50)


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "qwen2"])
def test_dropout_sets_every_dropout_field_and_keeps_the_weights(arch):
    """``dropout=`` sets each of the architecture's dropout probabilities (and no other config
    field); the weights equal a build with those fields given one by one; overrides still win."""
    from common.tiny import _DROPOUT_FIELDS

    fields = _DROPOUT_FIELDS[arch]
    m, _ = tiny_causal_lm(arch, hidden_size=32, vocab_size=40, dropout=0.25, record=False)
    ref, _ = tiny_causal_lm(
        arch, hidden_size=32, vocab_size=40, record=False, **dict.fromkeys(fields, 0.25)
    )
    default, _ = tiny_causal_lm(arch, hidden_size=32, vocab_size=40, record=False)
    assert all(getattr(m.config, f) == 0.25 for f in fields)
    assert m.config.to_dict() == ref.config.to_dict() != default.config.to_dict()
    assert all(
        torch.equal(a, b) for a, b in zip(m.state_dict().values(), ref.state_dict().values())
    )
    won, _ = tiny_causal_lm(
        arch, hidden_size=32, vocab_size=40, dropout=0.25, record=False, **{fields[0]: 0.5}
    )
    assert getattr(won.config, fields[0]) == 0.5
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="dropout"):
            tiny_causal_lm(arch, vocab_size=40, dropout=bad, record=False)
