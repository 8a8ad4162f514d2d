"""Every model in configs/model/ as it really loads (issue 42 point 3), without weights.

Three parts:

1. Config-only instances: each real checkpoint's ``config.json`` (tests/fixtures/models/<org>__<name>/,
   sources in that folder's README) is built on the meta device through
   :func:`common.models.init_empty_model`, the same class resolution :func:`common.models.load_model`
   uses, and checked for what the methods read (class, vocabulary × hidden size, layers, tying,
   parameter count against the model card).
2. Remote code: LLaDA and Dream stand-ins with the published signatures fail to load through plain
   ``from_pretrained`` under the installed transformers and load through ``load_model(...,
   kind="masked_diffusion")`` (common/model_compat.py).
3. Chat templates: each family's real template text renders, with the options our methods pass
   (docs/models.md), the roles and special tokens the methods rely on.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from common.config import REPO_ROOT

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "models"
REMOTE = FIXTURES / "remote_code"

# configs/model/<yaml> -> (fixture folder, load_model kind, class, published parameter count).
# Counts: the model cards (Qwen: "Number of Parameters"; Meta: the model name's size; pythia and
# ViT: their cards' totals; GPT-2 / RoBERTa: the papers' 124 M / 125 M).
CASES = {
    "llama2_7b": ("meta-llama__Llama-2-7b-hf", "causal_lm", "LlamaForCausalLM", 6.74e9),
    "llama3_1_8b": ("meta-llama__Llama-3.1-8B", "causal_lm", "LlamaForCausalLM", 8.03e9),
    "llama3_1_8b_instruct": (
        "meta-llama__Llama-3.1-8B-Instruct",
        "causal_lm",
        "LlamaForCausalLM",
        8.03e9,
    ),
    "llama3_2_3b": ("meta-llama__Llama-3.2-3B", "causal_lm", "LlamaForCausalLM", 3.21e9),
    "llama3_2_3b_instruct": (
        "meta-llama__Llama-3.2-3B-Instruct",
        "causal_lm",
        "LlamaForCausalLM",
        3.21e9,
    ),
    "mistral_7b_instruct_v0_3": (
        "mistralai__Mistral-7B-Instruct-v0.3",
        "causal_lm",
        "MistralForCausalLM",
        7.25e9,
    ),
    "qwen2_5_7b_instruct": ("Qwen__Qwen2.5-7B-Instruct", "causal_lm", "Qwen2ForCausalLM", 7.61e9),
    "qwen2_5_math_7b": ("Qwen__Qwen2.5-Math-7B", "causal_lm", "Qwen2ForCausalLM", 7.61e9),
    "qwen3_1p7b_base": ("Qwen__Qwen3-1.7B-Base", "causal_lm", "Qwen3ForCausalLM", 1.7e9),
    "qwen3_4b_base": ("Qwen__Qwen3-4B-Base", "causal_lm", "Qwen3ForCausalLM", 4.0e9),
    "qwen3_4b": ("Qwen__Qwen3-4B", "causal_lm", "Qwen3ForCausalLM", 4.0e9),
    "qwen3_8b": ("Qwen__Qwen3-8B", "causal_lm", "Qwen3ForCausalLM", 8.2e9),
    "qwen3_8b_base": ("Qwen__Qwen3-8B-Base", "causal_lm", "Qwen3ForCausalLM", 8.2e9),
    "webworld_8b": ("Qwen__WebWorld-8B", "causal_lm", "Qwen3ForCausalLM", 8.2e9),
    "smollm2_360m_instruct": (
        "HuggingFaceTB__SmolLM2-360M-Instruct",
        "causal_lm",
        "LlamaForCausalLM",
        3.62e8,
    ),
    "pythia_160m": ("EleutherAI__pythia-160m", "causal_lm", "GPTNeoXForCausalLM", 1.62e8),
    "gpt2": ("openai-community__gpt2", "causal_lm", "GPT2LMHeadModel", 1.24e8),
    "roberta_base": (
        "FacebookAI__roberta-base",
        "sequence_classification",
        "RobertaForSequenceClassification",
        1.25e8,
    ),
    "vit_b16_in21k": (
        "google__vit-base-patch16-224-in21k",
        "image_classification",
        "ViTForImageClassification",
        8.58e7,
    ),
    "llava_1_5_7b": (
        "llava-hf__llava-1.5-7b-hf",
        "vision_language",
        "LlavaForConditionalGeneration",
        7.06e9,
    ),
    "llava_1_5_13b": (
        "llava-hf__llava-1.5-13b-hf",
        "vision_language",
        "LlavaForConditionalGeneration",
        13.35e9,
    ),
    "qwen2_5_vl_7b_instruct": (
        "Qwen__Qwen2.5-VL-7B-Instruct",
        "vision_language",
        "Qwen2_5_VLForConditionalGeneration",
        8.29e9,
    ),
}
REMOTE_CASES = {
    "llada_8b_instruct": ("GSAI-ML__LLaDA-8B-Instruct", "llada_like"),
    "llada_1_5": ("GSAI-ML__LLaDA-1.5", "llada_like"),
    "dream_v0_base_7b": ("Dream-org__Dream-v0-Base-7B", "dream_like"),
}


def _model_yaml(stem: str) -> dict:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(REPO_ROOT / "configs" / "model" / f"{stem}.yaml"))


def _config(folder: str) -> dict:
    return json.loads((FIXTURES / folder / "config.json").read_text())


def test_every_model_config_has_a_case():
    """A new configs/model/*.yaml (other than the in-process tiny ones) needs a fixture and a case."""
    stems = {p.stem for p in (REPO_ROOT / "configs" / "model").glob("*.yaml")}
    real = {s for s in stems if not s.startswith("tiny-")}
    assert real == set(CASES) | set(REMOTE_CASES)
    for stem, (folder, *_rest) in {**CASES, **REMOTE_CASES}.items():
        assert _model_yaml(stem)["name"].replace("/", "__") in (folder, "gpt2"), stem
        assert (FIXTURES / folder / "config.json").is_file(), folder


def test_preset_kinds_match_the_checkpoints():
    """The yaml's ``kind`` is the one the case builds with (what ``load_model`` receives)."""
    for stem, (_folder, kind, *_rest) in CASES.items():
        assert _model_yaml(stem).get("kind", "causal_lm") == kind, stem
    for stem in REMOTE_CASES:
        assert _model_yaml(stem)["kind"] == "masked_diffusion", stem


def _text_fields(cfg: dict) -> tuple[int, int, int]:
    """(vocab, hidden, layers) from a config dict, whatever the family's field names."""
    text = cfg.get("text_config", cfg)
    hidden = text.get("hidden_size", text.get("n_embd"))
    layers = text.get("num_hidden_layers", text.get("n_layer"))
    return text.get("vocab_size", cfg.get("vocab_size")), hidden, layers


@pytest.mark.parametrize("stem", sorted(CASES))
def test_config_only_instance_matches_the_real_config(stem):
    from common.models import init_empty_model

    folder, kind, cls_name, n_params = CASES[stem]
    cfg = _config(folder)
    model = init_empty_model(str(FIXTURES / folder), kind=kind)
    assert type(model).__name__ == cls_name
    assert next(model.parameters()).device.type == "meta"  # no weights allocated
    total = sum(p.numel() for p in model.parameters())
    # ±3 %: a wrong hidden/intermediate size or layer count moves the total far more than that
    assert abs(total - n_params) / n_params < 0.03, (
        f"{stem}: {total:,} parameters vs {n_params:,.0f}"
    )
    if kind == "image_classification":
        assert model.config.hidden_size == cfg["hidden_size"] == 768
        assert model.config.image_size == 224 and model.config.patch_size == 16
        return
    vocab, hidden, layers = _text_fields(cfg)
    emb = model.get_input_embeddings().weight
    assert tuple(emb.shape) == (vocab, hidden)
    assert model.config.get_text_config().num_hidden_layers == layers
    if kind == "causal_lm":
        tied = model.get_output_embeddings().weight is emb
        assert tied == cfg.get("tie_word_embeddings", True)


def _remote_copy(tmp_path: Path, stand_in: str, config: dict | None = None) -> Path:
    """A temporary checkpoint folder: the stand-in code with its own or a real ``config.json``."""
    dst = tmp_path / stand_in
    shutil.copytree(REMOTE / stand_in, dst)
    if config is not None:
        (dst / "config.json").write_text(json.dumps(config))
    return dst


_STAND_IN_WEIGHTS = {
    "llada_like": {
        "model.transformer.wte.weight": (40, 16),
        "model.transformer.blocks.0.weight": (16, 16),
        "model.transformer.ff_out.weight": (40, 16),
    },
    "dream_like": {"embed_tokens.weight": (40, 16), "lm_head.weight": (40, 16)},
}


def _with_weights(tmp_path: Path, stand_in: str) -> tuple[Path, dict[str, torch.Tensor]]:
    from safetensors.torch import save_file

    folder = _remote_copy(tmp_path, stand_in)
    gen = torch.Generator().manual_seed(0)
    state = {k: torch.randn(*s, generator=gen) for k, s in _STAND_IN_WEIGHTS[stand_in].items()}
    save_file(state, str(folder / "model.safetensors"))
    return folder, state


@pytest.mark.parametrize(
    ("stand_in", "error"), [("llada_like", (AttributeError, TypeError)), ("dream_like", KeyError)]
)
def test_published_remote_code_does_not_load_without_the_compat_layer(tmp_path, stand_in, error):
    """The stand-ins reproduce the break: plain ``from_pretrained`` fails under our transformers."""
    from transformers import AutoModel

    folder, _ = _with_weights(tmp_path, stand_in)
    with pytest.raises(error):
        AutoModel.from_pretrained(str(folder), trust_remote_code=True)


def test_llada_loads_through_the_compat_layer_with_its_weights(tmp_path, caplog):
    from common.models import load_model

    folder, state = _with_weights(tmp_path, "llada_like")
    with caplog.at_level("INFO", logger="common.model_compat"):
        model = load_model(str(folder), kind="masked_diffusion", dtype="float32", device="cpu")
    assert type(model).__name__ == "LLaDAModelLM"
    loaded = model.state_dict()
    for key, value in state.items():  # every tensor read, none re-initialised
        torch.testing.assert_close(loaded[key], value, rtol=0, atol=0)
    logits = model(input_ids=torch.tensor([[1, 2, 3]]))["logits"]
    assert logits.shape == (1, 3, 40)
    # the checkpoint's own tie_weights still runs with the new keyword arguments
    model.config.weight_tying = True
    model.tie_weights(missing_keys=set(), recompute_mapping=False)
    assert model.model.transformer["ff_out"].weight is model.model.transformer["wte"].weight


def test_dream_loads_with_plain_rope_and_leaves_transformers_unchanged(tmp_path):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from common.models import load_model

    folder, state = _with_weights(tmp_path, "dream_like")
    model = load_model(str(folder), kind="masked_diffusion", dtype="float32", device="cpu")
    torch.testing.assert_close(model.lm_head.weight, state["lm_head.weight"], rtol=0, atol=0)
    # head_dim 16 / 2 heads = 8: inv_freq_i = 1e6^(-2i/8), i = 0..3 (rope_theta of the config)
    expected = 1.0 / (1e6 ** (torch.arange(0, 8, 2).float() / 8))
    torch.testing.assert_close(model.rotary_emb.inv_freq, expected)
    assert model.rotary_emb.attention_scaling == 1.0
    assert "default" not in ROPE_INIT_FUNCTIONS  # registered only while building


@pytest.mark.parametrize("stem", sorted(REMOTE_CASES))
def test_real_diffusion_configs_build_empty_through_the_compat_layer(tmp_path, stem):
    """The real LLaDA / Dream config.json fields through stand-in code: sizes and the mask id."""
    from common.models import init_empty_model
    from methods.swordsman.adapters import LLADA_MASK_ID

    folder, stand_in = REMOTE_CASES[stem]
    real = _config(folder)
    assert (
        real["auto_map"]["AutoModel"]
        == json.loads((REMOTE / stand_in / "config.json").read_text())["auto_map"]["AutoModel"]
    )
    model = init_empty_model(str(_remote_copy(tmp_path, stand_in, real)), kind="masked_diffusion")
    emb = model.get_input_embeddings().weight
    assert emb.device.type == "meta"
    if stand_in == "llada_like":
        assert tuple(emb.shape) == (126464, 4096)
        assert real["mask_token_id"] == LLADA_MASK_ID
    else:
        assert tuple(emb.shape) == (152064, 3584)
        assert real["mask_token_id"] == 151666
        assert model.rotary_emb.inv_freq.shape == (3584 // 28 // 2,)


def test_unknown_kind_is_rejected_before_reading_anything():
    from common.models import init_empty_model

    with pytest.raises(ValueError, match="kind must be one of"):
        init_empty_model(str(FIXTURES / "openai-community__gpt2"), kind="seq2seq")


# --- chat templates: the real template text of each family, rendered as our methods render it ----


def _fixture_tokenizer(tmp_path: Path, folder: str):
    """A word-level tokenizer carrying the fixture's chat template and special tokens, saved and
    reloaded through :func:`common.models.load_tokenizer` (what every preset calls)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from common.models import load_tokenizer

    src = FIXTURES / folder
    cfg = {}
    if (src / "tokenizer_config.json").is_file():
        cfg = json.loads((src / "tokenizer_config.json").read_text())
    if (src / "chat_template.json").is_file():  # a processor's template (LLaVA, Qwen2.5-VL)
        cfg["chat_template"] = json.loads((src / "chat_template.json").read_text())["chat_template"]
    special = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token") if cfg.get(k)}
    vocab = {tok: i for i, tok in enumerate(["<unk>", *dict.fromkeys(special.values())])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", chat_template=cfg["chat_template"], **special
    )
    tok.save_pretrained(tmp_path / folder)
    return load_tokenizer(str(tmp_path / folder))


USER = [{"role": "user", "content": "What is 2+2?"}]


def test_qwen2_5_instruct_adds_its_default_system_turn(tmp_path):
    """salo / kmkc / mcce / weasel render user-only turns with add_generation_prompt=True."""
    tok = _fixture_tokenizer(tmp_path, "Qwen__Qwen2.5-7B-Instruct")
    text = tok.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.pad_token == "<|endoftext|>" != tok.eos_token == "<|im_end|>"
    assert tok.padding_side == "left"


@pytest.mark.parametrize("folder", ["Qwen__Qwen3-4B", "Qwen__Qwen3-8B"])
def test_qwen3_generation_prompt_leaves_thinking_on(tmp_path, folder):
    """threadweaver passes no enable_thinking: the model opens its own <think> block.

    epicache passes ``method.enable_thinking`` (default False, as the official hard-coded frame
    has no thinking turn): its frame then ends with an empty, closed <think> block.
    """
    tok = _fixture_tokenizer(tmp_path, folder)
    on = tok.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    off = tok.apply_chat_template(
        USER, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )
    assert on == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert off == on + "<think>\n\n</think>\n\n"
    # epicache's frame: a system turn and a sentinel user turn, split around the sentinel, with
    # its default options (methods/epicache/config.py; date_string is ignored by this template)
    msgs = [{"role": "system", "content": "You are a helpful assistant."}, USER[0]]
    pre, post = tok.apply_chat_template(
        msgs,
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=False,
        date_string="26 Jul 2024",
    ).split("What is 2+2?")
    assert pre == "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    assert post == "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_llama3_1_instruct_injects_a_dated_system_header(tmp_path):
    """salo_paper_llama / llminertia render user-only turns: the template adds a system header."""
    tok = _fixture_tokenizer(tmp_path, "meta-llama__Llama-3.1-8B-Instruct")
    text = tok.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    assert text.startswith(
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
    )
    assert text.endswith(
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert text.count("<|begin_of_text|>") == 1  # methods tokenise with add_special_tokens=False
    assert tok.pad_token == tok.eos_token == "<|eot_id|>"  # no pad token: load_tokenizer's fallback


def test_llama3_2_instruct_dates_the_system_turn_with_today(tmp_path):
    """The template's own default (no date_string): the date line is today's, so it changes daily.

    epicache_paper_llama passes ``method.date_string`` (default "26 Jul 2024") to pin it
    (tests/methods/test_epicache_templates.py); this is what the template does without it.
    """
    import datetime

    tok = _fixture_tokenizer(tmp_path, "meta-llama__Llama-3.2-3B-Instruct")
    msgs = [{"role": "system", "content": "You are a helpful assistant."}, USER[0]]
    before = datetime.date.today()
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    dates = {d.strftime("%d %b %Y") for d in (before, datetime.date.today())}
    today = next(d for d in dates if f"Today Date: {d}" in text)  # StopIteration: no date line
    assert f"Cutting Knowledge Date: December 2023\nToday Date: {today}\n\n" in text
    assert "Today Date: " + today + "\n\nYou are a helpful assistant.<|eot_id|>" in text
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")


IMAGE_TURN = [
    {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Caption."}]}
]


def test_llava_1_5_renders_user_assistant_with_the_image_first(tmp_path):
    """kore_paper renders image + text turns through the processor's chat template."""
    for folder in ("llava-hf__llava-1.5-7b-hf", "llava-hf__llava-1.5-13b-hf"):
        tok = _fixture_tokenizer(tmp_path, folder)
        text = tok.apply_chat_template(IMAGE_TURN, tokenize=False, add_generation_prompt=True)
        assert text == "USER: <image>\nCaption. ASSISTANT:"


def test_qwen2_5_vl_adds_a_system_turn_and_vision_pads(tmp_path):
    """georl / kore_paper_qwen: one image placeholder triple, then the text."""
    tok = _fixture_tokenizer(tmp_path, "Qwen__Qwen2.5-VL-7B-Instruct")
    text = tok.apply_chat_template(IMAGE_TURN, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "<|vision_start|><|image_pad|><|vision_end|>Caption.<|im_end|>\n<|im_start|>assistant\n"
    )


SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def test_smollm2_instruct_supplies_its_own_system_turn(tmp_path):
    """maxrl_paper_smollm: TRL GRPO renders ``[user]`` (system_prompt null, App. E.2) with
    add_generation_prompt=True; the template adds SmolLM's default system turn itself."""
    tok = _fixture_tokenizer(tmp_path, "HuggingFaceTB__SmolLM2-360M-Instruct")
    text = tok.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    assert text == (
        f"<|im_start|>system\n{SMOLLM_SYSTEM}<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    # a system turn of our own replaces the default (it is not added twice)
    own = [{"role": "system", "content": "Be brief."}, USER[0]]
    text = tok.apply_chat_template(own, tokenize=False, add_generation_prompt=True)
    assert SMOLLM_SYSTEM not in text
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n")
    # without add_generation_prompt the assistant turn is not opened
    closed = tok.apply_chat_template(USER, tokenize=False, add_generation_prompt=False)
    assert closed.endswith("What is 2+2?<|im_end|>\n")


def test_llada_instruct_always_opens_the_assistant_turn(tmp_path):
    """swordsman_paper (LLaDA-8B-Instruct): ``eval_harness.generate_text`` wraps the context as a
    user turn with add_generation_prompt=True and tokenises with add_special_tokens=False.

    LLaDA's template is the first Llama-3 one with LLaDA's BOS: it opens the assistant turn
    whatever add_generation_prompt says, and trims each message's content.
    """
    tok = _fixture_tokenizer(tmp_path, "GSAI-ML__LLaDA-8B-Instruct")
    msgs = [{"role": "user", "content": "  What is 2+2?\n"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|startoftext|><|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False) == text
    assert text.count(tok.bos_token) == 1  # BOS from the template only: no add_special_tokens
    assert tok.pad_token == tok.eos_token == "<|endoftext|>"


def test_llada_1_5_and_dream_presets_render_raw_text():
    """LLaDA-1.5 and Dream-v0-Base run without a chat template (official ``eval_llada.py`` /
    ``dream/eval.py``: only "instruct" checkpoints are wrapped; ``swordsman.paper`` also needs
    ``model.chat_template``), so only LLaDA-8B-Instruct's template is ever rendered."""
    assert _model_yaml("llada_1_5").get("chat_template") is False
    assert _model_yaml("dream_v0_base_7b").get("chat_template") is False
    assert _model_yaml("llada_8b_instruct").get("chat_template", True) is True
