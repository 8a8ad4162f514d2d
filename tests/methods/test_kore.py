"""Tests for methods.kore.

Official-code fixture: ``methods/kore/fixtures/official_inits.json`` holds the initialisations computed by
KORE-LMM/KORE (commit 9f0c25672671f064fc261113fba8e3fc3ed8f25a, ``lora_null/adapterlib/decomposition.py``:
``decompose_to_adapter3`` singular_aware with and without ``first_eigen``, ``decompose_to_adapter2``
singular_aware_2, ``CorDA_adapter`` with ``sigma_fuse="UV"``) on a seeded 7x6 weight and a 6x6 covariance
(how: docs/methods/kore.md).
"""

import json
import math
from pathlib import Path

import pytest
import torch

from methods.kore import (
    apply_kore,
    avg_score,
    collect_input_covariances,
    cover_exact_match,
    effective_weights,
    export_standard_lora,
    hars,
    kore_decompose,
    retention_bound,
    smallest_eigvecs,
    token_f1,
)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matmuls: one thread avoids contention on the shared 2-core box; restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _psd(d, rank=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(d, rank or 2 * d, generator=g, dtype=torch.float64)
    return X @ X.T, X


def _lm(seed=0):
    from common.tiny import tiny_causal_lm

    model, tok = tiny_causal_lm("llama", seed=seed)
    return model.eval(), tok


def _batches(tok, n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(3, 200, (2, 7), generator=g)
        mask = torch.ones_like(ids)
        mask[1, :3] = 0  # left padding in row 1
        out.append({"input_ids": ids, "attention_mask": mask})
    return out


# ---------------------------------------------------------------- linear algebra


@pytest.mark.parametrize("r", [1, 3, 8])
def test_zero_change_identity_and_rank(r):
    torch.manual_seed(r)
    W0 = torch.randn(12, 8, dtype=torch.float64)
    C, _ = _psd(8, seed=r)
    f = kore_decompose(W0, C, r)
    assert torch.allclose(f.W_res + f.B @ f.A, W0, atol=1e-10)
    assert torch.linalg.matrix_rank(f.B @ f.A) <= r
    U, _ = smallest_eigvecs(C, r)
    P = U @ U.T
    assert torch.allclose(f.A, f.A @ P, atol=1e-10)  # rows of A in span(U_hat)
    assert torch.allclose(f.W_res, W0 @ (torch.eye(8, dtype=torch.float64) - P), atol=1e-10)


def test_nullspace_selection_matches_smallest_eigenvalues():
    C, _ = _psd(10, seed=3)
    U, ev = smallest_eigvecs(C, 4)
    assert torch.allclose(U.T @ U, torch.eye(4, dtype=torch.float64), atol=1e-10)
    all_ev = torch.linalg.eigvalsh(C)
    assert torch.allclose(torch.linalg.eigvalsh(U.T @ C @ U), all_ev[:4], atol=1e-8)
    assert torch.allclose(ev, all_ev[:4], atol=1e-8)
    assert torch.allclose(U.T @ C @ U, torch.diag(ev), atol=1e-8)  # diagonal, smallest eigenvalues
    # the row space of A is exactly span(U_hat): C restricted to it has the r smallest eigenvalues
    f = kore_decompose(torch.randn(6, 10, dtype=torch.float64), C, 4)
    Q, _ = torch.linalg.qr(f.A.T)  # [10, 4] orthonormal basis of A's rows
    assert torch.allclose(torch.linalg.eigvalsh(Q.T @ C @ Q), all_ev[:4], atol=1e-8)


def test_exact_retention_on_low_rank_data():
    torch.manual_seed(0)
    d_in, k, r = 12, 7, 5
    Q, _ = torch.linalg.qr(torch.randn(d_in, k, dtype=torch.float64))
    X = Q @ torch.randn(k, 50, dtype=torch.float64)
    W0 = torch.randn(9, d_in, dtype=torch.float64)
    f = kore_decompose(W0, X @ X.T, r)
    assert (f.A @ X).norm() < 1e-10
    assert f.null_energy < 1e-12
    B_new = torch.randn_like(f.B) * 10
    assert torch.allclose((f.W_res + B_new @ f.A) @ X, W0 @ X, atol=1e-9)


def test_retention_bound_holds_on_full_rank_data():
    torch.manual_seed(1)
    C, X = _psd(16, seed=5)
    W0 = torch.randn(10, 16, dtype=torch.float64)
    f = kore_decompose(W0, C, 6)
    for s in range(5):
        dB = torch.randn(10, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(s))
        drift = (dB @ f.A @ X).norm().item()
        bound = retention_bound(dB, f.A, f.null_eigvals)
        assert drift <= bound * (1 + 1e-9)
        # the same update placed in the top-eigenvalue directions drifts much more
    U_top = torch.linalg.eigh(C)[1][:, -6:]
    assert (dB @ U_top.T @ X).norm() > (dB @ (f.A / f.A.norm(dim=1, keepdim=True)) @ X).norm()
    assert math.isclose(
        f.null_energy, f.null_eigvals.sum().item() / torch.trace(C).item(), rel_tol=1e-9
    )


@pytest.mark.parametrize(
    "kwargs,exc,msg",
    [
        ({"r": 9}, ValueError, "exceeds"),
        ({"r": 0}, ValueError, ">= 1"),
        ({"r": 2.0}, TypeError, "int"),
        ({"C": -torch.eye(8, dtype=torch.float64) + 0.01}, ValueError, "positive semi-definite"),
        ({"C": torch.zeros(8, 8)}, ValueError, "all zeros"),
        ({"C": torch.full((8, 8), float("nan"))}, ValueError, "NaN"),
        ({"C": torch.eye(7)}, ValueError, "d_in=8"),
        ({"C": torch.triu(torch.ones(8, 8))}, ValueError, "symmetric"),
        ({"sigma_fuse": "X"}, ValueError, "sigma_fuse"),
    ],
)
def test_bad_input_decompose(kwargs, exc, msg):
    args = {"W0": torch.randn(12, 8), "C": torch.eye(8), "r": 2, **kwargs}
    with pytest.raises(exc, match=msg):
        kore_decompose(**args)


# ---------------------------------------------------------------- covariance hook


def test_covariance_hook_matches_hand_computation_and_masks_padding():
    model, tok = _lm()
    batches = _batches(tok, n=2)
    name = "model.layers.0.mlp.down_proj"
    covs = collect_input_covariances(model, batches, lambda n, m: n == name)
    # by hand: per sample, masked tokens, divide by |max|, sum x^T x / 256
    from common.activations import capture

    want = torch.zeros(128, 128)
    with capture(model, [name], what="input") as store:
        for b in batches:
            model(**b)
    for b, x in zip(batches, store[name]):
        for i in range(x.shape[0]):
            xi = x[i][b["attention_mask"][i].bool()]
            xi = xi / xi.max().abs()
            want += xi.T @ xi / 256
    C = covs[name]
    assert torch.allclose(C, want, atol=1e-5, rtol=1e-4)
    assert torch.allclose(C, C.T, atol=1e-6)
    ev = torch.linalg.eigvalsh(C.double())
    assert ev.min() >= -1e-6 * ev.max()
    # padding excluded: changing padded tokens does not change C
    b2 = [dict(b) for b in batches]
    for b in b2:
        b["input_ids"] = b["input_ids"].clone()
        b["input_ids"][1, :3] = 5
    C2 = collect_input_covariances(model, b2, lambda n, m: n == name)[name]
    assert torch.allclose(C, C2, atol=1e-5)


def test_covariance_bad_input():
    model, tok = _lm()
    f = lambda n, m: n.endswith("q_proj")  # noqa: E731
    with pytest.raises(ValueError, match="attention_mask"):
        collect_input_covariances(model, [{"input_ids": torch.ones(2, 4, dtype=torch.long)}], f)
    with pytest.raises(ValueError, match="zero tokens"):
        collect_input_covariances(model, [], f)
    with pytest.raises(ValueError, match="normalize"):
        collect_input_covariances(model, [], f, normalize="l2")
    with pytest.raises(ValueError, match="nn.Linear"):
        collect_input_covariances(model, [], lambda n, m: n.endswith("input_layernorm"))


OFFICIAL = json.loads(
    (Path(__file__).resolve().parents[2] / "methods/kore/fixtures/official_inits.json").read_text()
)


@pytest.mark.parametrize(
    ("case", "kw"),
    [
        ("kore", {}),
        ("largest_eig", {"eigvecs": "largest"}),
        ("lora_null_v1", {"init": "lora_null_v1"}),
    ],
)
def test_initialisations_match_official_code(case, kw):
    W0 = torch.tensor(OFFICIAL["W0"], dtype=torch.float64)
    C = torch.tensor(OFFICIAL["C"], dtype=torch.float64)
    want = {k: torch.tensor(v, dtype=torch.float64) if isinstance(v, list) else v
            for k, v in OFFICIAL["cases"][case].items()}  # fmt: skip
    f = kore_decompose(W0, C, OFFICIAL["r"], **kw)
    assert torch.allclose(f.W_res, want["W_res"], atol=1e-4)
    assert torch.allclose(f.B @ f.A, want["BA"], atol=1e-4)  # sign-invariant product
    assert torch.allclose(f.A.T @ f.A, want["AtA"], atol=1e-4)  # row space (and scale) of A
    assert float(f.B.norm()) == pytest.approx(want["B_norm"], abs=1e-4)
    assert torch.allclose(f.W_res + f.B @ f.A, W0, atol=1e-10)  # every init keeps W0 at step 0


def test_largest_eigvecs_ablation_lives_in_the_high_energy_directions():
    C, _ = _psd(8, rank=32, seed=4)
    W0 = torch.randn(5, 8, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    small = kore_decompose(W0, C, 3)
    large = kore_decompose(W0, C, 3, eigvecs="largest")
    evals = torch.linalg.eigvalsh(C)
    assert torch.allclose(large.null_eigvals, evals[-3:], atol=1e-8)
    assert large.null_energy > 0.5 > small.null_energy
    # A C A^T: tiny in the null space, large in the top directions
    e_small = torch.trace(small.A @ C @ small.A.T) / torch.trace(small.A @ small.A.T)
    e_large = torch.trace(large.A @ C @ large.A.T) / torch.trace(large.A @ large.A.T)
    assert e_large > 2 * e_small
    with pytest.raises(ValueError, match="eigvecs"):
        kore_decompose(W0, C, 3, eigvecs="top")
    with pytest.raises(ValueError, match="init"):
        kore_decompose(W0, C, 3, init="pissa")


def test_lora_null_v1_init_is_zero_B_over_the_null_basis():
    C, _ = _psd(8, rank=32, seed=6)
    W0 = torch.randn(5, 8, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    f = kore_decompose(W0, C, 3, init="lora_null_v1")
    U_hat, _ = smallest_eigvecs(C, 3)
    assert torch.equal(f.B, torch.zeros(5, 3, dtype=torch.float64))
    assert torch.equal(f.W_res, W0)
    assert torch.allclose(f.A @ f.A.T, torch.eye(3, dtype=torch.float64), atol=1e-10)
    assert torch.allclose(f.A.T @ f.A, U_hat @ U_hat.T, atol=1e-8)


# ---------------------------------------------------------------- PEFT wrapping


@pytest.fixture(scope="module")
def kore_setup():
    torch.manual_seed(0)
    model, tok = _lm(seed=2)
    calib = _batches(tok, n=3, seed=1)
    covs = collect_input_covariances(model, calib)
    probe = _batches(tok, n=1, seed=7)[0]
    with torch.no_grad():
        ref = model(**probe).logits
    W0 = {n: w.clone() for n, w in effective_weights(model).items()}
    return model, tok, covs, probe, ref, W0, calib


def test_apply_kore_identity_freeze_and_export(kore_setup):
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict

    from common.tiny import tiny_causal_lm

    model, tok, covs, probe, ref, W0, _ = kore_setup
    pm = apply_kore(model, covs, r=4, target_modules=TARGETS)
    with torch.no_grad():
        out = pm(**probe).logits
    assert torch.allclose(out, ref, atol=1e-4)
    trainable = {n for n, p in pm.named_parameters() if p.requires_grad}
    assert trainable and all("lora_B" in n for n in trainable)
    assert len(trainable) == 2 * len(TARGETS)
    before = {n: p.detach().clone() for n, p in pm.named_parameters()}
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=1e-2)
    labels = probe["input_ids"].masked_fill(probe["attention_mask"] == 0, -100)
    pm.train()
    pm(**probe, labels=labels).loss.backward()
    opt.step()
    pm.eval()
    for n, p in pm.named_parameters():
        changed = not torch.equal(p, before[n])
        assert changed == ("lora_B" in n), n
    # standard-LoRA export: W0 + (B' - B) A == merged weight, and it reproduces the logits
    sd = export_standard_lora(pm)
    eff = effective_weights(pm)
    for key, A in sd.items():
        if not key.endswith("lora_A.weight"):
            continue
        n = key[len("base_model.model.") : -len(".lora_A.weight")]
        dB = sd[key.replace("lora_A", "lora_B")]
        assert torch.allclose(W0[n] + dB @ A, eff[n], atol=1e-5)
    base, _ = tiny_causal_lm("llama", seed=2)
    std = get_peft_model(base.eval(), LoraConfig(r=4, lora_alpha=4, target_modules=TARGETS))
    set_peft_model_state_dict(std, sd)
    with torch.no_grad():
        assert torch.allclose(std(**probe).logits, pm(**probe).logits, atol=1e-4)
    # already wrapped
    with pytest.raises(ValueError, match="already wrapped"):
        apply_kore(pm, covs, r=4, target_modules=TARGETS)


def test_apply_kore_unfrozen_A_and_bad_input(kore_setup):
    _, _, covs, *_ = kore_setup
    model, _ = _lm(seed=3)
    with pytest.raises(ValueError, match="exceeds"):
        apply_kore(model, covs, r=65, target_modules=["q_proj"])
    with pytest.raises(ValueError, match="no covariance"):
        apply_kore(model, {}, r=2, target_modules=["q_proj"])
    with pytest.raises(ValueError, match="matched no module"):
        apply_kore(model, covs, r=2, target_modules=["nope_proj"])
    with pytest.raises(ValueError, match="nn.Linear"):
        apply_kore(model, covs, r=2, target_modules=["input_layernorm"])
    with pytest.raises(ValueError, match="init"):
        apply_kore(model, covs, r=2, target_modules=["q_proj"], init="x")
    pm = apply_kore(model, covs, r=2, target_modules=["q_proj"], freeze_A=False)
    trainable = {n for n, p in pm.named_parameters() if p.requires_grad}
    assert any("lora_A" in n for n in trainable)
    with pytest.raises(ValueError, match="trainable"):
        export_standard_lora(pm)


@pytest.mark.parametrize("kw", [{"init": "lora_null_v1"}, {"eigvecs": "largest"}])
def test_apply_kore_ablation_inits_keep_the_model(kore_setup, kw):
    _, tok, covs, probe, _, _, _ = kore_setup
    model, _ = _lm(seed=2)
    with torch.no_grad():
        ref = model(**probe).logits
    w_q = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    pm = apply_kore(model, covs, r=4, target_modules=["q_proj", "v_proj"], **kw)
    with torch.no_grad():
        assert torch.allclose(pm(**probe).logits, ref, atol=1e-4)
    layer = pm.base_model.model.model.layers[0].self_attn.q_proj
    if kw.get("init") == "lora_null_v1":  # base weight untouched, B starts at zero
        assert torch.equal(layer.get_base_layer().weight, w_q)
        assert torch.count_nonzero(layer.lora_B["default"].weight) == 0
    else:
        assert not torch.allclose(layer.get_base_layer().weight, w_q)


# ---------------------------------------------------------------- metrics


def test_metrics_hand_cases_and_paper_rows():
    assert cover_exact_match("", "Paris") == 0.0
    assert cover_exact_match("It is  paris, France", "Paris") == 1.0
    assert token_f1("", "a b") == 0.0
    assert token_f1("a b", "a b") == 1.0
    assert math.isclose(token_f1("a b c d", "a b"), 2 * 0.5 * 1 / 1.5)
    assert abs(hars(35.96, 40.00, 7.12, 46.74) - 82.81) < 0.02
    assert abs(hars(16.77, 33.47, 7.12, 46.74) - 63.83) < 0.03
    assert abs(hars(38.68, 45.35, 7.70, 49.51) - 85.46) < 0.03  # LLaVA-13B row
    assert abs(avg_score(35.96, 40.00) - 37.98) < 1e-9
    with pytest.raises(ValueError, match="ka0"):
        hars(10, 10, 0, 10)
    with pytest.raises(ValueError, match="ka must"):
        hars(0, 10, 1, 10)
    with pytest.raises(ValueError, match="empty"):
        cover_exact_match("x", " ")


# ---------------------------------------------------------------- augmentation


def _item():
    from methods.kore.augment import KnowledgeItem

    return KnowledgeItem(
        id="n1",
        kind="news",
        type="Sports",
        name="Lakeside FC wins the cup",
        text="Lakeside FC beat Hill United 2-1 in the final held in Oslo.",
        image="orig.jpg",
    )


def test_augmentation_builds_tree_with_scripted_llm():
    import numpy as np

    from common.llm import ScriptedChat
    from methods.kore.augment import LocalImageRetriever, build_knowledge_tree

    quads = (
        '```json\n[{"question": "Whom did Lakeside FC beat?", "answer": "Hill United", '
        '"subject": "Lakeside FC", "hypernym": "football club"},'
        '{"question": "Where was Oslo?", "answer": "Oslo", "subject": "Oslo", "hypernym": "city"}]\n```'
    )
    llm = ScriptedChat(
        ['["Who won?", "What was the score?"]', "Lakeside FC.", "2-1.", "A final won 2-1.", quads]
    )
    index = {
        "Lakeside FC wins the cup a": "a.jpg",
        "Lakeside FC the cup b": "b.jpg",
        "Lakeside FC cup dup": "orig.jpg",
        "Lakeside FC football club": "club.jpg",
    }
    vec = {
        "orig.jpg": [1, 0, 0],
        "a.jpg": [0.9, 0.1, 0],
        "b.jpg": [0.8, 0.3, 0],
        "club.jpg": [0, 1, 0],
    }
    embed = lambda imgs: np.array([vec[i] for i in imgs], dtype=float)  # noqa: E731
    recs, report = build_knowledge_tree(_item(), llm, LocalImageRetriever(index), embed)
    kinds = [r["id"].split("_", 1)[1] for r in recs]
    assert kinds == ["dialogue", "recognition", "caption", "vqa_0"]
    dia = recs[0]["conversations"]
    assert len(dia) == 6 and dia[0]["value"].startswith("<image>\n")
    assert [c["value"] for c in dia[3::2]] == ["Lakeside FC.", "2-1."]
    assert recs[1]["image"] == "a.jpg" and recs[2]["image"] == "b.jpg"  # duplicate excluded
    assert recs[2]["conversations"][1]["value"].startswith("The image depicts Lakeside FC")
    assert recs[3]["conversations"][1]["value"] == "Hill United" and recs[3]["image"] == "club.jpg"
    assert report == {"parse_errors": 0, "dropped_vqa": 1, "skipped_branches": 0}
    assert len(llm.calls) == 5


def test_augmentation_bad_input():
    from common.llm import ScriptedChat
    from methods.kore.augment import (
        AugmentationParseError,
        KnowledgeItem,
        build_dialogue,
        parse_quadruplets,
        select_images,
    )

    with pytest.raises(AugmentationParseError, match="malformed"):
        parse_quadruplets('[{"question": "q",]')
    with pytest.raises(AugmentationParseError, match="string fields"):
        parse_quadruplets('[{"question": "q", "answer": 1}]')
    with pytest.raises(AugmentationParseError, match="no JSON list"):
        build_dialogue(_item(), ScriptedChat(["I cannot help."]))
    with pytest.raises(ValueError, match="text"):
        KnowledgeItem(id="x", kind="entity", type="t", name="n", text=" ")
    with pytest.raises(ValueError, match="kind"):
        KnowledgeItem(id="x", kind="movie", type="t", name="n", text="t")
    qs = "[" + ",".join(f'"q{i}?"' for i in range(12)) + "]"
    rec = build_dialogue(_item(), ScriptedChat([qs] + ["a"] * 10), n_max=10)
    assert len(rec["conversations"]) == 2 + 2 * 10  # truncated to n_max
    import numpy as np

    same = lambda imgs: np.ones((len(imgs), 3))  # noqa: E731
    assert select_images("o", ["x", "y"], same) == []


# ---------------------------------------------------------------- tiny LLaVA


def test_tiny_llava_one_kore_step():
    from PIL import Image

    from common.tiny import tiny_llava

    torch.manual_seed(0)
    model, proc = tiny_llava(seed=0)
    img = Image.fromarray((torch.rand(32, 32, 3) * 255).byte().numpy())
    batch = dict(proc(text="<image> What is shown?", images=img, return_tensors="pt"))
    covs = collect_input_covariances(model, [batch])
    assert covs and all("language_model" in n for n in covs)
    with torch.no_grad():
        ref = model(**batch).logits
    pm = apply_kore(model, covs, r=4, target_modules=list(covs))
    with torch.no_grad():
        assert torch.allclose(pm(**batch).logits, ref, atol=1e-4)
    before = {n: p.detach().clone() for n, p in pm.named_parameters()}
    opt = torch.optim.AdamW([p for p in pm.parameters() if p.requires_grad], lr=1e-2)
    pm.train()
    loss = pm(**batch, labels=batch["input_ids"]).loss
    loss.backward()
    opt.step()
    changed = {n for n, p in pm.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_B" in n for n in changed)


def test_paper_path_on_tiny_llava(tmp_path):
    import json

    from PIL import Image
    from safetensors.torch import load_file

    from common.registry import compose, run_method

    torch.manual_seed(0)
    Image.fromarray((torch.rand(32, 32, 3) * 255).byte().numpy()).save(tmp_path / "0.png")
    recs = [
        {
            "id": "a",
            "image": "0.png",
            "conversations": [
                {"from": "human", "value": "<image>\nWho is this?"},
                {"from": "gpt", "value": "Ann Lee."},
                {"from": "human", "value": "Where?"},
                {"from": "gpt", "value": "Oslo."},
            ],
        }
    ]
    (tmp_path / "d.json").write_text(json.dumps(recs))
    from common.tiny import tiny_llava
    from methods.kore.paper import encode_record

    _, proc = tiny_llava()
    enc = encode_record(recs[0], proc, str(tmp_path))
    kept = enc["input_ids"][enc["labels"] != -100]
    text = proc.tokenizer.decode(kept)
    assert "Ann Lee." in text and "Oslo." in text and "Who" not in text and "Where" not in text
    with pytest.raises(ValueError, match="alternate"):
        encode_record({"id": "x", "conversations": [{"from": "gpt", "value": "a"}]}, proc)
    cfg = compose(
        [
            "experiment=kore_paper",
            "model=tiny-llava",
            f"method.paper.data_path={tmp_path / 'd.json'}",
            f"method.paper.calib_path={tmp_path / 'd.json'}",
            f"method.paper.image_root={tmp_path}",
            "method.paper.rank=4",
            "+method.trainer.max_steps=1",
            "method.trainer.gradient_accumulation_steps=1",
            "method.trainer.bf16=false",
            "method.trainer.gradient_checkpointing=false",
        ],
        run_dir=str(tmp_path / "run"),
    )
    out = run_method(cfg)
    assert math.isfinite(out["kore_paper/train_loss"]) and out["kore_paper/n_layers"] == 14
    sd = load_file(str(tmp_path / "run" / "kore" / "kore_lora.safetensors"))
    assert len(sd) == 28 and all("language_model" in k for k in sd)


# ---------------------------------------------------------------- EVOKE evaluation (paper scale)


def test_evoke_scoring_hand_cases_and_bad_input(tmp_path):
    import json

    from methods.kore.evoke import load_questions, score_answers

    qs = [
        {"question_id": "q1", "image": "a.jpg", "text": "Who won?", "answer": "Ann Lee"},
        {"question_id": "q2", "image": "b.jpg", "text": "Where?"},
    ]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    (tmp_path / "gold.json").write_text(json.dumps({"q2": "in Oslo"}))
    questions, gold = load_questions(tmp_path / "q.jsonl", tmp_path / "gold.json")
    assert gold == {"q1": "Ann Lee", "q2": "in Oslo"}
    ans = [
        {"question_id": "q1", "text": "It was ann  lee"},  # CEM 1, F1 2*(2/4*1)/(2/4+1) = 2/3
        {"question_id": "q2", "text": "Bergen"},  # CEM 0, F1 0
    ]
    m = score_answers(ans, gold)
    assert m["cem"] == pytest.approx(50.0)
    assert m["f1"] == pytest.approx(100 * (2 / 3) / 2)
    assert m["ka"] == pytest.approx((m["cem"] + m["f1"]) / 2) and m["n"] == 2
    with pytest.raises(ValueError, match="no gold"):
        load_questions(tmp_path / "q.jsonl")
    with pytest.raises(ValueError, match="unknown question_id"):
        score_answers([{"question_id": "q9", "text": "x"}], gold)


def test_chat_style_masks_answers_and_evoke_driver_on_tiny_llava(tmp_path):
    import json

    from PIL import Image

    from common.registry import compose, run_method
    from common.tiny import tiny_llava
    from methods.kore.paper import encode_record

    torch.manual_seed(0)
    Image.fromarray((torch.rand(32, 32, 3) * 255).byte().numpy()).save(tmp_path / "0.png")
    rec = {
        "id": "a",
        "image": "0.png",
        "conversations": [
            {"from": "human", "value": "<image>\nWho is this?"},
            {"from": "gpt", "value": "Ann Lee."},
            {"from": "human", "value": "Where?"},
            {"from": "gpt", "value": "Oslo."},
        ],
    }
    _, proc = tiny_llava()
    enc = encode_record(rec, proc, str(tmp_path), style="chat")  # Qwen2.5-VL-style rendering
    kept = proc.tokenizer.decode(enc["input_ids"][enc["labels"] != -100])
    assert "Ann Lee." in kept and "Oslo." in kept and "Who" not in kept and "Where" not in kept
    with pytest.raises(ValueError, match="prompt_style"):
        encode_record(rec, proc, str(tmp_path), style="alpaca")

    # Train one KORE step (chat style), then evaluate base and adapter with the EVOKE driver.
    (tmp_path / "d.json").write_text(json.dumps([rec]))
    train_cfg = compose(
        [
            "experiment=kore_paper_qwen",
            "model=tiny-llava",
            f"method.paper.data_path={tmp_path / 'd.json'}",
            f"method.paper.calib_path={tmp_path / 'd.json'}",
            f"method.paper.image_root={tmp_path}",
            "method.paper.rank=4",
            "+method.trainer.max_steps=1",
            "method.trainer.gradient_accumulation_steps=1",
            "method.trainer.bf16=false",
            "method.trainer.gradient_checkpointing=false",
            "method.trainer.learning_rate=0.5",
        ],
        run_dir=str(tmp_path / "train"),
    )
    assert math.isfinite(run_method(train_cfg)["kore_paper/train_loss"])
    q = {"question_id": "q1", "image": "0.png", "text": "Who is this?", "answer": "Ann Lee"}
    (tmp_path / "q.jsonl").write_text(json.dumps(q) + "\n")
    outs = {}
    for name, adapter in (("base", "null"), ("kore", str(tmp_path / "train" / "kore"))):
        cfg = compose(
            [
                "experiment=kore_evoke",
                "model=tiny-llava",
                f"method.evoke.adapter_dir={adapter}",
                f"benchmark.sets.evoke.path={tmp_path / 'q.jsonl'}",
                f"method.evoke.image_root={tmp_path}",
                "method.evoke.prompt_style=chat",
                "method.evoke.max_new_tokens=3",
            ],
            run_dir=str(tmp_path / name),
        )
        res = run_method(cfg)
        assert 0.0 <= res["evoke/ka"] <= 100.0 and res["evoke/n"] == 1.0
        lines = (tmp_path / name / "evoke_answers.jsonl").read_text().splitlines()
        outs[name] = json.loads(lines[0])
        assert outs[name]["question_id"] == "q1"


# ---------------------------------------------------------------- config schema and paper smoke


def test_schema_rejects_wrong_types_and_keys():
    from common.config import ConfigError
    from common.registry import compose

    with pytest.raises(Exception, match="method.toy.n_old"):
        compose(["experiment=kore_toy", "method.toy.n_old=abc"])
    with pytest.raises(Exception, match="n_olds"):
        compose(["experiment=kore_toy", "method.toy.n_olds=3"])
    with pytest.raises(ConfigError, match="learning_rat"):
        compose(["experiment=kore_paper", "+method.trainer.learning_rat=1"])
    with pytest.raises(Exception, match="init"):
        compose(["experiment=kore_paper", "method.paper.init=pissa"])


_SMOKE_DATA = [
    "method.paper.data_path={tmp}/d.json",
    "method.paper.calib_path={tmp}/d.json",
    "method.paper.image_root={tmp}",
]
_SMOKE_TRAIN = [
    "model.path={tiny_llava_wide}",  # the paper ranks (235 / 274) need d >= 2 x 274 on k/v_proj
    *_SMOKE_DATA,
    "method.paper.n_calib=1",
    "+method.trainer.max_steps=1",
    "method.trainer.gradient_accumulation_steps=1",
    "method.trainer.bf16=false",
]
PAPER_SMOKE = {
    "paper": _SMOKE_TRAIN,
    "kore_paper_qwen/paper": _SMOKE_TRAIN,
    "kore_evoke/evoke": [
        "model.path={tiny_llava}",
        "benchmark.sets.evoke.path={tmp}/q.jsonl",
        "method.evoke.image_root={tmp}",
        "method.evoke.max_new_tokens=2",
    ],
}


def paper_smoke_setup(tmp_path):
    """One LLaVA-format record with an image (training + calibration), one EVOKE question, and a
    tiny LLaVA wide enough (hidden 560, k/v_proj 280 outputs) for the paper's ranks 235 and 274."""
    import json

    from PIL import Image

    from common.tiny import save_tiny, tiny_llava

    Image.fromarray((torch.rand(32, 32, 3) * 255).byte().numpy()).save(tmp_path / "0.png")
    rec = {
        "id": "a",
        "image": "0.png",
        "conversations": [
            {"from": "human", "value": "<image>\nWho is this?"},
            {"from": "gpt", "value": "Ann Lee."},
        ],
    }
    (tmp_path / "d.json").write_text(json.dumps([rec]))
    q = {"question_id": "q1", "image": "0.png", "text": "Who is this?", "answer": "Ann Lee"}
    (tmp_path / "q.jsonl").write_text(json.dumps(q) + "\n")
    wide = save_tiny(*tiny_llava(seed=0, hidden_size=560), tmp_path / "tiny_llava_wide")
    return {"tiny_llava_wide": str(wide)}
