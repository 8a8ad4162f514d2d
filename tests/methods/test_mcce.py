"""Tests for methods/mcce (our CPU toy CI list): parsing, archive budget, transform, sorting, selection,
hypervolume, AUC, similarity pairs, DPO loss identity, resume, oracle path and bad input."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from methods.mcce import (
    Archive,
    Candidate,
    MCCEConfig,
    MCCEDPOConfig,
    MCCEGRPOConfig,
    MCCEOptimizer,
    MCCESFTConfig,
    MoleculeProblem,
    ParseStats,
    PromptBuilder,
    SelfiesExplorer,
    build_selfies_tokenizer,
    build_similarity_pairs,
    dpo_loss_closed_form,
    fitness,
    hypervolume,
    load_nci_smiles,
    load_seed_smiles,
    load_tdc_oracle,
    non_dominated_fronts,
    nsga2_select,
    nsga2_so_select,
    official_fronts,
    paper_problem,
    parse_candidates,
    round_args,
    run_dpo_round,
    tanimoto,
    tiny_gpt,
    top_k_auc,
    toy_problem,
)


def _cand(value: str, t, idx: int) -> Candidate:
    t = np.asarray(t, dtype=float)
    return Candidate(value=value, raw={}, t=t, total=float(fitness(t)), index=idx)


class _CountingProblem(MoleculeProblem):
    """The toy problem with a cheap objective that counts evaluations per molecule."""

    def __init__(self) -> None:
        super().__init__(goals=["a", "b"], directions=["max", "min"], oracles={"a": len, "b": len})
        self.calls: list[str] = []

    def evaluate(self, values):
        self.calls.extend(values)
        n = np.array([len(v) for v in values], dtype=float)
        return np.stack([(n % 7) / 7, (n % 5) / 5], axis=1)


# ----------------------------------------------------------------------------- parsing
def test_parse_candidates_counts_malformed():
    st = ParseStats()
    text = "x <candidate>CCO</candidate>\n<candidate>\nc1ccccc1\n</candidate> tail"
    assert parse_candidates(text, st) == ["CCO", "c1ccccc1"]
    assert parse_candidates("no tags at all", st) == []
    # nested: the inner well-formed one is kept, the outer opening is malformed; then an unclosed one
    assert parse_candidates("<candidate>A<candidate>B</candidate> <candidate>C", st) == ["B"]
    assert parse_candidates("<candidate>  </candidate>", st) == []
    assert st.responses == 4
    assert st.candidates == 3
    assert st.no_tag_responses == 2
    assert st.malformed == 3  # nested A, unclosed C, empty
    with pytest.raises(TypeError, match="text"):
        parse_candidates(None)  # type: ignore[arg-type]


# ------------------------------------------------------------------- archive / budget
def test_archive_dedupes_counts_invalid_and_budget():
    prob = _CountingProblem()
    arc = Archive(prob)
    new = arc.add(["CCO", "C(C)O", "not_a_smiles", "OCC", "c1ccccc1", ""], origin="api")
    assert [c.value for c in new] == ["CCO", "c1ccccc1"]
    assert arc.generated["api"] == 6 and arc.invalid["api"] == 2 and arc.repeat["api"] == 2
    assert "not_a_smiles" not in {c.value for c in arc.items}
    # repeats against history are not re-evaluated, and max_new caps the budget
    new2 = arc.add(["CCO", "CCN", "CCCN", "CCCCN"], origin="local", max_new=2)
    assert [c.value for c in new2] == ["CCN", "CCCN"]
    assert prob.calls == ["CCO", "c1ccccc1", "CCN", "CCCN"]
    assert arc.n_evaluations == len(arc) == 4
    st = arc.stats("api")
    assert st["validity"] == pytest.approx(1 - 2 / 6) and st["uniqueness"] == pytest.approx(
        1 - 2 / 6
    )


def test_transform_and_fitness():
    prob = paper_problem(oracles={k: (lambda s: 0.5) for k in ("drd2", "gsk3b", "jnk3")})
    rng = np.random.default_rng(0)
    raw = np.column_stack(
        [rng.uniform(1, 10, 20), rng.uniform(0, 1, (20, 4))]
    )  # sa, drd2, qed, gsk3b, jnk3
    t = prob.transform(raw)
    np.testing.assert_allclose(t[:, 0], (raw[:, 0] - 1) / 9)  # SA min, normalised
    np.testing.assert_allclose(t[:, 2], 1 - raw[:, 2])  # QED max -> 1 - v
    np.testing.assert_allclose(t[:, 1], raw[:, 1])  # DRD2 min -> identity
    np.testing.assert_allclose(fitness(t), 5 - t.sum(1))
    sa = prob.transform(np.array([[1.0, 0, 0, 0, 0], [10.0, 0, 0, 0, 0]]))[:, 0]
    np.testing.assert_allclose(sa, [0.0, 1.0])
    # end to end on real molecules: archive HV == pymoo HV of the hand-transformed raw values
    from pymoo.indicators.hv import HV

    toy = toy_problem()
    arc = Archive(toy)
    arc.add(load_seed_smiles()[:12], representation="smiles")
    raw = np.array([[c.raw[g] for g in toy.goals] for c in arc.items])  # qed, sa, sim
    t_hand = np.column_stack([1 - raw[:, 0], (raw[:, 1] - 1) / 9, 1 - raw[:, 2]])
    assert hypervolume(arc.items) == pytest.approx(HV(ref_point=np.full(3, 1.1))(t_hand))


# ------------------------------------------------------------------ sorting / selection
def test_non_dominated_sort_matches_brute_force():
    t = np.random.default_rng(1).random((200, 5))
    fronts = non_dominated_fronts(t)
    rank = np.empty(200, dtype=int)
    for r, f in enumerate(fronts):
        rank[f] = r
    dom = (t[:, None] <= t[None]).all(-1) & (t[:, None] < t[None]).any(
        -1
    )  # dom[i, j]: i dominates j
    front0 = ~dom.any(0)
    assert set(np.flatnonzero(front0)) == set(fronts[0].tolist())
    for i, j in itertools.product(range(200), repeat=2):
        if dom[i, j]:
            assert rank[i] < rank[j]


def test_nsga2_so_select_properties():
    rng = np.random.default_rng(2)
    cands = [_cand(f"C{'C' * i}", rng.random(3), i) for i in range(60)]
    k = 20
    sel = nsga2_so_select(cands, k)
    assert len(sel) == k and len({c.value for c in sel}) == k
    best = sorted(cands, key=lambda c: -c.total)[: k // 2]
    assert {c.value for c in best} <= {c.value for c in sel}
    fronts = non_dominated_fronts(np.stack([c.t for c in cands]))
    rank = {cands[i].value: r for r, f in enumerate(fronts) for i in f}
    chosen = {c.value for c in sel}
    rest = [c for c in sel if c.value not in {b.value for b in best}]
    unselected = [c for c in cands if c.value not in chosen]
    assert max(rank[c.value] for c in rest) <= min(rank[c.value] for c in unselected)
    with pytest.raises(ValueError, match="k"):
        nsga2_so_select(cands, 0)


# --------------------------------------------------------------------------- metrics
def test_hypervolume_refuses_nan_points():
    y = np.array([[0.2, 0.3], [np.nan, 0.1], [0.5, 0.5]])
    with pytest.raises(ValueError, match="non-finite objective.*row 1"):
        hypervolume(y, ref=1.1, top=None)
    with pytest.raises(ValueError, match="ref must be finite"):
        hypervolume(y[[0, 2]], ref=float("nan"))
    assert hypervolume(y[[0, 2]], ref=1.1, top=None) > 0


def test_hypervolume_closed_forms_and_monte_carlo():
    y = np.array([[0.2, 0.5, 0.9]])
    assert hypervolume(y, ref=1.1, top=None) == pytest.approx(np.prod(1.1 - y[0]))
    pts = np.random.default_rng(3).random((15, 3))
    hv = hypervolume(pts, top=None)
    worse = np.vstack([pts, pts[0] + 0.05])  # dominated by pts[0]
    assert hypervolume(worse, top=None) == pytest.approx(hv)
    better = pts.copy()
    better[4] -= 0.1
    assert hypervolume(better, top=None) >= hv
    u = np.random.default_rng(4).random((100_000, 3)) * 1.1
    covered = (pts[None, :, :] <= u[:, None, :]).all(-1).any(-1).mean() * 1.1**3
    assert hv == pytest.approx(covered, rel=0.02)
    # the candidate path equals pymoo on the top-100-by-F subset
    from pymoo.indicators.hv import HV

    many = np.random.default_rng(5).random((150, 3))
    cands = [_cand(f"C{i}", t, i) for i, t in enumerate(many)]
    top = many[np.argsort(-(3 - many.sum(1)))[:100]]
    assert hypervolume(cands) == pytest.approx(HV(ref_point=np.full(3, 1.1))(top))


def test_top_k_auc():
    n_max = 1000
    assert top_k_auc([0.7] * 300, 10, n_max) == pytest.approx(0.7 * (1 - 50 / n_max))
    s = np.random.default_rng(6).random(450)
    auc = top_k_auc(s, 10, n_max, freq=100)
    # direct trapezoid on the curve sampled at 0, 100, ..., 400, 450, padded to n_max
    xs = [0, 100, 200, 300, 400, 450]
    ys = [0.0] + [np.sort(s[:x])[::-1][:10].mean() for x in xs[1:]]
    direct = (np.trapezoid(ys, xs) + (n_max - 450) * ys[-1]) / n_max
    assert auc == pytest.approx(direct)
    inc = np.sort(s)
    assert top_k_auc(inc, 10, n_max) <= np.sort(inc)[::-1][:10].mean() + 1e-12


# -------------------------------------------------------------------------- DPO pairs
@pytest.fixture(scope="module")
def pair_archive():
    prob = toy_problem("smiles")
    smi = []
    for s in load_nci_smiles(400):
        c = prob.canonicalize(s)
        if c is not None and c not in smi:
            smi.append(c)
    rng = np.random.default_rng(7)
    items = [_cand(s, rng.random(3), i) for i, s in enumerate(smi[:200])]
    return prob, items


def test_similarity_pairs_respect_pools_bands_and_format(pair_archive):
    prob, items = pair_archive
    recs = [
        {"prompt": f"p{i}", "parents": [{"value": items[i].value}, {"value": items[i + 1].value}]}
        for i in range(0, 40, 2)
    ]
    ds = build_similarity_pairs(
        recs, items, tanimoto, rng=random.Random(0), full=True, conversational=False
    )
    again = build_similarity_pairs(
        recs, items, tanimoto, rng=random.Random(0), full=True, conversational=False
    )
    assert ds.to_dict() == again.to_dict()
    assert len(ds) == len(recs)
    srt = sorted(items, key=lambda c: -c.total)
    high = {c.value for c in srt[: int(0.3 * len(items))]}
    low = {c.value for c in srt[len(items) - int(0.3 * len(items)) :]}
    for row in ds:
        assert set(row["chosen_smiles"]) <= high and set(row["rejected_smiles"]) <= low
        assert (
            row["chosen"].count("<candidate>") == 2 and row["rejected"].count("</candidate>") == 2
        )
        assert min(row["chosen_total"]) > max(row["rejected_total"])
        for smi, s in zip(row["chosen_smiles"], row["chosen_sim"]):
            assert s == pytest.approx(max(tanimoto(p, smi) for p in row["parents"]))
        # when an in-band molecule exists in High, the picks are in [0.5, 0.8]
        in_band = [c for c in high if 0.5 <= max(tanimoto(p, c) for p in row["parents"]) <= 0.8]
        if len(in_band) >= 2:
            assert all(0.5 <= s <= 0.8 for s in row["chosen_sim"])
    conv = build_similarity_pairs(recs[:2], items, tanimoto, rng=random.Random(0))
    assert conv[0]["prompt"][0]["role"] == "user" and conv[0]["chosen"][0]["role"] == "assistant"
    # tiny archive: pools smaller than 2 fall back without crashing
    small = build_similarity_pairs(recs[:3], items[:5], tanimoto, rng=random.Random(0))
    assert len(small) == 2 and all(
        r[0]["content"].count("<candidate>") == 2 for r in small["chosen"]
    )


def test_experience_prompt_poor_from_lower_half(pair_archive):
    prob, items = pair_archive
    arc = Archive(prob, items=list(items))
    b = PromptBuilder(prob)
    for c in arc.items:
        c.raw = {g: 0.0 for g in prob.goals}
    med = np.median([c.total for c in items])
    for compat, below in ((False, True), (True, False)):
        txt = b.experience_prompt(arc, "", random.Random(0), repo_compat=compat)
        poor = parse_candidates(txt.split("Poor candidates:")[1])
        totals = [next(c.total for c in items if c.value == s) for s in poor]
        assert all((t <= med) == below for t in totals)


# ----------------------------------------------------------------------- DPO identity
@pytest.fixture(scope="module")
def tiny_selfies_lm():
    import selfies as sf

    seeds = load_seed_smiles()
    vocab_src = [sf.encoder(s) for s in seeds]
    from methods.mcce.toy_world import selfies_vocab

    tok = build_selfies_tokenizer(selfies_vocab(vocab_src))
    return tok, seeds


def _seq_logprob(model, tok, prompt: str, completion: str) -> float:
    import torch

    p = tok(prompt)["input_ids"]
    c = tok(completion + tok.eos_token)["input_ids"]
    ids = torch.tensor([p + c])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].log_softmax(-1)  # [L-1, V]
    tgt = ids[0, 1:]
    lp = logits.gather(-1, tgt[:, None])[:, 0]
    return float(lp[len(p) - 1 :].sum())


def test_dpo_round_loss_matches_closed_form(tiny_selfies_lm):
    import copy

    import datasets
    import torch

    tok, _ = tiny_selfies_lm
    pol = tiny_gpt(len(tok), tok.pad_token_id, tok.eos_token_id, n_positions=64, seed=0)
    ref = tiny_gpt(len(tok), tok.pad_token_id, tok.eos_token_id, n_positions=64, seed=1)
    rows = {
        "prompt": [
            "[XO] <p>[C][O]</p> <p>[N]</p> =>",
            "[MUT] <p>[C][C]</p> <p>[O]</p> =>",
            "[XO] <p>[C][N]</p> <p>[F]</p> =>",
            "[MUT] <p>[O][C]</p> <p>[C]</p> =>",
        ],
        "chosen": [
            "<candidate>[C][C][O]</candidate>",
            "<candidate>[C][N]</candidate>",
            "<candidate>[C][F]</candidate>",
            "<candidate>[O][C][C]</candidate>",
        ],
        "rejected": [
            "<candidate>[N]</candidate>",
            "<candidate>[O][O]</candidate>",
            "<candidate>[F][F][F]</candidate>",
            "<candidate>[C]</candidate>",
        ],
    }
    ds = datasets.Dataset.from_dict(rows)
    cfg = round_args(
        MCCEDPOConfig,
        {"learning_rate": 1e-3, "per_device_train_batch_size": 4, "max_length": 64},
    )
    assert cfg.beta == 0.1 and cfg.label_smoothing == 0.1  # official train_dpo.py defaults
    expected = np.mean(
        [
            dpo_loss_closed_form(
                _seq_logprob(pol, tok, p, w),
                _seq_logprob(pol, tok, p, r),
                _seq_logprob(ref, tok, p, w),
                _seq_logprob(ref, tok, p, r),
                0.1,
                0.1,
            )
            for p, w, r in zip(rows["prompt"], rows["chosen"], rows["rejected"])
        ]
    )
    before = copy.deepcopy(pol.state_dict())
    log = run_dpo_round(pol, ref, tok, ds, cfg)
    assert log["dpo/loss_first"] == pytest.approx(expected, abs=1e-4)
    assert any(not torch.equal(before[k], v) for k, v in pol.state_dict().items())
    # policy == reference: the loss is log 2 for any epsilon (TRL's loss equals the closed form
    # above for arbitrary policy/reference, so the identity is checked on the closed form)
    for eps in (0.0, 0.1, 0.3):
        assert dpo_loss_closed_form(-3.0, -5.0, -3.0, -5.0, 0.1, eps) == pytest.approx(math.log(2))
    assert run_dpo_round(pol, ref, tok, ds.select([0]), cfg) == {"dpo/skipped": 1.0}


# -------------------------------------------------------------------- optimizer / resume
def _explorer_chat(seed: int):
    from common.llm import ScriptedChat

    return ScriptedChat(SelfiesExplorer(seed=seed))


def test_llm_failure_stops_the_run_and_a_rerun_resumes_it_exactly(tmp_path):
    """An API that fails for good stops the run (LLMUnavailableError); a rerun on the same folder
    with a working API of the same identity ends with the uninterrupted run's archive, and every
    molecule is evaluated once. Kills of a real process: tests/methods/test_mcce_resume.py."""
    from methods.mcce import LLMUnavailableError

    cfg = MCCEConfig(
        mode="coevolve_frozen",
        pop_size=8,
        budget=70,
        experience_prob=0.0,
        prompt_style="compact",
        response_sep="",
    )

    class Flaky:
        def __init__(self, inner, fail_after=None):
            self.inner, self._fail_after, self._n = inner, fail_after, 0  # private: not identity

        def chat_batch(self, batch, **kw):
            self._n += 1
            if self._fail_after is not None and self._n > self._fail_after:
                raise RuntimeError("down")
            return self.inner.chat_batch(batch)

        def chat(self, m, **kw):
            return self.chat_batch([m])[0]

    def run(folder, fail_after=None):
        prob = toy_problem()
        calls: list[str] = []
        orig = prob.evaluate
        prob.evaluate = lambda v: calls.extend(v) or orig(v)  # type: ignore[method-assign]
        api = Flaky(_explorer_chat(1), fail_after)
        opt = MCCEOptimizer(
            prob, api, _explorer_chat(2), cfg, load_seed_smiles()[:12], checkpoint_dir=folder
        )
        return opt, calls

    ref, ref_calls = run(str(tmp_path / "ref"))
    expected = [(c.value, c.total) for c in ref.run().archive.items]
    opt, first = run(str(tmp_path / "run"), fail_after=2)
    with pytest.raises(LLMUnavailableError, match="down"):
        opt.run()
    assert 12 < len(first) < 70
    opt2, second = run(str(tmp_path / "run"))
    res = opt2.run()
    assert [(c.value, c.total) for c in res.archive.items] == expected
    assert sorted(first + second) == sorted(ref_calls)  # each molecule evaluated exactly once
    assert res.history[0]["model"] == "init" and len(res.history) == len(ref.history)


def test_checkpoint_settings_are_stable_across_processes_but_name_what_differs():
    """The folder's settings ignore per-process paths (the trainer's temporary output_dir) and
    transport (the API endpoint) but change with the local model's seed and the training config."""
    from common.llm import OpenAIChat
    from methods.mcce.resume import run_settings

    cfg = MCCEConfig(mode="coevolve_dpo")
    init = load_seed_smiles()[:4]

    def settings(api_url="http://a/v1", seed=0, beta=0.1):
        api = OpenAIChat("gpt-4o-2024-05-13", base_url=api_url)
        local = _explorer_chat(seed)
        targs = round_args(MCCEDPOConfig, {"beta": beta})
        return run_settings(cfg, toy_problem(), api, local, init, targs)

    base = settings()
    assert settings(api_url="http://b/v1") == base  # another endpoint, another tempdir
    assert settings(seed=1)["local"] != base["local"]
    assert settings(beta=0.2)["trainer_args"] != base["trainer_args"]
    assert base["seed"] == 0 and base["problem"]["oracles"]["qed"] == "built-in"


# ----------------------------------------------------------------- oracles / bad input
def test_paper_problem_oracle_path(tmp_path):
    class StandIn:
        def __init__(self, v):
            self.v, self.n = v, 0

        def __call__(self, smiles):
            self.n += 1
            return self.v

    ors = {"drd2": StandIn(0.1), "gsk3b": StandIn(0.2), "jnk3": StandIn(0.9)}
    prob = paper_problem(oracles=ors)
    arc = Archive(prob)
    new = arc.add(["CCO", "c1ccccc1O"])
    assert ors["jnk3"].n == 2
    t = new[0].t
    assert t[1] == pytest.approx(0.1) and t[3] == pytest.approx(0.2) and t[4] == pytest.approx(0.1)
    with pytest.raises(FileNotFoundError, match="drd2_current.pkl"):
        load_tdc_oracle("drd2", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="drd2_current.pkl"):
        paper_problem(oracle_dir=str(tmp_path)).evaluate(["CCO"])


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="same length"):
        MoleculeProblem(goals=["qed", "sa"], directions=["max"])
    with pytest.raises(ValueError, match="directions"):
        MoleculeProblem(goals=["qed"], directions=["up"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unknown objective"):
        MoleculeProblem(goals=["potency"], directions=["max"])
    with pytest.raises(ValueError, match="outside"):
        MoleculeProblem(goals=["logp"], directions=["max"], strict=True).normalize(
            np.array([[3.0]])
        )
    with pytest.raises(ValueError, match="pop_size"):
        MCCEConfig(pop_size=1)
    with pytest.raises(ValueError, match="n_off"):
        MCCEConfig(n_off=0)
    with pytest.raises(ValueError, match="mode"):
        MCCEConfig(mode="solo")
    prob = toy_problem()
    cfg = MCCEConfig(mode="coevolve_frozen", pop_size=4, budget=5, prompt_style="compact")
    with pytest.raises(ValueError, match="budget"):
        MCCEOptimizer(prob, _explorer_chat(0), _explorer_chat(1), cfg, load_seed_smiles()[:8]).run()
    from common.llm import ScriptedChat

    silent = ScriptedChat(lambda m: "I cannot help with that.")
    cfg = MCCEConfig(mode="coevolve_frozen", pop_size=4, budget=50, prompt_style="compact")
    with pytest.raises(ValueError, match="initial population"):
        MCCEOptimizer(prob, silent, silent, cfg, ["xx", "not a molecule"]).run()
    with pytest.raises(ValueError, match="local"):
        MCCEOptimizer(prob, _explorer_chat(0), None, MCCEConfig(mode="coevolve_frozen"), ["CCO"])


def test_paper_config_and_chat_template_path(tiny_qwen2):
    """The paper path on tiny stand-ins: composed config, chat prompts, conversational DPO pairs."""
    from common.config import validate
    from common.llm import ScriptedChat
    from common.registry import compose
    from methods.mcce.local import TrainableChat
    from methods.mcce.train import trainer_args_for

    run = validate(compose(["experiment=mcce_paper"]))
    rc = run.method
    assert rc.stage == "paper" and rc.search.budget == 5000
    assert run.model.name == "Qwen/Qwen2.5-7B-Instruct" and run.model.dtype == "bfloat16"
    targs = trainer_args_for(rc, rc.search.mode)
    assert isinstance(targs, MCCEDPOConfig) and targs.beta == 0.1 and targs.label_smoothing == 0.1
    assert targs.gradient_checkpointing and targs.learning_rate == 1e-6
    model, tok = tiny_qwen2
    import copy

    local = TrainableChat(copy.deepcopy(model), tok, max_new_tokens=4)
    prob = paper_problem(oracles={k: (lambda s: 0.3) for k in ("drd2", "gsk3b", "jnk3")})
    api = ScriptedChat(
        lambda m: "<candidate>CCOc1ccccc1</candidate>\n<candidate>CCN(C)C</candidate>"
    )
    cfg = MCCEConfig(
        mode="coevolve_dpo",
        pop_size=2,
        budget=40,
        min_archive_for_training=4,
        experience_prob=0.0,
    )
    reloads: list[object] = []
    res = MCCEOptimizer(
        prob,
        api,
        local,
        cfg,
        load_seed_smiles()[:12],
        on_update=reloads.append,
        trainer_args=round_args(
            MCCEDPOConfig, {"per_device_train_batch_size": 2, "max_length": 4096}
        ),
    ).run(max_generations=2)
    assert reloads == [local]  # the engine reload hook runs once per preference round
    assert "<candidate>" in api.calls[0][0]["content"] and "total:" in api.calls[0][0]["content"]
    assert len(res.train_log) == 1 and res.train_log[0]["dpo/steps"] >= 1
    assert {h["model"] for h in res.history} == {"init", "local", "api"}
    assert res.history[1]["model"] == "local"  # the local model starts (official order)


def test_sft_round_is_completion_only_nll(tiny_selfies_lm):
    """The SFT baseline's first loss is the mean NLL of the chosen completion tokens (prompt masked)."""
    import datasets

    from methods.mcce import run_sft_round

    tok, _ = tiny_selfies_lm
    pol = tiny_gpt(len(tok), tok.pad_token_id, tok.eos_token_id, n_positions=64, seed=0)
    p, c = "[XO] <p>[C][O]</p> <p>[N]</p> =>", "<candidate>[C][C][O]</candidate>"
    n_tok = len(tok(c + tok.eos_token)["input_ids"])
    expected = -_seq_logprob(pol, tok, p, c) / n_tok
    ds = datasets.Dataset.from_dict({"prompt": [p] * 4, "chosen": [c] * 4, "rejected": ["x"] * 4})
    log = run_sft_round(
        pol,
        tok,
        ds,
        round_args(
            MCCESFTConfig,
            {"learning_rate": 1e-3, "per_device_train_batch_size": 2, "max_length": 64},
        ),
    )
    assert log["sft/steps"] == 2
    assert log["sft/loss_first"] == pytest.approx(expected, rel=1e-4)


def test_rl_round_reward_and_grpo_update(tiny_selfies_lm):
    """RL baseline: the reward is the mean F of valid new molecules (−0.1 none valid, 0 repeats),
    scored outside the archive; a GRPO round on those rewards updates the policy in place."""
    import copy

    import torch

    from methods.mcce import TinyLMChat, run_rl_round

    tok, _ = tiny_selfies_lm
    pol = tiny_gpt(len(tok), tok.pad_token_id, tok.eos_token_id, n_positions=64, seed=0)
    prob = toy_problem()
    cfg = MCCEConfig(mode="coevolve_rl", pop_size=4, budget=40, prompt_style="compact")
    local = TinyLMChat(pol, tok, max_new_tokens=4)
    opt = MCCEOptimizer(prob, _explorer_chat(0), local, cfg, load_seed_smiles()[:8])
    opt.archive.add(load_seed_smiles()[:8], representation="smiles")
    n0, known = len(opt.archive), prob.to_text(opt.archive.items[0].value)
    new_a, new_b = "[C][C][O][C][C][N]", "[C][=C][C][=C][C][=C][Ring1][=Branch1][F]"
    f = fitness(prob.transform(prob.evaluate([prob.canonicalize(new_a), prob.canonicalize(new_b)])))
    r = opt.rl_reward(
        ["p"] * 4,
        [
            "no tags at all",
            f"<candidate>{known}</candidate>",
            f"<candidate>{new_a}</candidate><candidate>{known}</candidate>",
            [
                {
                    "role": "assistant",
                    "content": f"<candidate>{new_a}</candidate><candidate>{new_b}</candidate>",
                }
            ],
        ],
    )
    assert r[0] == pytest.approx(-0.1) and r[1] == 0.0
    assert r[2] == pytest.approx(f[0]) and r[3] == pytest.approx(f.mean())
    assert len(opt.archive) == n0 and opt.rl_oracle_calls == 2  # cached, outside the budget
    # a GRPO round: rewards with spread move the weights; too few prompts skip the round
    seen: list[int] = []

    def reward(prompts, completions, **kw):
        seen.append(len(completions))
        return [float(len(c)) for c in completions]

    before = copy.deepcopy(pol.state_dict())
    dcfg = round_args(
        MCCEGRPOConfig,
        {"learning_rate": 1e-2, "per_device_train_batch_size": 4, "max_completion_length": 6},
    )
    prompts = ["[XO] <p>[C][O]</p> <p>[N]</p> =>", "[MUT] <p>[C][C]</p> <p>[O]</p> =>"]
    log = run_rl_round(pol, tok, prompts, reward, dcfg, ref=copy.deepcopy(pol))
    assert log["rl/steps"] >= 1 and seen and all(n % 4 == 0 for n in seen)
    assert any(not torch.equal(before[k], v) for k, v in pol.state_dict().items())
    assert run_rl_round(pol, tok, prompts[:1], reward, dcfg) == {"rl/skipped": 1.0}
    # the loop in coevolve_rl mode: one GRPO round after the local+api pair, scored outside budget
    cfg = MCCEConfig(
        mode="coevolve_rl",
        pop_size=4,
        budget=40,
        experience_prob=0.0,
        prompt_style="compact",
        response_sep="",
        conversational=False,
        n_pairs_max=2,
        min_archive_for_training=4,
    )
    targs = round_args(
        MCCEGRPOConfig,
        {"per_device_train_batch_size": 2, "num_generations": 2, "max_completion_length": 6},
    )
    local = TinyLMChat(
        tiny_gpt(len(tok), tok.pad_token_id, tok.eos_token_id, n_positions=64, seed=0),
        tok,
        max_new_tokens=6,
    )
    res = MCCEOptimizer(
        toy_problem(), _explorer_chat(0), local, cfg, load_seed_smiles()[:8], trainer_args=targs
    ).run(max_generations=2)
    assert len(res.train_log) == 1 and res.train_log[0]["rl/steps"] >= 1
    with pytest.raises(TypeError, match="MCCEGRPOConfig"):
        MCCEOptimizer(
            toy_problem(),
            _explorer_chat(0),
            local,
            cfg,
            ["CCO"],
            trainer_args=round_args(MCCEDPOConfig),
        )
    assert res.archive.n_evaluations == len(res.archive)  # RL rewards never enter the archive
    assert res.metrics["rl_oracle_calls"] == res.train_log[0]["rl_oracle_calls"]


def test_build_paper_wires_gpt4o_local_model_and_reload(tmp_path, monkeypatch):
    """The paper driver: OpenAI-compatible GPT-4o, the local model behind TrainableChat (HF here,
    vLLM on GPU) with its reload hook, the 5-objective problem and the ZINC initial file."""
    from common.config import validate
    from common.llm import OpenAIChat
    from common.registry import compose
    from methods.mcce.local import TrainableChat
    from methods.mcce.paper import build_paper

    init = tmp_path / "zinc_random1.smi"
    init.write_text("\n".join(load_seed_smiles()[:5]) + "\n")
    run = validate(
        compose(
            [
                "experiment=mcce_paper",
                "model=tiny-qwen2",
                "method.use_vllm=false",
                f"method.init_file={init}",
                f"method.oracle_dir={tmp_path}",
            ]
        )
    )
    opt = build_paper(run.method, run.model, tmp_path)
    assert isinstance(opt.api, OpenAIChat) and isinstance(opt.local, TrainableChat)
    assert opt.on_update == opt.local.reload and opt.cfg.mode == "coevolve_dpo"
    assert opt.problem.goals == ["sa", "drd2", "qed", "gsk3b", "jnk3"]
    assert opt.problem.directions == ["min", "min", "max", "min", "max"]
    assert len(opt.initial) == 5 and opt.cfg.budget == 5000 and opt.cfg.pop_size == 50
    with pytest.raises(FileNotFoundError, match="drd2_current.pkl"):
        opt.problem.evaluate(["CCO"])  # oracle files absent here: named in the error


# ------------------------------------------------------------------ official fidelity
# Values computed by running the official code (lzz-z/MCCE @ b93f9f2, model/util.py:
# fast_non_dominated_sort, nsga2_selection, nsga2_so_selection) on the stored random inputs; see
# docs/methods/mcce.md "Fidelity fixture".
OFFICIAL = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "mcce" / "official_selection.json").read_text()
)


def _fixture_cands(case):
    t = np.asarray(case["t"])
    return [_cand(f"m{i}", row, i) for i, row in enumerate(t)]


@pytest.mark.parametrize("case", OFFICIAL["cases"], ids=lambda c: f"n{len(c['t'])}k{c['k']}")
def test_selection_matches_the_official_util(case):
    cands = _fixture_cands(case)
    assert official_fronts(np.asarray(case["t"])) == case["fronts"]
    assert [int(c.value[1:]) for c in nsga2_select(cands, case["k"])] == case["nsga2_selection"]
    assert [int(c.value[1:]) for c in nsga2_so_select(cands, case["k"])] == case[
        "nsga2_so_selection"
    ]


def test_nsga2_select_cuts_the_last_front_by_crowding():
    # one front of 5 points on a line in 2-D: the two ends have infinite distance and survive
    t = np.array([[0.0, 1.0], [0.25, 0.75], [0.5, 0.5], [0.75, 0.25], [1.0, 0.0]])
    cands = [_cand(f"m{i}", row, i) for i, row in enumerate(t)]
    assert {c.value for c in nsga2_select(cands, 2)} == {"m0", "m4"}
    assert len(nsga2_select(cands, 3)) == 3
    with pytest.raises(ValueError, match="k"):
        nsga2_select(cands, 0)


def _opt_with_initial(n_init: int, **kw):
    cfg = MCCEConfig(
        mode="coevolve_frozen",
        pop_size=8,
        budget=400,
        prompt_style="compact",
        response_sep="",
        **kw,
    )
    init = load_nci_smiles(n_init)
    return MCCEOptimizer(toy_problem(), _explorer_chat(0), _explorer_chat(1), cfg, init)


def test_generation_one_mates_within_the_whole_initial_population():
    opt = _opt_with_initial(30, experience_prob=0.0)
    opt._initialise()
    n_valid = len(opt.archive)
    assert n_valid > 8
    assert [c.value for c in opt.population] == [c.value for c in opt.archive.items]  # official
    sel = _opt_with_initial(30, experience_prob=0.0, initial_population="select")
    sel._initialise()
    assert len(sel.population) == 8
    with pytest.raises(ValueError, match="initial_population"):
        MCCEConfig(initial_population="best")


def test_experience_pareto_branch_uses_crowding_nsga2(monkeypatch):
    opt = _opt_with_initial(160, experience_prob=1.0)
    opt._initialise()
    assert len(opt.archive) > 100
    seen = {}
    original = opt.builder.experience_prompt

    def capture(archive, old, rng, good_from=None, **kw):
        seen["good"] = [c.value for c in good_from]
        return original(archive, old, rng, good_from, **kw)

    monkeypatch.setattr(opt.builder, "experience_prompt", capture)
    monkeypatch.setattr(opt.rng, "random", lambda: 0.9)  # >= 0.5: the 'pareto' branch
    opt.generation()
    items = opt.archive.items
    assert seen["good"] == [c.value for c in nsga2_select(items, 100)]
    assert seen["good"] != [c.value for c in nsga2_so_select(items, 100)]


# ------------------------------------------------------------------ TDC oracle files
def _fit_oracle(featurise, path: Path) -> None:
    """A small scikit-learn classifier in TDC's file format (a pickled ``predict_proba`` model)."""
    import pickle

    from rdkit import Chem
    from sklearn.linear_model import LogisticRegression

    smiles = load_seed_smiles()[:12]
    x = np.concatenate([featurise(Chem.MolFromSmiles(s)) for s in smiles])
    y = np.arange(len(smiles)) % 2
    path.write_bytes(pickle.dumps(LogisticRegression(max_iter=200).fit(x, y)))


def _tdc_drd2_features(mol):
    # TDC chem_utils/oracle/oracle.py::fingerprints_from_mol, written with the legacy RDKit call
    from rdkit.Chem import AllChem

    fp = AllChem.GetMorganFingerprint(mol, 3, useCounts=True, useFeatures=True)
    nfp = np.zeros((1, 2048), np.int32)
    for idx, v in fp.GetNonzeroElements().items():
        nfp[0, idx % 2048] += int(v)
    return nfp


def _tdc_kinase_features(mol):
    # TDC's gsk3b/jnk3: GetMorganFingerprintAsBitVect(mol, 2, nBits=2048) as a [1, 2048] array
    from rdkit import DataStructs
    from rdkit.Chem import AllChem

    fp = AllChem.GetMorganFingerprintAsBitVect(mol, 2, nBits=2048)
    out = np.zeros((1,))
    DataStructs.ConvertToNumpyArray(fp, out)
    return out.reshape(1, -1)


def make_oracle_dir(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _fit_oracle(_tdc_drd2_features, folder / "drd2_current.pkl")
    for name in ("gsk3b", "jnk3"):
        _fit_oracle(_tdc_kinase_features, folder / f"{name}_current.pkl")
    return folder


def test_tdc_oracle_files_are_read_without_pytdc(tmp_path):
    """load_tdc_oracle featurises like TDC's oracle.py and scores predict_proba[:, 1] (no PyTDC)."""
    import pickle

    from rdkit import Chem

    folder = make_oracle_dir(tmp_path / "oracle")
    feats = {
        "drd2": _tdc_drd2_features,
        "gsk3b": _tdc_kinase_features,
        "jnk3": _tdc_kinase_features,
    }
    for name, featurise in feats.items():
        clf = pickle.loads((folder / f"{name}_current.pkl").read_bytes())
        oracle = load_tdc_oracle(name, str(folder))
        for s in load_seed_smiles()[12:16]:
            want = clf.predict_proba(featurise(Chem.MolFromSmiles(s)))[0, 1]
            assert oracle(s) == pytest.approx(float(want), abs=1e-12)
        assert oracle("not a molecule") == 0.0
    prob = paper_problem(oracle_dir=str(folder))
    raw = prob.evaluate([prob.canonicalize("CCOc1ccccc1", "smiles")])
    assert raw.shape == (1, 5) and np.all((raw[:, [1, 3, 4]] >= 0) & (raw[:, [1, 3, 4]] <= 1))


# ----------------------------------------------------------------------------- paper smoke
_SMOKE_SERVERS: list = []


def _fake_chat_server(reply):
    """A local OpenAI-compatible ``/v1/chat/completions`` server answering ``reply(messages)``."""
    import json as _json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            req = _json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            body = {
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": reply(req["messages"])},
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
            }
            out = _json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _SMOKE_SERVERS.append(httpd)  # daemon thread; lives until the test process ends
    return f"http://127.0.0.1:{httpd.server_address[1]}/v1"


def paper_smoke_setup(tmp_path: Path) -> dict[str, str]:
    """TDC-format oracle files, a SMILES initial population and a fake GPT-4o endpoint.

    The fake API proposes two fresh NCI molecules in its first two calls and repeats them after,
    so the search stops on its stall rule within a few generations (no algorithm key changed).
    """
    fresh = load_nci_smiles(8)
    calls = {"n": 0}

    def reply(messages):
        k = min(calls["n"], 1)
        calls["n"] += 1
        a, b = fresh[2 * k], fresh[2 * k + 1]
        return f"<candidate>{a}</candidate>\n<candidate>{b}</candidate>"

    init = tmp_path / "zinc_random1.smi"
    init.write_text("\n".join(load_seed_smiles()[:12]) + "\n")
    return {
        "mcce_oracles": str(make_oracle_dir(tmp_path / "oracle")),
        "mcce_init": str(init),
        "mcce_api": _fake_chat_server(reply),
    }


PAPER_SMOKE: dict[str, list[str]] = {
    "paper": [
        "model.path={tiny_qwen2}",
        "model.dtype=float32",
        "method.use_vllm=false",
        "method.api_base_url={mcce_api}",
        "method.init_file={mcce_init}",
        "method.oracle_dir={mcce_oracles}",
        "method.checkpoint_dir={tmp}/ckpt",
        "method.search.pop_size=4",
        "method.search.max_stall_generations=2",
        "method.local_max_new_tokens=8",
        "method.dpo.bf16=false",
        "+method.dpo.per_device_train_batch_size=2",
        "+method.dpo.max_length=4096",
    ],
}
