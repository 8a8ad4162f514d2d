import json

import numpy as np
import pytest
import torch

from common.activations import capture, hidden_states
from common.embeddings import Embedder
from common.tracking import MetricsLogger, markdown_table, metrics_logger, write_results


@pytest.fixture(scope="module")
def embedder():
    return Embedder()


def test_embedder_is_real_and_normalised(embedder):
    X = embedder.encode(["a red car", "a crimson automobile", "the stock market fell today"])
    assert X.shape == (3, 384) and X.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(X, axis=1), 1.0, atol=1e-5)
    # A real sentence embedder: paraphrases are closer than unrelated text.
    assert X[0] @ X[1] > X[0] @ X[2] + 0.2
    assert embedder.encode([]).shape == (0, 384)
    with pytest.raises(TypeError, match="single string"):
        embedder.encode("a car")


def test_capture_inputs_outputs_and_hooks_removed(tiny_qwen2):
    model, tok = tiny_qwen2
    ids = torch.tensor([tok("What is 2 + 3?")["input_ids"]])
    name = "model.layers.0.mlp.down_proj"
    with capture(model, [name], what="input") as ins, capture(model, [name]) as outs:
        model(ids)
    x, y = ins[name][0], outs[name][0]
    lin = dict(model.named_modules())[name]
    torch.testing.assert_close(lin(x), y)  # the captured input maps to the captured output
    assert not lin._forward_hooks

    with pytest.raises(RuntimeError), capture(model, [name]):  # hooks removed on error too
        raise RuntimeError("boom")
    assert not lin._forward_hooks
    with pytest.raises(ValueError, match="unknown module"), capture(model, ["nope"]):
        pass


def test_hidden_states_strip_padding(tiny_qwen2):
    model, tok = tiny_qwen2
    texts = ["hi", "What is 12 + 30?"]
    batched = hidden_states(model, tok, texts, layers=[0, -1], batch_size=2)
    single = hidden_states(model, tok, texts[1:], layers=[0, -1], batch_size=1)[0]
    assert batched[0].shape[1] == len(tok("hi")["input_ids"])
    assert batched[1].shape == single.shape
    torch.testing.assert_close(batched[1], single, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="layers"):
        hidden_states(model, tok, texts, layers=[99])


def test_write_results_and_metrics_log(tmp_path):
    flat = write_results(
        tmp_path, "demo", {"method": {"acc": 0.5, "n": 3}, "baseline": {"acc": 0.25}}
    )
    assert flat == {"method/acc": 0.5, "method/n": 3.0, "baseline/acc": 0.25}
    payload = json.loads((tmp_path / "results.json").read_text())
    assert payload["metrics"]["baseline"]["acc"] == 0.25 and "torch" in payload["versions"]
    md = (tmp_path / "results.md").read_text()
    assert "| baseline | 0.25 |  |" in md
    with pytest.raises(TypeError, match="must be a number"):
        write_results(tmp_path, "demo", {"m": {"acc": "high"}})
    log = MetricsLogger(tmp_path)
    log.log({"loss": 1.5}, step=1)
    log.log({"loss": 1.0}, step=2)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in rows] == [1.5, 1.0]
    assert markdown_table({"a": {"x": 1.0}}).splitlines()[0] == "| arm | x |"


def test_wandb_is_opt_in_and_offline_without_a_key(tmp_path, monkeypatch):
    from common.registry import compose

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    off = metrics_logger(compose([], run_dir=tmp_path / "a"))
    assert off._wandb is None
    on = metrics_logger(compose(["logger=wandb"], run_dir=tmp_path / "b"))
    on.log({"loss": 2.0}, step=1)
    on.close()
    assert list((tmp_path / "b" / "wandb").glob("offline-run-*"))  # offline, no key, no network
    with pytest.raises(ValueError, match="logger"):
        metrics_logger(compose(["logger=tensorboard"], run_dir=tmp_path / "c"))
