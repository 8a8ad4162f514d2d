"""EpiCache's chat frame on the real chat-template text of each preset's model family.

The official frame (``model/template.py`` of apple/ml-epicache) is hard-coded per family, with no
thinking turn and no date line; the official runs used Qwen2.5-Instruct. Our frame renders the
tokenizer's own template around a sentinel user turn, passing ``method.enable_thinking`` (default
False) and ``method.date_string`` (default the Llama 3.x templates' fallback "26 Jul 2024").
Templates: ``tests/fixtures/models/<org>__<name>/tokenizer_config.json`` (sources in its README).
"""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest

from common.config import validate
from common.registry import compose
from tests.common.test_model_loading import _fixture_tokenizer

QWEN3_ANSWER_HEADER = "<|im_end|>\n<|im_start|>assistant\n"
EMPTY_THINK = "<think>\n\n</think>\n\n"


def _frame(tmp_path, preset: str, folder: str, *overrides: str) -> tuple[str, str]:
    """(prefix, postfix) of the preset's session on the fixture template of ``folder``."""
    from methods.epicache.pipeline import EpiCacheSession

    run = validate(compose([f"experiment={preset}", "method.stage=eval", *overrides]))
    tok = _fixture_tokenizer(tmp_path, folder)
    model = SimpleNamespace(config=SimpleNamespace(num_hidden_layers=2))  # the frame needs no model
    return EpiCacheSession(model, tok, embedder=None, config=run.method)._frame()


def test_qwen3_frame_closes_the_thinking_block_by_default(tmp_path):
    """epicache_paper (Qwen3-4B): answers start after an empty <think> block, as Qwen2.5 ones do."""
    pre, post = _frame(tmp_path, "epicache_paper", "Qwen__Qwen3-4B")
    assert pre == "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    assert post == QWEN3_ANSWER_HEADER + EMPTY_THINK


@pytest.mark.parametrize("value", ["true", "null"])
def test_qwen3_frame_with_thinking_on_leaves_the_model_to_open_it(tmp_path, value):
    _, post = _frame(
        tmp_path, "epicache_paper", "Qwen__Qwen3-4B", f"method.enable_thinking={value}"
    )
    assert post == QWEN3_ANSWER_HEADER  # the model then writes its own <think> ... </think>


def test_qwen2_5_frame_is_the_official_one_whatever_the_options(tmp_path):
    """The options are ignored by Qwen2.5's template: the frame equals official template.py's."""
    pre, post = _frame(tmp_path, "epicache_paper", "Qwen__Qwen2.5-7B-Instruct")
    assert pre == "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
    assert post == "<|im_end|>\n<|im_start|>assistant\n"


def test_llama3_2_frame_is_dated_with_the_fixed_date_not_today(tmp_path):
    """epicache_paper_llama: the cached prefix is the same on every day."""
    folder = "meta-llama__Llama-3.2-3B-Instruct"
    pre, post = _frame(tmp_path, "epicache_paper_llama", folder)
    assert pre == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
        "You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
    )
    assert post == "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    pinned, _ = _frame(tmp_path, "epicache_paper_llama", folder, "method.date_string='01 Jan 2025'")
    assert "Today Date: 01 Jan 2025\n" in pinned
    # date_string=null: the template's own default, today's date (what the fixed default avoids)
    before = datetime.date.today()
    today, _ = _frame(tmp_path, "epicache_paper_llama", folder, "method.date_string=null")
    dates = {d.strftime("%d %b %Y") for d in (before, datetime.date.today())}
    assert any(f"Today Date: {d}\n" in today for d in dates)


def test_bad_date_string_is_rejected_before_anything_loads():
    from common.config import ConfigError

    with pytest.raises((ValueError, ConfigError), match="date_string must be a non-empty string"):
        validate(
            compose(
                ["experiment=epicache_paper_llama", "method.stage=eval", "method.date_string=''"]
            )
        )
