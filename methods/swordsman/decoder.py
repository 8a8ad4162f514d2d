"""Semi-autoregressive block decoders: Swordsman, the fixed-block Fast-dLLM baseline and vanilla LLaDA.

Official code: zy-ansel/Swordsman ``llada/generate.py`` (``generate_adaptive`` and the cached variants). At each block start one full forward pass gives every masked
position's prediction; its entropies place the block's right edge (``next_block_length``) and its
logits serve as the block's first denoising step. Inside the block, tokens whose confidence clears the
dynamic threshold (``dynamic_threshold``) are committed in parallel until the block is full.
Shapes: ``P`` prompt length, ``G`` generation length, ``T = P + G``, ``V`` vocabulary, ``ℓ`` block length.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import torch

from methods.swordsman.adapters import DLMAdapter
from methods.swordsman.config import SwordsmanConfig
from methods.swordsman.partition import next_block_length
from methods.swordsman.threshold import dynamic_threshold
from methods.swordsman.uncertainty import token_entropy, uncertainty
from methods.swordsman.unmask import select_transfer

logger = logging.getLogger(__name__)


@dataclass
class DecodeResult:
    """Output of a block decoder.

    Attributes:
        sequences: ``[1, T]`` prompt followed by the ``G`` decoded tokens.
        nfe: number of model calls (full passes plus cached block passes).
        boundaries: absolute end position of every block, in order (the last is ``T``).
        taus: commit threshold used at every denoising step.
        wall_time: seconds spent decoding.
        prompt_len: ``P``.
        commit_step: ``[G]`` index of the denoising step at which each position was committed.
        partition_u: per block starting at ``s``, the uncertainties of positions
            ``[s, min(s + max_block_len, T))`` from the partition pass (the window the rule reads).
    """

    sequences: torch.Tensor
    nfe: int
    boundaries: list[int]
    taus: list[float]
    wall_time: float
    prompt_len: int
    commit_step: torch.Tensor
    partition_u: list[torch.Tensor] = field(default_factory=list)

    @property
    def generated(self) -> torch.Tensor:
        """``[G]`` the decoded tokens. Source: engineering, not in the paper."""
        return self.sequences[0, self.prompt_len :]

    @property
    def tokens_per_nfe(self) -> float:
        """Generated positions per model call.

        Source: engineering, not in the paper.
        """
        return self.generated.numel() / max(self.nfe, 1)


def _check_inputs(adapter: DLMAdapter, prompt_ids: torch.Tensor, gen_length: int, cache: str):
    for attr in ("mask_id", "supports"):
        if getattr(adapter, attr, None) is None:
            raise ValueError(f"adapter must define {attr!r} (see DLMAdapter)")
    if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.dtype != torch.long:
        raise TypeError("prompt_ids must be a LongTensor [1, P]")
    if prompt_ids.dim() != 2 or prompt_ids.shape[0] != 1:
        raise ValueError(
            f"prompt_ids must have shape [1, P] (batch size 1, as in the official code; loop over "
            f"prompts for more), got {tuple(prompt_ids.shape)}"
        )
    if prompt_ids.shape[1] == 0:
        raise ValueError("prompt_ids is empty: the prompt needs at least one token")
    if (prompt_ids == adapter.mask_id).any():
        raise ValueError(f"prompt_ids contains the mask id {adapter.mask_id}")
    if int(gen_length) <= 0:
        raise ValueError(f"gen_length must be > 0, got {gen_length}")
    if cache not in adapter.supports:
        raise ValueError(
            f"cache={cache!r} is not supported by this adapter (supports {sorted(adapter.supports)}); "
            "load a modeling file with past_key_values/replace_position or use cache='none'"
        )


@dataclass
class _State:
    """Mutable decoding state shared by the steps of a block decoder.

    Attributes:
        x: ``[1, T]`` current sequence (``mask_id`` where undecided).
        p: prompt length ``P``.
        commit_step: ``[G]`` step at which each position was committed (-1: not yet), on ``x``'s device.
    """

    x: torch.Tensor
    p: int
    commit_step: torch.Tensor
    nfe: int = 0
    step: int = 0
    boundaries: list[int] = field(default_factory=list)
    taus: list[float] = field(default_factory=list)
    partition_u: list[torch.Tensor] = field(default_factory=list)

    @property
    def total(self) -> int:
        """``T = P + G``."""
        return self.x.shape[1]

    def result(self, t0: float) -> DecodeResult:
        return DecodeResult(
            sequences=self.x,
            nfe=self.nfe,
            boundaries=self.boundaries,
            taus=self.taus,
            wall_time=time.perf_counter() - t0,
            prompt_len=self.p,
            commit_step=self.commit_step.cpu(),
            partition_u=self.partition_u,
        )


def _init_state(adapter, prompt_ids, gen_length) -> _State:
    """Line 1 of the decoder (official ``generate_adaptive``): ``x = [prompt, mask^G]``."""
    p = prompt_ids.shape[1]
    masks = torch.full((1, gen_length), adapter.mask_id, dtype=torch.long, device=prompt_ids.device)
    x = torch.cat([prompt_ids, masks], dim=1)  # [1, T]
    commit_step = torch.full((gen_length,), -1, dtype=torch.long, device=prompt_ids.device)
    return _State(x=x, p=p, commit_step=commit_step)


def _commit(st: _State, s: int, e: int, x0: torch.Tensor, commit: torch.Tensor) -> None:
    """Write the committed tokens of block ``[s, e)`` and record the step (no host sync)."""
    st.x[:, s:e] = torch.where(commit, x0, st.x[:, s:e])
    st.commit_step[s - st.p : e - st.p].masked_fill_(commit[0], st.step)
    st.step += 1


def _partition_pass(adapter: DLMAdapter, st: _State, s: int, cfg: SwordsmanConfig):
    """Lines 3-4 of the decoder: one full pass at the block start; the uncertainty of its predictions
    places the block's end (paper: boundaries at entropy rises ΔH_i = H_{i+1} − H_i; rule of official
    ``llada/generate.py::determine_next_block_length``). The same logits are the block's step 0 and the
    pass refreshes the KV cache (official ``generate_with_*_cache_adaptive``).

    Returns:
        ``(logits [1, T, V], past, e)`` with the block ``[s, e)`` appended to ``st.boundaries``.
    """
    logits, past = adapter.forward(st.x, use_cache=cfg.cache != "none")  # [1, T, V]
    st.nfe += 1
    # The rule reads u only on [s + m_min - 1, min(s + M_max, T)): computing the uncertainty of the
    # positions [s, min(s + M_max, T)) instead of all T (row-wise, so the same values on the CPU;
    # "our inference") makes this pass O(M_max · V) instead of O(T · V).
    w_end = min(s + cfg.max_block_len, st.total)
    u = uncertainty(logits[0, s:w_end], cfg.metric)  # [w_end - s]
    st.partition_u.append(u.detach().cpu())
    ell = next_block_length(
        u, 0, cfg.min_block_len, cfg.max_block_len, cfg.min_jump, seq_end=w_end - s
    )
    st.boundaries.append(s + ell)
    return logits, past, s + ell


def _step_threshold(
    blk_logits: torch.Tensor, masked: torch.Tensor, h_ref: float | None, cfg: SwordsmanConfig
) -> tuple[float, float]:
    """Dynamic threshold of one denoising step (paper abstract: the threshold adapts to the real-time
    unmasking status; formula of official ``get_dynamic_threshold_by_entropy``): ``H̄_t`` is the mean
    entropy of the block's still-masked positions, ``H̄_0`` its value at the block's step 0 (or the fixed
    ``cfg.pivot``).

    Returns:
        ``(τ_t, H̄_0)``.
    """
    h_cur = float(token_entropy(blk_logits)[masked].mean())
    if h_ref is None:
        h_ref = h_cur if cfg.pivot == "initial" else float(cfg.pivot)
    tau = dynamic_threshold(
        h_cur, h_ref, cfg.tau_max, cfg.tau_min, cfg.gamma, cfg.schedule, cfg.threshold_rule
    )
    return tau, h_ref


def _greedy_first_token(blk_logits: torch.Tensor, masked: torch.Tensor, mask_id: int):
    """Dream cached path (official ``dream/model/generation_utils_block.py::_sample_adaptive``): commit
    the block's first masked token greedily from the full pass alone.

    Returns:
        ``(x0 [1, ℓ], commit [1, ℓ])``.
    """
    fill = torch.tensor([mask_id], device=blk_logits.device)
    x0 = blk_logits.float().index_fill(-1, fill, -torch.inf).argmax(-1)  # [1, ℓ]
    commit = torch.zeros_like(masked)
    commit[:, 0] = masked[:, 0]
    if not commit.any():
        commit[:, masked[0].nonzero()[0]] = True
    return x0, commit


def _decode_block(
    adapter: DLMAdapter,
    st: _State,
    s: int,
    e: int,
    blk_logits: torch.Tensor,
    past,
    cfg: SwordsmanConfig,
    generator: torch.Generator | None,
) -> None:
    """Lines 7-11 of the decoder: denoise block ``[s, e)`` until it has no mask (dynamic parallel
    unmasking; official ``generate_adaptive`` inner loop). Step 0 uses the partition pass's logits, later
    steps a cached block pass (``adapter.block_forward``); every step commits ``≥ 1`` token, so a block of
    ``ℓ`` finishes within ``ℓ`` steps.
    """
    mask_id = adapter.mask_id
    conf_dtype = getattr(torch, cfg.confidence_dtype)
    h_ref: float | None = None
    for t in range(e - s):
        if t > 0:
            blk_logits = adapter.block_forward(st.x, s, e, past, cfg.cache)  # [1, ℓ, V]
            st.nfe += 1
        masked = st.x[:, s:e] == mask_id  # [1, ℓ]
        tau, h_ref = _step_threshold(blk_logits, masked, h_ref, cfg)
        if t == 0 and cfg.dream_first_token_greedy:
            x0, commit = _greedy_first_token(blk_logits, masked, mask_id)
        else:
            x0, commit = select_transfer(
                blk_logits, st.x[:, s:e], mask_id, tau, cfg.temperature, generator, conf_dtype
            )
        st.taus.append(tau)
        _commit(st, s, e, x0, commit)
        if not (masked & ~commit).any():
            return
    raise RuntimeError(f"block [{s}, {e}) did not finish in {e - s} steps")


def swordsman_generate(
    adapter: DLMAdapter,
    prompt_ids: torch.Tensor,
    cfg: SwordsmanConfig | None = None,
    generator: torch.Generator | None = None,
) -> DecodeResult:
    """Decode ``cfg.gen_length`` tokens with entropy-driven blocks and dynamic unmasking.

    The paper's decoder (abstract: entropy-driven partition + dynamic parallel unmasking), as official
    ``llada/generate.py::generate_adaptive`` and its prefix/dual-cache variants; Dream as
    ``dream/model/generation_utils_block.py::_sample_adaptive``. Per block: ``_partition_pass`` (one full
    pass, block end), then ``_decode_block`` (threshold ``_step_threshold``, commits ``select_transfer``).

    Degenerate settings: ``min_block_len == max_block_len = B`` gives fixed blocks of ``B``;
    ``tau_min == tau_max = τ`` gives a fixed threshold; both together reproduce
    ``fixed_block_generate(B, τ)`` token for token.

    Args:
        adapter: model adapter (``DLMAdapter``).
        prompt_ids: ``[1, P]`` prompt token ids, no mask ids.
        cfg: decoding configuration (defaults: the paper's LLaDA setting).
        generator: RNG used only when ``cfg.temperature > 0``.

    Returns:
        ``DecodeResult`` with sequences ``[1, P + G]``, exact NFE, block boundaries and per-step τ.

    Raises:
        ValueError/TypeError: on bad prompts, unsupported cache modes, or non-finite logits.
    """
    cfg = cfg or SwordsmanConfig()
    g = int(cfg.gen_length)
    _check_inputs(adapter, prompt_ids, g, cfg.cache)
    t0 = time.perf_counter()
    st = _init_state(adapter, prompt_ids, g)
    s = st.p
    while s < st.total:
        logits, past, e = _partition_pass(adapter, st, s, cfg)
        _decode_block(adapter, st, s, e, logits[:, s:e], past, cfg, generator)
        s = e
    return st.result(t0)


def fixed_block_generate(
    adapter: DLMAdapter,
    prompt_ids: torch.Tensor,
    gen_length: int,
    block_len: int = 32,
    tau: float = 0.9,
    cache: str = "none",
    confidence_dtype: torch.dtype = torch.float64,
) -> DecodeResult:
    """Fast-dLLM baseline: fixed blocks of ``block_len``, fixed threshold ``tau`` + forced top-1.

    Fast-dLLM's confidence-threshold parallel decoding (Wu et al. 2025, arXiv:2505.22618), the paper's
    main baseline (block 32, τ = 0.9: the authors' rebuttal Table 14.3 "fixed method, 32"); the exact
    special case ``m_min = M_max = B``, ``τ_min = τ_max = τ`` of ``swordsman_generate``.

    Each block starts with a full pass (refreshing the cache) and continues with cached block passes.
    The last block is shorter when ``gen_length`` is not a multiple of ``block_len``.
    """
    _check_inputs(adapter, prompt_ids, gen_length, cache)
    if block_len < 1:
        raise ValueError(f"block_len must be >= 1, got {block_len}")
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    t0 = time.perf_counter()
    st = _init_state(adapter, prompt_ids, gen_length)
    st.boundaries = [min(b + block_len, st.total) for b in range(st.p, st.total, block_len)]
    s = st.p
    for e in st.boundaries:
        logits, past = adapter.forward(st.x, use_cache=cache != "none")  # [1, T, V]
        st.nfe += 1
        blk_logits = logits[:, s:e]
        while True:
            x0, commit = select_transfer(
                blk_logits, st.x[:, s:e], adapter.mask_id, tau, confidence_dtype=confidence_dtype
            )
            _commit(st, s, e, x0, commit)
            st.taus.append(tau)
            if not (st.x[:, s:e] == adapter.mask_id).any():
                break
            blk_logits = adapter.block_forward(st.x, s, e, past, cache)
            st.nfe += 1
        s = e
    return st.result(t0)


def vanilla_generate(
    adapter: DLMAdapter,
    prompt_ids: torch.Tensor,
    gen_length: int,
    steps: int,
    block_len: int | None = None,
) -> DecodeResult:
    """Vanilla LLaDA decoding: a fixed number of steps, committing the k most confident tokens.

    LLaDA's low-confidence remasking (Nie et al. 2025, arXiv:2502.09992), as official
    ``llada/generate.py::generate``; the paper's "vanilla LLaDA" row (a single 512-token block).

    The ``steps`` are split evenly over blocks of ``block_len`` (one block of ``gen_length`` by default);
    inside a block, step ``i`` commits ``k_i`` tokens with the ``k_i`` spread as evenly as possible.
    """
    block_len = gen_length if block_len is None else block_len
    _check_inputs(adapter, prompt_ids, gen_length, "none")
    if block_len < 1 or gen_length % block_len:
        raise ValueError(f"block_len must divide gen_length={gen_length}, got {block_len}")
    n_blocks = gen_length // block_len
    if steps < n_blocks or steps % n_blocks:
        raise ValueError(f"steps must be a positive multiple of the {n_blocks} blocks, got {steps}")
    per_block = min(steps // n_blocks, block_len)
    t0 = time.perf_counter()
    st = _init_state(adapter, prompt_ids, gen_length)
    for b in range(n_blocks):
        s, e = st.p + b * block_len, st.p + (b + 1) * block_len
        st.boundaries.append(e)
        ks = [block_len // per_block + (i < block_len % per_block) for i in range(per_block)]
        for k in ks:
            logits = adapter.forward(st.x)[0][:, s:e]  # [1, ℓ, V]
            st.nfe += 1
            probs = torch.softmax(logits.float(), -1)
            probs[..., adapter.mask_id] = -1.0  # never propose the mask token
            conf, x0 = probs.max(-1)  # [1, ℓ]
            masked = st.x[:, s:e] == adapter.mask_id
            conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
            top = conf[0].topk(k).indices
            commit = torch.zeros_like(masked)
            commit[0, top] = True
            _commit(st, s, e, x0, commit)
    return st.result(t0)
