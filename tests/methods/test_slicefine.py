import copy
import math

import pytest
import torch
from torch import nn
from transformers import Trainer, TrainingArguments

from methods.slicefine import (
    SliceFineLinear,
    SliceSwitchCallback,
    apply_slicefine,
    check_optimizer,
    load_slice_state_dict,
    local_ticket_test,
    next_position,
    reset_slice_optimizer_state,
    restricted_grad_ratio,
    spectral_balance,
    task_energy,
)

TARGETS = ["q_proj", "v_proj"]


@pytest.fixture
def lm(tiny_tok):
    from common.tiny import tiny_causal_lm

    model, _ = tiny_causal_lm("qwen2", seed=1, tokenizer=tiny_tok)
    return model.train()


def _ids(tok):
    return torch.tensor([tok("What is 12 + 30? The answer is 42.")["input_ids"]])


@pytest.mark.parametrize("orient", ["row", "column"])
def test_identity_at_init_exact(orient):
    base = nn.Linear(12, 10)
    layer = SliceFineLinear(copy.deepcopy(base), r=3, orient=orient, pos=2)
    x = torch.randn(2, 5, 12)
    assert torch.equal(layer(x), base(x))


@pytest.mark.parametrize("orient", ["row", "column"])
def test_delta_gradient_is_the_weight_gradient_slice(orient):
    base = nn.Linear(12, 10)
    ref = copy.deepcopy(base)
    layer = SliceFineLinear(base, r=3, orient=orient, pos=4)
    x, t = torch.randn(7, 12), torch.randn(7, 10)
    ((layer(x) - t) ** 2).sum().backward()
    ((ref(x) - t) ** 2).sum().backward()
    expected = ref.weight.grad[4:7, :] if orient == "row" else ref.weight.grad[:, 4:7]
    torch.testing.assert_close(layer.delta.grad, expected, atol=1e-6, rtol=1e-6)
    assert layer.base.weight.grad is None  # the full weight stays frozen


def test_locality_and_merge_zero_new_parameters(lm, tiny_tok):
    ref = copy.deepcopy(lm)
    n_params = sum(p.numel() for p in lm.parameters())
    keys = {k: (v.shape, v.dtype) for k, v in lm.state_dict().items()}
    ids = _ids(tiny_tok)
    sm = apply_slicefine(lm, TARGETS, r=4, mode="row", seed=0)
    assert torch.equal(sm(ids).logits, ref(ids).logits)  # identity at initialisation
    # Trainable count = r * d_in per target layer (row slices).
    expected = sum(4 * layer.d_in for layer in sm.layers.values())
    assert sm.trainable_parameters() == expected
    opt = torch.optim.AdamW([p for p in sm.parameters() if p.requires_grad], lr=1e-2)
    check_optimizer(opt)
    for _ in range(3):
        opt.zero_grad()
        sm(ids, labels=ids).loss.backward()
        opt.step()
    ref_mods = dict(ref.named_modules())
    for name, layer in sm.layers.items():
        diff = (layer.effective_weight() - ref_mods[name].weight).abs()
        start, stop = layer.pos, layer.pos + layer.r
        assert diff[start:stop].sum() > 0
        assert diff[:start].sum() == 0 and diff[stop:].sum() == 0
    wrapped_logits = sm(ids).logits.detach()
    merged = sm.merge_and_unload()
    assert all(
        type(m) is nn.Linear for n, m in merged.named_modules() if n.endswith(tuple(TARGETS))
    )
    assert sum(p.numel() for p in merged.parameters()) == n_params
    assert {k: (v.shape, v.dtype) for k, v in merged.state_dict().items()} == keys
    torch.testing.assert_close(merged(ids).logits, wrapped_logits, atol=1e-5, rtol=1e-5)


def test_switch_commits_resets_and_advances(lm, tiny_tok):
    ids = _ids(tiny_tok)
    sm = apply_slicefine(lm, ["q_proj"], r=5, mode="row", seed=3)
    opt = torch.optim.Adam(sm.delta_parameters(), lr=1e-2)
    opt.zero_grad()
    sm(ids, labels=ids).loss.backward()
    opt.step()
    before = {n: layer.effective_weight() for n, layer in sm.layers.items()}
    positions = {n: layer.pos for n, layer in sm.layers.items()}
    sm.switch()
    assert reset_slice_optimizer_state(opt, sm) == len(before)
    for n, layer in sm.layers.items():
        assert torch.equal(layer.effective_weight(), before[n])  # the update is kept
        assert layer.delta.abs().sum() == 0 and opt.state[layer.delta] == {}
        assert layer.pos == next_position(positions[n], 5, layer.d_out)


@pytest.mark.parametrize("dim,r", [(12, 4), (10, 4), (7, 7)])
def test_sweep_covers_every_row(dim, r):
    pos, covered, seen = 0, [], []
    for _ in range(math.ceil(dim / r)):
        covered += list(range(pos, pos + r))
        seen.append(pos)
        pos = next_position(pos, r, dim)
    assert set(covered) == set(range(dim))
    if dim % r == 0:
        assert sorted(covered) == list(range(dim))  # exactly once
    assert pos == 0  # wraps after a full sweep
    assert all(0 <= p <= dim - r for p in seen)


def test_alternate_mode_flips_orientation(lm):
    sm = apply_slicefine(lm, ["q_proj"], r=4, mode="alternate", seed=0)
    layer = next(iter(sm.layers.values()))
    orients = [layer.orient]
    for _ in range(3):
        sm.switch()
        orients.append(layer.orient)
    assert orients == ["column", "row", "column", "row"]
    assert layer.delta.shape == (4, layer.d_in)


def test_alternate_mode_keeps_training_across_flips(lm, tiny_tok):
    ids = _ids(tiny_tok)
    sm = apply_slicefine(lm, ["q_proj"], r=2, mode="alternate", seed=0)
    opt = torch.optim.AdamW(sm.delta_parameters(), lr=1e-2)
    for step in range(6):
        opt.zero_grad()
        sm(ids, labels=ids).loss.backward()
        opt.step()
        if step % 2 == 1:
            sm.switch()
            assert reset_slice_optimizer_state(opt, sm) == len(sm.layers)
            held = [p for g in opt.param_groups for p in g["params"]]
            # The optimiser now trains the new slices (a flip makes new delta Parameters).
            assert {id(p) for p in held} == {id(p) for p in sm.delta_parameters()}
    layer = next(iter(sm.layers.values()))
    assert layer.touched_rows and layer.touched_cols


def test_slice_artifact_roundtrip_bit_exact(lm, tiny_tok):
    base_copy = copy.deepcopy(lm)
    ids = _ids(tiny_tok)
    sm = apply_slicefine(lm, TARGETS, r=3, mode="alternate", seed=0)
    opt = torch.optim.SGD(sm.delta_parameters(), lr=0.1)
    for step in range(4):
        opt.zero_grad()
        sm(ids, labels=ids).loss.backward()
        opt.step()
        if step % 2 == 1:
            sm.switch()
    artifact = sm.slice_state_dict()
    merged = sm.merge_and_unload()
    restored = load_slice_state_dict(base_copy, artifact)
    for (k, a), (_, b) in zip(merged.state_dict().items(), restored.state_dict().items()):
        assert torch.equal(a, b), k
    n_artifact = sum(v.numel() for v in artifact.values())
    assert n_artifact < sum(p.numel() for p in merged.parameters()) / 20  # compact
    key, val = next(iter(artifact.items()))
    with pytest.raises(ValueError, match="shape"):
        load_slice_state_dict(base_copy, {key: val[:, :-1]})
    with pytest.raises(ValueError, match="artifact key"):
        load_slice_state_dict(base_copy, {key.rsplit(".", 1)[0] + ".x-y": val})


def test_callback_switches_inside_hf_trainer(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    class Wrapped(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, x, labels):
            return {"loss": nn.functional.cross_entropy(self.net(x), labels)}

    wrapped = Wrapped()
    sm = apply_slicefine(wrapped, ["net.0"], r=4, mode="row", switch_every=2, init_position="zero")
    data = [{"x": torch.randn(8), "labels": torch.tensor(i % 2)} for i in range(16)]
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        max_steps=5,
        learning_rate=1e-2,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        logging_strategy="no",
    )
    trainer = Trainer(model=sm, args=args, train_dataset=data, callbacks=[SliceSwitchCallback(sm)])
    trainer.train()
    assert sm.num_switches == 2  # after steps 2 and 4
    assert next(iter(sm.layers.values())).pos == 8
    with pytest.raises(ValueError, match="switch_every"):
        SliceSwitchCallback(sm, switch_every=0)


def test_diagnostics_closed_forms():
    block = torch.randn(4, 16)
    balanced = block.repeat(6, 1)  # identical row groups
    assert spectral_balance(balanced, k=6)["cv_energy"] == pytest.approx(0.0, abs=1e-9)
    skewed = balanced.clone()
    skewed[:4] *= 10
    assert spectral_balance(skewed, k=6)["cv_energy"] > 1.0
    g = torch.ones(6, 5)
    mask = torch.zeros(6, 5)
    mask[:2] = 1
    assert restricted_grad_ratio(g, mask) == pytest.approx(1.0)
    labels = torch.arange(60) % 3
    # Features that contain the one-hot labels: their full span holds all the target energy.
    feats = torch.cat([nn.functional.one_hot(labels, 3).float(), torch.randn(60, 5)], dim=1)
    assert task_energy(feats, labels, k=8) == pytest.approx(1.0)
    assert task_energy(torch.randn(60, 8), labels, k=8) < 0.5  # noise features explain little


def test_local_ticket_test_descends_on_a_convex_problem():
    torch.manual_seed(0)
    lin = nn.Linear(6, 4)
    x, t = torch.randn(32, 6), torch.randn(32, 4)
    w0 = lin.weight.detach().clone()
    res = local_ticket_test(lin, lambda: ((lin(x) - t) ** 2).mean(), r=2, n_slices=10, lr=1e-2)
    assert res["win_rate"] == 1.0 and res["mean_delta_loss"] < 0
    assert torch.equal(lin.weight, w0)  # restored


def test_bad_input():
    with pytest.raises(ValueError, match="r must satisfy"):
        SliceFineLinear(nn.Linear(4, 3), r=4, orient="row")
    with pytest.raises(ValueError, match="r must satisfy"):
        SliceFineLinear(nn.Linear(4, 3), r=0)
    with pytest.raises(TypeError, match="nn.Linear"):
        SliceFineLinear(nn.Conv1d(2, 2, 1), r=1)
    with pytest.raises(ValueError, match="switch_every"):
        apply_slicefine(nn.Sequential(nn.Linear(4, 4)), ["0"], r=1, switch_every=0)
    with pytest.raises(ValueError, match="mode"):
        apply_slicefine(nn.Sequential(nn.Linear(4, 4)), ["0"], r=1, mode="diagonal")
    with pytest.raises(TypeError, match="not nn.Linear"):
        apply_slicefine(nn.Sequential(nn.Conv1d(4, 4, 1)), ["0"], r=1)
    with pytest.raises(ValueError, match="no module matches"):
        apply_slicefine(nn.Sequential(nn.Linear(4, 4)), ["nope"], r=1)
    emb = nn.Embedding(10, 4)
    head = nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    with pytest.raises(ValueError, match="tied"):
        apply_slicefine(nn.ModuleDict({"emb": emb, "head": head}), ["head"], r=1)
    model = nn.Sequential(nn.Linear(4, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sm = apply_slicefine(model, ["0"], r=1)
    with pytest.raises(ValueError, match="frozen parameters"):
        check_optimizer(opt)
    with pytest.raises(ValueError, match="already"):
        apply_slicefine(sm.model, ["0"], r=1)


GLUE_COLUMNS = {
    "rte": ("sentence1", "sentence2"),
    "mrpc": ("sentence1", "sentence2"),
    "sst2": ("sentence", None),
    "cola": ("sentence", None),
    "qnli": ("question", "sentence"),
}
VTAB = (
    "caltech101", "oxford_flowers102", "oxford_iiit_pet", "patch_camelyon", "eurosat",
    "diabetic_retinopathy", "kitti",
)  # fmt: skip


def _tiny_bert(folder):
    """A tiny BERT sequence classifier + the offline MiniLM WordPiece tokenizer, saved."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertConfig

    from common.embeddings import default_model_path

    tok = AutoTokenizer.from_pretrained(default_model_path())
    cfg = BertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=2,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_config(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return cfg


def _glue_set(folder, task):
    """A GLUE-format ``save_to_disk`` folder (train + validation) with the task's columns."""
    from datasets import Dataset, DatasetDict

    col_a, col_b = GLUE_COLUMNS[task]
    rows = {col_a: ["a cat sat", "a dog ran", "the car is red", "bread is warm"] * 4}
    if col_b:
        rows[col_b] = ["a cat sat", "nothing", "the car is red", "cold soup"] * 4
    rows["label"] = [0, 1, 0, 1] * 4
    DatasetDict(
        {"train": Dataset.from_dict(rows), "validation": Dataset.from_dict(rows)}
    ).save_to_disk(folder)
    return folder


def _tiny_vit(folder):
    from transformers import AutoModelForImageClassification, ViTConfig, ViTImageProcessor

    torch.manual_seed(0)
    vit = ViTConfig(
        image_size=16, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, num_labels=2,
    )  # fmt: skip
    AutoModelForImageClassification.from_config(vit).save_pretrained(folder)
    ViTImageProcessor(size={"height": 16, "width": 16}).save_pretrained(folder)
    return folder


def _vtab_task(folder, n=8):
    """A VTAB-1K task folder in the NOAH/VPT layout: two colour classes of 20x20 images."""
    from PIL import Image

    (folder / "images").mkdir(parents=True)
    lines = []
    for i in range(n):
        colour = (200, 30, 30) if i % 2 == 0 else (30, 30, 200)
        Image.new("RGB", (20, 20), colour).save(folder / "images" / f"{i}.jpg")
        lines.append(f"images/{i}.jpg {i % 2}")
    (folder / "train800val200.txt").write_text("\n".join(lines) + "\n")
    (folder / "test.txt").write_text("\n".join(lines[:4]) + "\n")
    return folder


def paper_smoke_setup(tmp_path):
    """Tiny BERT / ViT checkpoints and fixture data in the benchmarks' formats."""
    values = {}
    _tiny_bert(tmp_path / "bert")
    values["tiny_bert"] = str(tmp_path / "bert")
    values["tiny_vit"] = str(_tiny_vit(tmp_path / "vit"))
    for task in GLUE_COLUMNS:
        values[f"glue_{task}"] = str(_glue_set(tmp_path / "glue" / task, task))
    for task in VTAB:
        values[f"vtab_{task}"] = str(_vtab_task(tmp_path / "vtab" / task, n=4))
    return values


_SMALL = [
    "+method.trainer.max_steps=1",
    "method.trainer.per_device_train_batch_size=4",
    "method.trainer.per_device_eval_batch_size=4",
    "method.trainer.bf16=false",
]
PAPER_SMOKE = {
    "glue": [
        "model.path={tiny_bert}",
        *[f"benchmark.sets.{t}.path={{glue_{t}}}" for t in GLUE_COLUMNS],
        "method.max_length=16",
        *_SMALL,
    ],
    "slicefine_paper_vtab/vision": [
        "model.path={tiny_vit}",
        *[f"benchmark.sets.{t}.path={{vtab_{t}}}" for t in VTAB],
        *_SMALL,
    ],
}


def test_glue_path_on_a_tiny_local_bert(tmp_path):
    """The paper-scale code path (HF Trainer + callback + merge) on a tiny local model and data."""
    from datasets import load_from_disk
    from transformers import AutoModelForSequenceClassification

    from methods.slicefine.config import SliceSettings
    from methods.slicefine.glue import train_glue, training_args

    cfg = _tiny_bert(tmp_path / "bert")
    data = load_from_disk(_glue_set(tmp_path / "rte", "rte"))
    args = training_args(
        {"max_steps": 4, "per_device_train_batch_size": 4}, tmp_path / "out", seed=0
    )
    sl = SliceSettings(r=2, switch_every=2, targets=["query", "value"])
    res = train_glue(str(tmp_path / "bert"), "rte", data, sl, args)
    assert res["switches"] == 2.0 and 0.0 <= res["accuracy"] <= 1.0
    # Row slices of query/value (2 x 32 each, 2 layers) + the classifier head (trainable).
    head = sum(
        p.numel()
        for n, p in AutoModelForSequenceClassification.from_config(cfg).named_parameters()
        if n.startswith("classifier")
    )
    assert res["trainable_params"] == 2 * 2 * (2 * 32) + head
    merged = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out" / "merged")
    assert type(merged.bert.encoder.layer[0].attention.self.query) is nn.Linear
    with pytest.raises(ValueError, match="task"):
        train_glue(str(tmp_path / "bert"), "imagenet", data, sl, args)
    with pytest.raises(ValueError, match="mode"):
        SliceSettings(mode="diagonal")


def test_vision_stage_on_a_tiny_local_vit_and_vtab1k_layout(tmp_path):
    """The VTAB-1K stage: NOAH/VPT list files -> HF Trainer + callback -> merged ViT, tiny ViT."""
    import json

    from transformers import AutoModelForImageClassification

    from common.registry import compose, run_method
    from methods.slicefine.vision import load_vtab1k

    task = _vtab_task(tmp_path / "vtab" / "eurosat")
    ds = load_vtab1k(tmp_path / "vtab", "eurosat")
    assert ds["train"].num_rows == 8 and ds["test"]["label"] == [0, 1, 0, 1]
    cfg = compose(
        [
            "experiment=slicefine_paper_vtab",
            f"model.path={_tiny_vit(tmp_path / 'vit')}",
            f"benchmark.sets.eurosat.path={task}",
            "method.tasks=[eurosat]",
            "method.slice.r=2",
            "method.slice.switch_every=2",
            "method.trainer.per_device_train_batch_size=4",
            "+method.trainer.max_steps=4",
            "method.trainer.bf16=false",
        ],
        run_dir=str(tmp_path / "run"),
    )
    out = run_method(cfg)
    assert out["slicefine_eurosat/switches"] == 2.0
    assert 0.0 <= out["slicefine_eurosat/accuracy"] <= 1.0
    # Row slices of q_proj/v_proj (2 x 32 each, 2 layers) + the classifier head (trainable), sized
    # to EuroSAT's 10 classes although the list shows two and the checkpoint ships a 2-class head.
    assert out["slicefine_eurosat/trainable_params"] == 2 * 2 * (2 * 32) + (32 * 10 + 10)
    merged = AutoModelForImageClassification.from_pretrained(
        tmp_path / "run" / "eurosat" / "merged"
    )
    assert type(merged.vit.layers[0].attention.q_proj) is nn.Linear
    assert merged.config.architectures == ["ViTForImageClassification"]
    assert merged.config.num_labels == 10
    loaded = json.loads((tmp_path / "run" / "results.json").read_text())["models_loaded"]
    vit = {"spec": str(tmp_path / "vit"), "cls": "ViTForImageClassification"}
    assert {**vit, "dtype": "torch.float32"} in loaded  # through common.models.load_model
    (task / "test.txt").write_text("images/0.jpg zero\n")
    with pytest.raises(ValueError, match="test.txt:1"):
        load_vtab1k(tmp_path / "vtab", "eurosat")


def test_glue_stage_loads_a_classifier_of_the_task_size_through_load_model(tmp_path):
    """A base checkpoint (no head, like roberta-base) whose config says 5 labels: the GLUE stage
    loads the sequence-classification class with RTE's 2 labels, in float32, right padding."""
    import json

    from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertModel

    from common.registry import compose, run_method

    cfg = _tiny_bert(tmp_path / "ref")
    cfg.num_labels = 5
    torch.manual_seed(0)
    BertModel(cfg).save_pretrained(tmp_path / "bert")
    AutoTokenizer.from_pretrained(tmp_path / "ref").save_pretrained(tmp_path / "bert")
    run_method(
        compose(
            [
                "experiment=slicefine_paper",
                f"model.path={tmp_path / 'bert'}",
                f"benchmark.sets.rte.path={_glue_set(tmp_path / 'rte', 'rte')}",
                "method.tasks=[rte]",
                "method.max_length=16",
                *_SMALL,
            ],
            run_dir=str(tmp_path / "run"),
        )
    )
    merged = tmp_path / "run" / "rte" / "merged"
    model = AutoModelForSequenceClassification.from_pretrained(merged)
    assert model.config.architectures == ["BertForSequenceClassification"]
    assert model.config.num_labels == 2 and model.classifier.out_features == 2
    assert AutoTokenizer.from_pretrained(merged).padding_side == "right"
    loaded = json.loads((tmp_path / "run" / "results.json").read_text())["models_loaded"]
    bert = {"spec": str(tmp_path / "bert"), "cls": "BertForSequenceClassification"}
    assert {**bert, "dtype": "torch.float32"} in loaded


def test_vision_stage_checks_every_task_before_the_first_model(tmp_path, monkeypatch):
    """A missing image in the third task, or a label past the task's classes, stops the stage
    before any model loads or any task trains."""
    import common.models
    import methods.slicefine.vision as vision
    from common.registry import compose, run_method

    calls = []
    monkeypatch.setattr(common.models, "load_model", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(vision, "train_vision", lambda *a, **k: calls.append(a))
    tasks = VTAB[:3]
    args = [
        "experiment=slicefine_paper_vtab",
        "model.path=unused",
        f"method.tasks=[{','.join(tasks)}]",
        *[f"benchmark.sets.{t}.path={_vtab_task(tmp_path / t, n=4)}" for t in tasks],
    ]
    (tmp_path / tasks[2] / "images" / "3.jpg").unlink()
    with pytest.raises(FileNotFoundError, match=rf"{tasks[2]}: .*train800val200.txt:4: image "):
        run_method(compose(args, run_dir=str(tmp_path / "run")))
    assert calls == []
    (tmp_path / tasks[2] / "images" / "3.jpg").write_bytes(
        (tmp_path / tasks[2] / "images" / "1.jpg").read_bytes()
    )
    (tmp_path / tasks[1] / "test.txt").write_text("images/0.jpg 102\n")  # flowers: 102 classes
    with pytest.raises(ValueError, match=rf"{tasks[1]} .*test.txt, test\): labels \[102\]"):
        run_method(compose(args, run_dir=str(tmp_path / "run")))
    assert calls == []


def test_paper_stages_reject_bad_configs():
    from common.config import ConfigError
    from common.registry import compose

    with pytest.raises(Exception, match="mode"):
        compose(["experiment=slicefine_paper", "method.slice.mode=diagonal"])
    with pytest.raises(Exception, match="r"):
        compose(["experiment=slicefine_paper", "method.slice.r=abc"])
    with pytest.raises(ConfigError, match="learnin_rate"):
        compose(["experiment=slicefine_paper", "+method.trainer.learnin_rate=1"])
    with pytest.raises(ConfigError, match="supported kinds"):
        compose(["experiment=slicefine_paper", "model=tiny-qwen2"])


@pytest.mark.parametrize("train_bias", [False, True])
def test_train_bias_option_of_the_paper_paths(train_bias):
    """``train_bias`` (unknown in the paper; the authors' RoCoFT.py trains biases, ``bias=True``):
    the target layers' biases are trainable, counted, updated and kept by the merge only when on."""
    from transformers import AutoModelForSequenceClassification, BertConfig

    from methods.slicefine.config import SliceSettings, ToyConfig
    from methods.slicefine.glue import wrap_classifier

    assert SliceSettings().train_bias is False and ToyConfig().train_bias is False
    cfg = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, num_labels=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(cfg)
    sf = wrap_classifier(
        model, SliceSettings(r=2, targets=["query", "value"], train_bias=train_bias)
    )
    head = 16 * 2 + 2
    biases = 2 * 2 * 16  # query + value biases of 2 layers
    assert sf.trainable_parameters() == 2 * 2 * (2 * 16) + head + biases * train_bias
    query = sf.model.bert.encoder.layer[0].attention.self.query.base
    before = query.bias.detach().clone()
    opt = torch.optim.SGD([p for p in sf.parameters() if p.requires_grad], lr=0.5)
    ids = torch.randint(0, 50, (4, 6), generator=torch.Generator().manual_seed(0))
    sf(input_ids=ids, labels=torch.tensor([0, 1, 0, 1])).loss.backward()
    opt.step()
    assert torch.equal(query.bias, before) is not train_bias
    merged = sf.merge_and_unload()
    merged_bias = merged.bert.encoder.layer[0].attention.self.query.bias
    assert torch.equal(merged_bias, before) is not train_bias


@pytest.mark.parametrize("orient", ["row", "column"])
@pytest.mark.parametrize("lead", [(2, 7), (7,)])
def test_fused_slice_node_matches_dense_effective_weight(orient, lead):
    # Issue 33 point 4: the one-node forward/backward equals y = x W_effᵀ + b in value and in every
    # gradient (input, slice, bias), with a non-zero slice so the slice's ∂x term is exercised; 3-D
    # and 2-D inputs, and a non-contiguous upstream gradient (as after an attention transpose).
    torch.manual_seed(0)
    layer = SliceFineLinear(nn.Linear(12, 10), r=3, orient=orient, pos=5)
    layer.base.bias.requires_grad_(True)
    with torch.no_grad():
        layer.delta.normal_()
    w_eff = layer.effective_weight().requires_grad_(True)
    b_ref = layer.base.bias.detach().clone().requires_grad_(True)
    x = torch.randn(*lead, 12, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    g = torch.randn(10, *lead).movedim(0, -1)  # [..., 10], non-contiguous
    y = layer(x)
    y_ref = nn.functional.linear(x_ref, w_eff, b_ref)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    (y * g).sum().backward()
    (y_ref * g).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(layer.base.bias.grad, b_ref.grad, atol=1e-5, rtol=1e-5)
    sl = w_eff.grad[5:8, :] if orient == "row" else w_eff.grad[:, 5:8]
    torch.testing.assert_close(layer.delta.grad, sl, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("mode", ["row", "alternate"])
def test_saved_artifact_is_exactly_the_touched_slices(lm, tiny_tok, tmp_path, mode):
    # Issue 33 point 4: the file round-trips bit-exactly and its tensor payload is the touched
    # entries once each (brute-force mask count), not whole matrices.
    import json
    import struct

    base_copy = copy.deepcopy(lm)
    ids = _ids(tiny_tok)
    sm = apply_slicefine(lm, TARGETS, r=3, mode=mode, seed=0)
    opt = torch.optim.SGD(sm.delta_parameters(), lr=0.1)
    for step in range(6):
        opt.zero_grad()
        sm(ids, labels=ids).loss.backward()
        opt.step()
        if step % 2 == 1:
            sm.switch()
    touched = 0
    for layer in sm.layers.values():
        mask = torch.zeros(layer.d_out, layer.d_in, dtype=torch.bool)
        mask[sorted(layer.touched_rows), :] = True
        mask[:, sorted(layer.touched_cols)] = True
        touched += int(mask.sum()) * layer.base.weight.element_size()
    path = tmp_path / "slices.safetensors"
    size = sm.save_slices(path)
    (header_len,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert size - 8 - header_len == touched  # payload = touched-slice bytes exactly
    header = json.loads(path.read_bytes()[8 : 8 + header_len])
    assert all(k.rsplit(".", 2)[1] in ("rows", "cols") for k in header if k != "__metadata__")
    merged = sm.merge_and_unload()
    restored = load_slice_state_dict(base_copy, path)
    for (k, a), (_, b) in zip(merged.state_dict().items(), restored.state_dict().items()):
        assert torch.equal(a, b), k


def test_static_slice_artifact_no_larger_than_peft_lora_adapter(tmp_path):
    # Issue 33 point 4: at matched trainable parameters (row slice 2r of a square d×d matrix has
    # 2r·d = LoRA rank r's r·(d+d)), the saved slice file is no larger than PEFT's adapter file.
    from peft import LoraConfig, get_peft_model

    def net():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))

    lora = get_peft_model(net(), LoraConfig(r=4, target_modules=["0", "2"]))
    lora.save_pretrained(tmp_path / "lora")
    lora_size = (tmp_path / "lora" / "adapter_model.safetensors").stat().st_size
    sm = apply_slicefine(net(), ["0", "2"], r=8, mode="row", switch_every=None)
    n_lora = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    assert sm.trainable_parameters() == n_lora
    assert sm.save_slices(tmp_path / "s.safetensors") <= lora_size
