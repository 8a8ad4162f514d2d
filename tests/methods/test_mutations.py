"""Tests that catch hand-made mutations of the methods' central equations (issue 32, point 4).

Each test is built so that the mutation named in its docstring changes the asserted outcome: the
inputs break the ties and symmetries that let the mutation pass the methods' own test files.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch


def test_autoqra_rank_downgrade_scores_by_rank_importance():
    """Eqs. 4-5: a rank downgrade is scored with I_r (mutation: I_q in its place)."""
    from methods.autoqra import Importance, MemoryModel, QRConfig, SearchSpace, repair_to_budget

    space = SearchSpace((2, 4, 8), (4, 8, 16), 2)
    mem = MemoryModel([128 * 64, 128 * 64], [64, 64], group_size=128)  # identical layers: same ΔM
    imp = Importance(raw_q=[0.0, 1.0], raw_r=[1.0, 0.0])  # I_q = [0, 1], I_r = [1, 0]
    top = space.maximum()
    budget = mem.total_bytes(top) - 1.0  # one downgrade is enough
    out = repair_to_budget(top, space, mem, imp, budget, protect=frozenset({0, 1}))  # ranks only
    assert out.q == top.q and out.r == (16, 8)  # layer 1 has the lower rank importance
    out = repair_to_budget(top, space, mem, imp, budget)  # bits too: layer 0's I_q = 0 is cheapest
    assert out.q == (4, 8) and out.r == top.r or out.r == (16, 8) and out.q == top.q
    assert out != QRConfig(top.q, (8, 16))


def test_agentxray_beta_threshold_floors_n_beta():
    """θ_β = sorted_desc[min(⌊nβ⌋, n−1)]: exactly ⌊nβ⌋ distinct scores lie above θ_β whenever
    nβ is not an integer (mutation: ⌈nβ⌉, which the method's own test, at nβ = 2, cannot see)."""
    from tests.methods.test_agentxray import MCTSConfig, _search

    rng = np.random.default_rng(0)
    for beta in (0.3, 0.5, 0.7):
        s = _search(MCTSConfig(beta=beta))
        for n in (3, 5, 7, 9):
            scores = rng.permutation(np.linspace(0.0, 1.0, n)).tolist()
            theta = s.beta_threshold(scores)
            k = int(np.floor(n * beta))
            assert sum(x > theta for x in scores) == min(k, n - 1), (beta, n)


@pytest.mark.parametrize("pooling", ["max", "mean"])
def test_salo_pool_reduces_layer_and_token_per_channel(pooling):
    """§4.1: pooling is over (layer, token) of each channel, valid tokens only (mutations: another
    pair of axes, the channel axis, the padded length)."""
    from methods.salo.operator import SALO

    g = torch.Generator().manual_seed(0)
    B, C, L, T = 2, 3, 4, 5
    a = torch.randn(B, C, L, T, generator=g)
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[1, 3:] = False
    a[1, :, :, 3:] = 50.0  # padding must never win the max or enter the mean
    got = SALO(hidden_dim=4, pooling=pooling).pool(a, mask)
    assert got.shape == (B, C)
    for b in range(B):
        for c in range(C):
            cells = a[b, c][:, mask[b]]  # [L, T_b]
            want = cells.max() if pooling == "max" else cells.mean()
            torch.testing.assert_close(got[b, c], want)


def test_mcce_nsga_so_selection_elites_then_fronts_by_descending_fitness():
    """Official ``nsga2_so_selection``: the ⌊k/2⌋ fittest, then each front by descending F
    (mutations: a front visited by ascending F; ⌊k/2⌋ ± 1 elites). The third-fittest item sits in
    a dominated front, so the elite count decides whether it is chosen."""
    from methods.mcce.core import Candidate
    from methods.mcce.selection import nsga2_so_select

    pts = {  # name: t (minimised); F = 2 − Σ t
        "a": (0.20, 0.50),  # front 1, F 1.30
        "b": (0.50, 0.35),  # front 1, F 1.15
        "e": (0.10, 0.84),  # front 1, F 1.06
        "f": (0.90, 0.05),  # front 1, F 1.05
        "c": (0.00, 1.00),  # front 1, F 1.00
        "d": (1.00, 0.00),  # front 1, F 1.00
        "q": (0.21, 0.51),  # front 2 (a dominates it), F 1.28
        "q2": (0.22, 0.52),  # front 3, F 1.26
    }
    cands = [
        Candidate(value=k, raw={}, t=np.array(v), total=2.0 - sum(v), index=i)
        for i, (k, v) in enumerate(pts.items())
    ]
    assert {c.value for c in nsga2_so_select(cands, 4)} == {"a", "q", "b", "e"}
    assert {c.value for c in nsga2_so_select(cands, 6)} == {"a", "q", "q2", "b", "e", "f"}


def _webworld_chat():
    return [
        {"role": "system", "content": "you simulate pages"},
        {"role": "user", "content": "page one, action click 3"},
        {"role": "assistant", "content": "page two"},
        {"role": "user", "content": "action type hello"},
        {"role": "assistant", "content": "page three"},
    ]


def test_webworld_template_supervises_the_end_token():
    """The assistant block under ``{% generation %}`` ends with ``<|im_end|>``: the model learns to
    stop (mutation: the end token moved after ``{% endgeneration %}``)."""
    from methods.webworld.train import site_tokenizer

    msgs = _webworld_chat()
    tok = site_tokenizer([m["content"] for m in msgs], kind="word")
    out = tok.apply_chat_template(
        msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    end = tok.convert_tokens_to_ids("<|im_end|>")
    on = [i for i, m in zip(ids, mask) if m]
    assert on.count(end) == 2 and on[-1] == end  # one per assistant turn, each supervised
    assert tok.decode(on) == "page two<|im_end|>page three<|im_end|>"


def test_webworld_stage2_prompt_keeps_every_turn_before_the_last_answer():
    """Stage 2: prompt = every turn before the last assistant turn (mutation: the last user turn,
    the action to simulate, dropped from the prompt)."""
    from methods.webworld.train import last_turn_dataset

    msgs = _webworld_chat()
    row = last_turn_dataset([{"messages": msgs}])[0]
    assert row["prompt"] + row["completion"] == msgs
    assert row["prompt"][-1] == {"role": "user", "content": "action type hello"}


def test_georl_training_moves_the_policy_toward_high_advantage_completions(tmp_path):
    """One Geo-RL step raises the log-probability of the completions with positive LOO gain
    relative to the others: Σ_i A_i Δlog π(o_i) > 0 (mutation: the reward or advantage sign
    flipped anywhere between the gains and the loss)."""
    import copy

    from common.rl import cpu_grpo_kwargs
    from common.tiny import tiny_causal_lm
    from methods.georl import GeoRLGRPOConfig, GeoRLTrainer
    from methods.georl.toy import synthetic_scenes
    from tests.methods.test_georl import _quality, _RecordingEmbedder

    seen = {}

    class _Recording(GeoRLTrainer):
        def compute_advantages(self, rewards, inputs):
            adv = super().compute_advantages(rewards, inputs)
            seen.update({k: inputs[k] for k in ("prompt_ids", "completion_ids", "completion_mask")})
            seen["adv"] = adv.reshape(-1).detach().double()
            return adv

    torch.manual_seed(0)
    model, tok = tiny_causal_lm("qwen2", seed=0)
    before = copy.deepcopy(model)
    kwargs = cpu_grpo_kwargs(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        max_steps=1,
    )
    kwargs["learning_rate"] = 1e-3
    trainer = _Recording(
        model=model,
        reward_funcs=[_quality],
        args=GeoRLGRPOConfig(**kwargs, gamma=3.0),
        train_dataset=synthetic_scenes(4, seed=0),
        processing_class=tok,
        embedder=(emb := _RecordingEmbedder()),
    )
    trainer.train()

    def seq_logp(m):
        p, c, mask = seen["prompt_ids"], seen["completion_ids"], seen["completion_mask"]
        ids = torch.cat([p, c], dim=1)
        with torch.no_grad():
            logits = m.eval()(input_ids=ids).logits[:, p.shape[1] - 1 : -1].double()
        lp = torch.log_softmax(logits, -1).gather(-1, c[..., None]).squeeze(-1)
        return (lp * mask).sum(-1)  # [b·N]

    delta = seq_logp(model) - seq_logp(before)
    # the advantages the method defines, recomputed from the embedder's record (not the trainer's)
    from methods.georl import l_ensemble, loo_gains

    texts = emb.seen[-8:]
    q = torch.tensor(_quality(None, texts), dtype=torch.float64).view(2, 4)
    adv = loo_gains(l_ensemble(emb.encode(texts).view(2, 4, -1).double(), q, gamma=3.0))
    adv = adv.reshape(-1)
    torch.testing.assert_close(adv, seen["adv"], atol=1e-5, rtol=1e-5)  # rows line up
    assert adv.abs().max() > 0 and delta.abs().max() > 0
    assert float((adv * delta).sum()) > 0


def test_slicefine_spectral_balance_per_row_energy_normalised_profiles_and_axis():
    """§3 spectral balance: e_g = ‖W_g‖²_F / rows_g and eigen-profiles divided by the largest
    (mutations: the sum without / rows_g, unnormalised profiles, the axis argument ignored)."""
    from methods.slicefine.diagnostics import spectral_balance

    g = torch.Generator().manual_seed(0)
    w = torch.randn(10, 6, generator=g)
    w = w / w.norm(dim=1, keepdim=True)  # unit rows; k = 3 splits 10 rows as 4, 3, 3
    assert spectral_balance(w, k=3)["cv_energy"] == pytest.approx(0.0, abs=1e-6)  # mutant: 0.14
    a = torch.randn(3, 8, generator=g)
    scaled = torch.cat([a, 10.0 * a])  # two groups, same profile up to scale
    out = spectral_balance(scaled, k=2)
    assert out["max_profile_gap"] == pytest.approx(0.0, abs=1e-6)  # mutant (unnormalised): ~1e2
    assert out["cv_energy"] == pytest.approx((100 - 1) / (100 + 1), rel=1e-6)  # e = (c, 100c)
    m = torch.randn(6, 9, generator=g)
    col, row_t = spectral_balance(m, k=3, axis="column"), spectral_balance(m.T, k=3)
    assert col == pytest.approx(row_t)
    assert col != pytest.approx(spectral_balance(m, k=3))
