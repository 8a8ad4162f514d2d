"""The knobs of SliceFine's toy diagnosis (docs/methods/slicefine.md, "Diagnosis"): ``lora_r``,
``lr_by_arm``, ``n_val`` and the selection / paired statistics of ``methods.slicefine.diagnose``."""

from __future__ import annotations

import math

import pytest
import torch

from methods.slicefine.config import ToyConfig
from methods.slicefine.diagnose import VARIANTS, best_lr, paired, summarise, variant_config
from methods.slicefine.toy import _build_arm, arm_lr, make_data, train_arm

SMALL = dict(targets=["query", "value"], steps=3, batch_size=4, n_train=16, n_test=8)


@pytest.fixture(scope="module")
def bert(tiny_tok):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=len(tiny_tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    return BertModel(cfg)


def _enc_params(bert, arm, cfg):
    return _build_arm(arm, bert, cfg, seed=0)[2]


def test_defaults_keep_todays_toy(bert):
    cfg = ToyConfig(**SMALL)
    assert cfg.lora_r is None and cfg.lr_by_arm == {} and cfg.n_val == 0
    assert arm_lr(cfg, "lora") == arm_lr(cfg, "slicefine") == cfg.lr
    # LoRA rank = r (alpha 2r) as before: 2 targets x (A + B) = 2 * 2 * 32 * r
    assert _enc_params(bert, "lora", cfg) == 2 * 2 * 32 * cfg.r


def test_lora_r_changes_only_the_lora_rank(bert):
    base, one = ToyConfig(**SMALL), ToyConfig(**SMALL, lora_r=1)
    assert _enc_params(bert, "lora", one) == 2 * 2 * 32 * 1
    assert _enc_params(bert, "slicefine", one) == _enc_params(bert, "slicefine", base)


def test_matched_variants_have_equal_trainable_parameters(bert):
    toy = ToyConfig(**SMALL)
    for v, (_, _, ref) in VARIANTS.items():
        if ref is None or v == "slice_w1":  # slice_w1 is the half-parameter comparison
            continue
        counts = [_enc_params(bert, VARIANTS[x][0], variant_config(toy, x, 1e-3)) for x in (v, ref)]
        assert counts[0] == counts[1], (v, ref, counts)
    assert variant_config(toy, "slice_w2", 5e-3).lr == 5e-3


def test_lr_by_arm_changes_that_arms_training_only(bert, tiny_tok):
    data = (make_data(16, 0), make_data(8, 1))
    shared = ToyConfig(**SMALL, lr=1e-3)
    fast = ToyConfig(**SMALL, lr=1e-3, lr_by_arm={"lora": 5e-2})
    assert arm_lr(fast, "lora") == 5e-2 and arm_lr(fast, "static") == 1e-3
    loss = {
        (arm, i): train_arm(arm, bert, tiny_tok, c, 0, data)["final_loss"]
        for arm in ("lora", "static")
        for i, c in enumerate((shared, fast))
    }
    assert loss[("lora", 0)] != loss[("lora", 1)]
    assert loss[("static", 0)] == loss[("static", 1)]


def test_n_val_adds_a_validation_accuracy(bert, tiny_tok):
    cfg = ToyConfig(**SMALL, n_val=8)
    two = (make_data(16, 0), make_data(8, 1))
    assert "val_accuracy" not in train_arm("static", bert, tiny_tok, cfg, 0, two)
    out = train_arm("static", bert, tiny_tok, cfg, 0, (*two, make_data(cfg.n_val, 2)))
    assert 0.0 <= out["val_accuracy"] <= 1.0
    with pytest.raises(ValueError):
        ToyConfig(n_val=-1)
    with pytest.raises(ValueError):
        ToyConfig(lr_by_arm={"nope": 1e-3})
    with pytest.raises(ValueError):
        ToyConfig(lora_r=0)


def _runs(val, test):
    return [{"val_accuracy": v, "accuracy": t, "trainable_params": 9.0} for v, t in zip(val, test)]


def test_best_lr_is_picked_on_validation_not_test():
    runs = {1e-3: _runs([0.9, 0.9], [0.5, 0.5]), 1e-2: _runs([0.8, 0.8], [1.0, 1.0])}
    assert best_lr(runs) == 1e-3


def test_summarise_pairs_each_slice_with_its_lora_at_their_own_best_lr():
    raw = {
        "lora_r2": {2e-3: _runs([1, 1, 1], [1.0, 0.9, 0.8]), 2e-2: _runs([0, 0, 0], [0, 0, 0])},
        "slice_w4": {2e-3: _runs([0, 0, 0], [0.1, 0.1, 0.1]), 2e-2: _runs([1, 1, 1], [0.9, 0.9, 0.9])},
    }  # fmt: skip
    rows = {r["variant"]: r for r in summarise(raw, 2e-3)}
    s = rows["slice_w4"]
    assert s["best_lr"] == 2e-2 and rows["lora_r2"]["best_lr"] == 2e-3
    assert s["tuned"]["delta"] == pytest.approx(0.0)  # [-0.1, 0, +0.1]
    assert s["tuned"]["ci95"] == pytest.approx(4.302653 * 0.1 / math.sqrt(3), rel=1e-4)
    assert s["today"]["delta"] == pytest.approx(0.1 - 0.9)
    assert paired([1.0, 2.0], [1.0, 1.0])["delta"] == 0.5
