"""sv_features_paper / _gpt2_ioi / _pythia read no data set: the IOI prompts are generated
(``methods.sv_features.paper.ioi_prompts``). What the checkpoint stage reads is Pythia's published
revisions (hub branches of EleutherAI/pythia-160m, named in the Pythia README: ``step0``, the
log-spaced ``step1`` .. ``step512`` and ``step1000`` .. ``step143000``, 154 in all) or a local
folder with one sub-folder per revision; both are checked here through the preset's loader."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from common.config import validate
from common.registry import compose

PYTHIA = Path(__file__).parents[1] / "fixtures" / "models" / "EleutherAI__pythia-160m"


def test_pythia_revisions_are_the_published_branches():
    from methods.sv_features.paper import pythia_revisions

    names = pythia_revisions()
    assert len(names) == 154 and len(set(names)) == 154
    assert names[:12] == ["step0"] + [f"step{2**k}" for k in range(10)] + ["step1000"]
    assert names[-1] == "step143000"
    run = validate(compose(["experiment=sv_features_pythia"]))
    chosen = pythia_revisions(run.method.real.n_checkpoints)
    assert len(chosen) == 130 and set(chosen) <= set(names)
    assert chosen[:11] == names[:11] and chosen[-1] == "step143000"  # all early ones, the last


def _sweep(tmp_path: Path) -> Path:
    """Two revisions of a Pythia-architecture model (the real config, shrunk), one per sub-folder."""
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    real = json.loads((PYTHIA / "config.json").read_text())
    small = real | {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "vocab_size": 64,
    }
    for k, rev in enumerate(["step0", "step143000"]):
        torch.manual_seed(k)
        GPTNeoXForCausalLM(GPTNeoXConfig(**small)).save_pretrained(tmp_path / "sweep" / rev)
    return tmp_path / "sweep"


def test_local_sweep_folder_loads_each_revision_subfolder(tmp_path):
    from methods.sv_features.paper import _load

    folder = _sweep(tmp_path)
    run = validate(
        compose(
            [
                "experiment=sv_features_pythia",
                f"model.path={folder}",
                "method.real.checkpoints=[step0,step143000]",
            ]
        )
    )
    first, last = _load(run, "step0"), _load(run, "step143000")
    assert type(first).__name__ == "GPTNeoXForCausalLM"
    # Pythia's rotary_pct 0.25 (read by transformers 5 as partial_rotary_factor), parallel residual
    assert first.config.rope_parameters["partial_rotary_factor"] == 0.25
    assert first.config.use_parallel_residual
    assert first.dtype == torch.float32
    assert first.config._attn_implementation == "eager"  # SAD reads the attention pattern
    w0 = first.get_input_embeddings().weight
    assert not torch.equal(w0, last.get_input_embeddings().weight)  # two different checkpoints
