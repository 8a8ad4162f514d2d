"""No deprecation warning from the project's own calls; third-party ones filtered in one place (issue 31 point 4)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from common import _warnings
from common.config import ConfigError, checkpointing_kwargs, trainer_config


def _caught(fn):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        _warnings.install()  # inserted in front of "always": the project's filters stay in force
        out = fn()
    return out, [w for w in rec if issubclass(w.category, (DeprecationWarning, FutureWarning))]


_CPU = {"bf16": False, "use_cpu": True, "report_to": "none"}


def test_every_filter_says_why_and_is_narrow():
    assert _warnings.THIRD_PARTY_FILTERS
    for f in _warnings.THIRD_PARTY_FILTERS:
        assert len(f.reason) > 40 and len(f.message) > 30  # a specific message, and why
        assert not f.module.startswith(("common", "methods", "scripts"))
    assert len(_warnings.pytest_filters()) == len(_warnings.THIRD_PARTY_FILTERS)


def test_trl_configs_build_without_the_checkpointing_deprecation():
    from trl import GRPOConfig, SFTConfig

    from common.rl import cpu_grpo_kwargs

    cfg, ws = _caught(lambda: GRPOConfig(**cpu_grpo_kwargs(output_dir="/tmp/x", **_CPU)))
    assert not ws, [str(w.message) for w in ws]
    assert cfg.activation_checkpointing is False and cfg.gradient_checkpointing is False
    # The paper presets' `gradient_checkpointing: true` keeps its meaning under the new name.
    cfg, ws = _caught(
        lambda: trainer_config(
            SFTConfig, {"gradient_checkpointing": True}, output_dir="/tmp/x", **_CPU
        )
    )
    assert not ws and cfg.activation_checkpointing is True
    cfg, ws = _caught(lambda: trainer_config(SFTConfig, {}, output_dir="/tmp/x", **_CPU))
    assert not ws and cfg.activation_checkpointing is True  # TRL's default, unchanged
    # Without the translation TRL's own default does warn (the test would notice a fix upstream).
    _, ws = _caught(lambda: SFTConfig(output_dir="/tmp/x", **_CPU))
    assert any("gradient_checkpointing" in str(w.message) for w in ws)


def test_checkpointing_kwargs_refuses_both_names():
    from trl import SFTConfig

    with pytest.raises(ConfigError, match="activation_checkpointing.*gradient_checkpointing"):
        checkpointing_kwargs(
            SFTConfig, {"gradient_checkpointing": True, "activation_checkpointing": False}
        )


def test_peft_internal_deprecation_is_filtered_and_only_it(tiny_qwen2):
    from peft import LoraConfig, get_peft_model

    from common.tiny import tiny_causal_lm

    model, _ = tiny_causal_lm("qwen2", seed=0)
    _, ws = _caught(lambda: get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"])))
    assert not ws, [str(w.message) for w in ws]
    # A deprecation raised from our own module is NOT filtered.
    _, ws = _caught(
        lambda: warnings.warn("`gradient_checkpointing` is deprecated", FutureWarning, stacklevel=1)
    )
    assert len(ws) == 1


def test_torch_internal_script_method_deprecation_is_filtered_and_only_it():
    """torch.utils.mkldnn (imported by torch._inductor for flex attention) uses torch's deprecated
    script_method 14 times at import; the same text raised from our own modules still shows."""
    msg = "`torch.jit.script_method` is deprecated. Please switch to `torch.compile` or `torch.export`."

    def from_module(module):
        return lambda: warnings.warn_explicit(msg, DeprecationWarning, "x.py", 1, module=module)

    _, ws = _caught(from_module("torch.jit._script"))
    assert not ws
    _, ws = _caught(from_module("methods.threadweaver.trie"))
    assert len(ws) == 1


def test_salo_same_conv_matches_torch_same_padding_without_warning():
    from methods.salo.operator import _SameConv2d

    for k in [(3, 2), (3, 3), (2, 4)]:
        ours = _SameConv2d(4, 3, k)
        ref = nn.Conv2d(4, 3, k, padding="same")
        ref.load_state_dict(ours.state_dict())
        x = torch.randn(2, 4, 5, 7)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            y = ours(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.testing.assert_close(y, ref(x), rtol=0, atol=0)


def _all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def test_every_method_training_config_takes_the_old_checkpointing_name_silently():
    """Each TRL/HF config subclass of methods/ lists CheckpointingNames first, so TRL's default
    ``gradient_checkpointing=True`` and the paper scripts' name build without the deprecation."""
    import importlib

    from transformers import TrainingArguments

    from common.config import CheckpointingNames
    from common.registry import discover_methods

    files = [
        p
        for p in Path("methods").glob("*/*.py")
        if "Config(" in p.read_text() or "Arguments(" in p.read_text()
    ]
    for p in files:
        importlib.import_module(".".join(p.with_suffix("").parts))
    ours = [c for c in _all_subclasses(TrainingArguments) if c.__module__.startswith("methods.")]
    assert len(ours) >= 10 and {c.__module__.split(".")[1] for c in ours} <= set(discover_methods())
    for cls in ours:
        assert cls.__mro__[1] is CheckpointingNames, cls
    from methods.threadweaver import TrieSFTConfig

    cfg, ws = _caught(lambda: TrieSFTConfig(output_dir="/tmp/x", **_CPU))
    assert not ws and cfg.activation_checkpointing is True  # TRL's default, now under the new name
    cfg, ws = _caught(
        lambda: TrieSFTConfig(output_dir="/tmp/x", gradient_checkpointing=False, **_CPU)
    )
    assert not ws and cfg.activation_checkpointing is False
