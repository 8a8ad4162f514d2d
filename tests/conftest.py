"""Session fixtures: offline mode, tiny models built once, a run folder per test."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("ICML26_PROGRESS", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(2)


def pytest_configure(config):
    """The third-party warning filters of common/_warnings.py, the one place they are listed."""
    from common._warnings import pytest_filters

    for line in pytest_filters():
        config.addinivalue_line("filterwarnings", line)


@pytest.fixture(scope="session")
def tiny_tok():
    """The tiny byte-level BPE tokenizer (shared; do not mutate)."""
    from common.tiny import tiny_tokenizer

    return tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_qwen2(tiny_tok):
    """``(model, tokenizer)``: a random-init 2-layer Qwen2, seed 0 (shared; do not train it)."""
    from common.tiny import tiny_causal_lm

    return tiny_causal_lm("qwen2", seed=0, tokenizer=tiny_tok)


@pytest.fixture(scope="session")
def tiny_llama(tiny_tok):
    from common.tiny import tiny_causal_lm

    return tiny_causal_lm("llama", seed=0, tokenizer=tiny_tok)


@pytest.fixture(scope="session")
def tiny_llava_model():
    from common.tiny import tiny_llava

    return tiny_llava(seed=0)


@pytest.fixture
def run_dir(tmp_path):
    """A fresh run folder for a method's ``run(cfg)``."""
    d = tmp_path / "run"
    d.mkdir()
    return d


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory):
    """Folders with a saved tiny model + tokenizer per architecture, loadable by ``from_pretrained``.

    The paper-preset contract test points ``model.path`` at these (``{tiny_qwen2}`` etc.); the
    same function builds them for ``python -m scripts.paper_smoke``.
    """
    from scripts.paper_smoke import tiny_model_dirs as save_tiny_models

    return save_tiny_models(tmp_path_factory.mktemp("tiny_models"))
