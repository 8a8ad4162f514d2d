"""swordsman_paper(_dream) through the preset's own load path: the checkpoint's remote code (LLaDA,
Dream) goes through ``common.models.load_model(kind="masked_diffusion")`` and its transformers-5
fixes, and ``engine=local`` reads ``benchmark=gsm8k`` in the hub's layout.

The checkpoints are the stand-ins of ``tests/fixtures/models/remote_code/`` (the published
``modeling_llada.py`` / ``modeling_dream.py`` signatures that break a plain ``from_pretrained``),
with weights and a word-level tokenizer carrying the real special tokens written into a temporary
copy whose folder name is the checkpoint's (the preset picks family and chat template from it).
The lm-eval engine's tasks (gsm8k, minerva_math, humaneval, mbpp) are read by lm-evaluation-harness
itself and are not sampled here.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from common.config import model_id, validate
from common.registry import compose
from tests.artifacts.hub import serve_hub

REMOTE = Path(__file__).parents[1] / "fixtures" / "models" / "remote_code"
# special tokens of the real tokenizers at the stand-in's vocabulary ids (vocab 40: mask 39, eos 38)
SPECIAL = {
    "llada_like": {38: "<|endoftext|>", 39: "<|mdm_mask|>", 37: "<|eot_id|>"},
    "dream_like": {38: "<|endoftext|>", 39: "<|mask|>", 37: "<|beginoftext|>"},
}
STAND_IN = {"swordsman_paper": "llada_like", "swordsman_paper_dream": "dream_like"}
FOLDER = {"swordsman_paper": "LLaDA-8B-Instruct", "swordsman_paper_dream": "Dream-v0-Base-7B"}
# a Llama-3-style user/assistant template (LLaDA-8B-Instruct's shape; its exact text is not
# transcribed here, see docs/models.md)
TEMPLATE = (
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
WEIGHTS = {
    "llada_like": {
        "model.transformer.wte.weight": (40, 16),
        "model.transformer.blocks.0.weight": (16, 16),
        "model.transformer.ff_out.weight": (40, 16),
    },
    "dream_like": {"embed_tokens.weight": (40, 16), "lm_head.weight": (40, 16)},
}


def _checkpoint(tmp_path: Path, preset: str) -> Path:
    """The stand-in code + random weights + a tokenizer with the real special tokens."""
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    stand_in = STAND_IN[preset]
    dst = tmp_path / FOLDER[preset]
    shutil.copytree(REMOTE / stand_in, dst)
    gen = torch.Generator().manual_seed(0)
    state = {k: torch.randn(*s, generator=gen) for k, s in WEIGHTS[stand_in].items()}
    save_file(state, str(dst / "model.safetensors"))
    special = SPECIAL[stand_in]
    words = ["<unk>", *"0 1 2 3 4 5 6 7 8 9 the a is of and to how many".split()]
    vocab = {w: i for i, w in enumerate(words)}
    vocab.update({f"w{i}": i for i in range(len(words), 37) if i not in special})
    vocab.update({tok: i for i, tok in special.items()})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    kw = {"eos_token": "<|endoftext|>"}
    if stand_in == "dream_like":  # Dream: mask_token <|mask|>, bos <|beginoftext|>
        kw |= {"mask_token": "<|mask|>", "bos_token": "<|beginoftext|>"}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", chat_template=TEMPLATE, **kw
    )
    tok.save_pretrained(dst)
    return dst


def _run(preset: str, folder: Path, tmp_path: Path):
    run = validate(
        compose(
            [
                f"experiment={preset}",
                f"model.path={folder}",
                "model.dtype=float32",
                "method.eval.engine=local",
                "method.eval.limit=2",
                "method.decoder.gen_length=4",
                "method.decoder.max_block_len=4",
                f"run_dir={tmp_path / 'run'}",
            ]
        )
    )
    run.run_dir.mkdir(parents=True, exist_ok=True)
    return run


@pytest.mark.parametrize(
    ("preset", "cls", "mask", "eos"),
    [
        ("swordsman_paper", "LLaDAModelLM", 39, {37, 38}),
        ("swordsman_paper_dream", "DreamModel", 39, {38}),
    ],
)
def test_remote_code_checkpoint_loads_through_the_compat_layer(
    monkeypatch, tmp_path, preset, cls, mask, eos
):
    """(A plain ``AutoModel.from_pretrained`` fails on these stand-ins:
    tests/common/test_model_loading.py.)"""
    import common.models
    from methods.swordsman.eval_harness import SwordsmanHarnessLM

    run = _run(preset, _checkpoint(tmp_path, preset), tmp_path)
    assert run.model.kind == "masked_diffusion"
    kinds, real_load = [], common.models.load_model

    def spy(spec, *a, **kw):
        kinds.append(kw.get("kind"))
        return real_load(spec, *a, **kw)

    monkeypatch.setattr(common.models, "load_model", spy)
    adapter, tok, chat, bos = SwordsmanHarnessLM.load(
        model_id(run.model), run.method.eval.family, run.model.dtype
    )
    assert kinds == ["masked_diffusion"]
    assert type(adapter.model).__name__ == cls  # the checkpoint's own class, not a fallback
    assert (adapter.mask_id, adapter.eos_ids) == (mask, eos)
    assert adapter.shift_logits == (preset == "swordsman_paper_dream")  # Dream predicts next token
    # official eval scripts: chat template for the instruct checkpoint, BOS for Dream base
    assert (chat, bos) == (preset == "swordsman_paper", preset == "swordsman_paper_dream")
    logits, _ = adapter.forward(torch.tensor([[1, 2, 3]]))
    assert logits.shape == (1, 3, 40) and torch.isfinite(logits).all()
    if preset == "swordsman_paper_dream":  # RoPE frequencies recomputed, not uninitialised memory
        expected = 1.0 / (1e6 ** (torch.arange(0, 8, 2).float() / 8))
        torch.testing.assert_close(adapter.model.rotary_emb.inv_freq, expected)


@pytest.mark.parametrize("preset", ["swordsman_paper", "swordsman_paper_dream"])
def test_local_engine_reads_gsm8k_and_scores_the_gold_number(monkeypatch, tmp_path, preset):
    from common.tasks import math_sets
    from methods.swordsman import paper

    run = _run(preset, _checkpoint(tmp_path, preset), tmp_path)
    calls = serve_hub(monkeypatch, math_sets)
    seen = []
    real_generate = paper.generate_text

    def generate(adapter, tok, problem, cfg, until, chat, bos, baseline):
        out = real_generate(adapter, tok, problem, cfg, until, chat, bos, baseline)  # decodes
        assert out["tokens"] <= cfg.gen_length
        seen.append((problem, chat, bos))
        # the Swordsman arm "answers" the gold number, the baseline a wrong one
        return out | {"text": "so 105 pages." if baseline is None else "7 days"}

    monkeypatch.setattr(paper, "generate_text", generate)
    paper.paper_stage(run)
    assert calls == [("openai/gsm8k", "main", "test")]
    question = "Tom reads 15 pages a day. How many pages does he read in a week?"
    chat, bos = preset == "swordsman_paper", preset == "swordsman_paper_dream"
    assert seen == [(question, chat, bos)] * 2  # one row, Swordsman then Fast-dLLM
    results = json.loads((run.run_dir / "results.json").read_text())["metrics"]
    # the gold answer '#### 105' was reduced to 105 and matched on the last number
    assert results["swordsman_gsm8k"]["accuracy"] == 1.0
    assert results["fast_dllm_gsm8k"]["accuracy"] == 0.0
