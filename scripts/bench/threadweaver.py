"""ThreadWeaver: wall-clock of the trie rollout on a batched engine vs sequential decoding (issue 33
point 8), plus the trie-packing cost of training.

Rollout rows. One toy trajectory per (K threads, T tokens per thread): a prompt, an outline block of
K outlines, K threads of T code tokens, and a final answer (``methods/threadweaver/toy.py``).

* method: the fork/join rollout of :class:`ParallelOrchestrator` (§3.2): one request up to
  ``</Outlines>``, the K thread requests decoded together as one left-padded batch, the join, and
  one request for the rest;
* baseline: the same orchestrator in hybrid AR mode (``parallel=False``): one request that decodes
  the same response token by token.

Both run on :class:`HFGenerateEngine` (batched HF ``generate``, left padding, KV cache) over the
same tiny random Qwen3, greedy. A random model does not write the format, so both arms are *forced*
to emit the trajectory's tokens: a logits processor keeps only the scripted next token of each row
(the model still runs every forward; only the argmax is replaced, at the same cost in both arms).
The bench checks that both arms return the identical response ids, then reports the wall-clock ratio
next to the critical-path ratio (``L_longest / L_total``, §5.3) of that response, and the number of
model forward calls of each arm.

Packing rows: tokens of one packed trie vs the sum of its units, and one packed forward vs one
forward per unit (§3.3, the training side).

    python -m scripts.bench threadweaver [--quick]
    python scripts/bench/threadweaver.py [--quick]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.bench._harness import row, spread_ratio, time_pair  # noqa: E402


class _Force:
    """Logits processor: row i may only emit ``targets[i][step]`` (then its first stop id)."""

    def __init__(self, targets: list[list[int]], n_prompt: int, fill: int):
        self.targets, self.n, self.fill = targets, n_prompt, fill

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.n
        nxt = [t[step] if step < len(t) else self.fill for t in self.targets]
        out = torch.full_like(scores, float("-inf"))  # [B, V]
        out[torch.arange(len(nxt)), torch.tensor(nxt)] = 0.0
        return out


class _ForcedModel:
    """Wraps a causal LM so that ``generate`` emits scripted continuations (see module docstring).

    ``scripts`` are token sequences; a request whose prompt is a prefix of a script continues it.
    Counts the model's forward calls.
    """

    def __init__(self, model, scripts: list[list[int]], fill: int):
        self.model, self.scripts, self.fill = model, scripts, fill
        self.forwards = 0

    def _count(self, *_) -> None:
        self.forwards += 1

    def parameters(self):
        return self.model.parameters()

    def _continuation(self, prompt: list[int]) -> list[int]:
        conts = [s[len(prompt) :] for s in self.scripts if s[: len(prompt)] == prompt]
        if not conts:
            raise RuntimeError(f"no script continues a prompt of {len(prompt)} tokens")
        return max(conts, key=len)

    def generate(self, input_ids, attention_mask, **kw):
        from transformers import LogitsProcessorList

        n = input_ids.shape[1]
        prompts = [r[m.bool()].tolist() for r, m in zip(input_ids, attention_mask)]
        force = _Force([self._continuation(p) for p in prompts], n, self.fill)
        hook = self.model.register_forward_pre_hook(self._count)
        try:
            return self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                logits_processor=LogitsProcessorList([force]),
                **kw,
            )
        finally:
            hook.remove()


_MATMUL_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
)


def _profile(fn) -> str:
    """Share of one call's wall time spent in torch ops, and in matmuls + attention (profiler)."""
    import time

    import torch.profiler as tp

    t = time.perf_counter()
    with tp.profile(activities=[tp.ProfilerActivity.CPU]) as prof:
        fn()
    wall = time.perf_counter() - t
    ev = prof.key_averages()
    ops = sum(e.self_cpu_time_total for e in ev) / 1e6
    mm = sum(e.self_cpu_time_total for e in ev if e.key in _MATMUL_OPS) / 1e6
    return f"{wall:.2f} s under the profiler, torch ops {ops / wall:.0%}, matmul + attention {mm / wall:.0%}"


def _toy_case(k: int, t_len: int):
    """Tokenizer, prompt, and the units of the parallel and the sequential toy trace."""
    from methods.threadweaver import extract_units
    from methods.threadweaver.toy import make_codebook, toy_prompt, toy_tokenizer, toy_trajectory

    tok = toy_tokenizer(n_symbols=max(8, k), chain_len=t_len, num_colon=True)

    def enc(s: str) -> list[int]:
        return tok(s, add_special_tokens=False)["input_ids"]

    syms = list(range(k))
    prompt = [tok.bos_token_id, *enc(toy_prompt(syms))]
    cb = make_codebook(max(8, k), t_len, 0)
    resp, units = extract_units(prompt, toy_trajectory(syms, cb, "par"), enc, tok.eos_token_id)
    _, seq_units = extract_units(prompt, toy_trajectory(syms, cb, "seq"), enc, tok.eos_token_id)
    return tok, prompt, resp, units, seq_units


def _rollout_case(
    model,
    k: int,
    t_len: int,
    repeats: int,
    label: str = "",
    vs_seq_trace: bool = False,
    profile: bool = False,
) -> tuple[list[dict], str]:
    from methods.threadweaver import HFGenerateEngine, OrchestratorConfig, ParallelOrchestrator

    tok, prompt, resp, units, seq_units = _toy_case(k, t_len)
    fm = _ForcedModel(model, [u.ids for u in units], tok.eos_token_id)
    fm_seq = _ForcedModel(model, [seq_units[0].ids], tok.eos_token_id)
    eng = HFGenerateEngine(fm, tok.pad_token_id, batch_size=64)
    par = ParallelOrchestrator(eng, tok, OrchestratorConfig(temperature=0.0))
    seq = ParallelOrchestrator(eng, tok, OrchestratorConfig(temperature=0.0, parallel=False))
    r_par, r_seq = par.run(prompt), seq.run(prompt)
    if not r_par.response_ids == r_seq.response_ids == resp:
        raise RuntimeError(f"K={k} T={t_len}: the two rollouts produced different tokens")
    fwd = {}
    for name, orch in (("par", par), ("seq", seq)):
        fm.forwards = 0
        orch.run(prompt)
        fwd[name] = fm.forwards
    m, b, ratio, q1, q3 = time_pair(lambda: par.run(prompt), lambda: seq.run(prompt), repeats)
    speedup = 1.0 / ratio  # median of the interleaved per-repeat ratios (robust to load drift)
    st = r_par.stats
    tag = f"K={k}, T={t_len}{label}"
    rows = [
        row(f"rollout wall time (s), {tag}", m, b, spread_ratio(q1, q3), max_ratio=1.0),
        row(f"critical path (tokens), {tag}", st.longest, st.total, "L_longest / L_total"),
        row(f"model forward calls, {tag}", fwd["par"], fwd["seq"], "prefills + decode steps"),
        row(f"wall time per forward call (ms), {tag}", 1e3 * m / fwd["par"],
            1e3 * b / fwd["seq"], "batch K vs batch 1"),
    ]  # fmt: skip
    eff = f"{tag}: wall {speedup:.2f}×, forward calls {fwd['seq'] / fwd['par']:.2f}×"
    if profile:
        eff += (f" (profile of one rollout: fork/join {_profile(lambda: par.run(prompt))}; "
                f"sequential {_profile(lambda: seq.run(prompt))})")  # fmt: skip
    # the match the issue asks about: wall-clock speed-up against the critical-path speed-up
    rows.append(row(f"wall speed-up vs critical-path speed-up, {tag}", speedup,
                    st.total / st.longest, "seq ÷ par each; wall: median per-repeat ratio",
                    min_ratio=0.8, max_ratio=1.25))  # fmt: skip
    # closed form: critical path of the parallel trace vs the sequential-format trace (a perfect
    # model of each format; the outline and wrapper tokens are the parallel format's overhead)
    n_seq = len(seq_units[0].completion)
    rows.append(row(f"critical path vs the sequential-format trace (tokens), {tag}", st.longest,
                    n_seq, "closed form"))  # fmt: skip
    if vs_seq_trace:
        ar = ParallelOrchestrator(
            HFGenerateEngine(fm_seq, tok.pad_token_id), tok,
            OrchestratorConfig(temperature=0.0, parallel=False),
        )  # fmt: skip
        if ar.run(prompt).response_ids != seq_units[0].completion:
            raise RuntimeError(f"{tag}: the sequential trace was not reproduced")
        m2, b2, _, q1, q3 = time_pair(lambda: par.run(prompt), lambda: ar.run(prompt), repeats)
        rows.append(row(f"rollout wall time vs the sequential-format trace (s), {tag}", m2, b2,
                        spread_ratio(q1, q3)))  # fmt: skip
    return rows, eff


def _packing_case(model, k: int, t_len: int, repeats: int) -> list[dict]:
    from methods.threadweaver import TrieCollator, build_packed, packed_forward

    tok, _, _, units, _ = _toy_case(k, t_len)
    packed = build_packed(units)
    batch = TrieCollator(tok.pad_token_id)([packed])

    def separate():
        for u in units:
            model(torch.tensor([u.ids]))

    with torch.no_grad():
        m, b, _, q1, q3 = time_pair(lambda: packed_forward(model, batch), separate, repeats)
    tag = f"K={k}, T={t_len}"
    return [
        row(f"trie tokens vs sum of units, {tag}", len(packed), sum(len(u.ids) for u in units)),
        row(f"packed forward vs one per unit (s), {tag}", m, b, spread_ratio(q1, q3)),
    ]


def _model(vocab: int, hidden: int, layers: int):
    from methods.threadweaver.config import ThreadWeaverConfig
    from methods.threadweaver.toy import _toy_model

    cfg = ThreadWeaverConfig(
        hidden_size=hidden, num_hidden_layers=layers, intermediate_size=2 * hidden
    )
    return _toy_model(cfg, vocab, 0).eval()


def run(quick: bool = False) -> dict:
    from methods.threadweaver.toy import toy_tokenizer

    if quick:
        cases, big_cases, repeats = [(2, 16), (4, 16)], [], 3
    else:
        cases, big_cases, repeats = [(2, 16), (4, 16), (4, 64), (8, 64)], [(4, 32)], 5
    vocab = len(toy_tokenizer(n_symbols=8, chain_len=max(t for _, t in cases), num_colon=True))
    model = _model(vocab, 64, 2)
    rows, effs = [], []
    for k, t_len in cases:
        prof = not quick and (k, t_len) == (4, 16)
        r, eff = _rollout_case(model, k, t_len, repeats, vs_seq_trace=not quick, profile=prof)
        rows += r
        effs.append(eff)
    for k, t_len in big_cases:
        big = _model(vocab, 384, 4)
        r, eff = _rollout_case(big, k, t_len, 3, ", d=384, 4 layers")
        rows += r
        effs.append(eff)
    for k, t_len in cases[-1:]:
        rows += _packing_case(model, k, t_len, repeats)
    notes = (
        "Tiny random Qwen3 (hidden 64, 2 layers: the toy's model"
        + ("; one case hidden 384, 4 layers" if big_cases else "")
        + "), "
        "greedy, forced to the toy trajectory's tokens; both arms return identical response ids "
        f"(checked). Speed-up seq ÷ par: {'; '.join(effs)}. The wall-clock speed-up follows the "
        "ratio of model forward calls, because one decode step costs about the same at batch K as "
        "at batch 1 here (row 'wall time per forward call'"
        + (
            "; the profile: the step is bound by HF generate's and the modules' Python overhead, "
            "not by arithmetic on the K rows"
            if not quick
            else "; profile: full mode only"
        )
        + "). It can exceed the "
        "critical-path speed-up: the critical path (§5.3) counts the thread headers and the join "
        "suffix the orchestrator inserts, which the engine prefills with the next request instead "
        "of decoding them one by one; against that, the fork/join arm pays three generate calls "
        "(the shared context is prefilled again for the threads and after the join: HF generate "
        "has no prefix cache) for one. 'vs the sequential-format trace': against the shorter "
        "sequential trace (no outlines or thread wrappers) decoded by the same model, as in the "
        "paper's comparison with a sequential model. Thresholds: ours (the issue sets none): "
        "the batched rollout not slower than sequential decoding of the same tokens, and its "
        "speed-up within 0.8-1.25× of the critical-path speed-up."
    )
    return {
        "title": "ThreadWeaver trie rollout: batched fork/join vs sequential decoding",
        "command": "python -m scripts.bench threadweaver" + (" --quick" if quick else ""),
        "rows": rows,
        "notes": notes,
    }


if __name__ == "__main__":
    import json

    torch.set_num_threads(1)
    print(json.dumps(run(quick="--quick" in sys.argv), indent=2, default=str))
