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
        partition_u: per block, the ``[G]`` uncertainties of the generation region from the partition pass.
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
        """``[G]`` the decoded tokens."""
        return self.sequences[0, self.prompt_len :]

    @property
    def tokens_per_nfe(self) -> float:
        """Generated positions per model call."""
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


def _init_state(adapter, prompt_ids, gen_length):
    p = prompt_ids.shape[1]
    masks = torch.full((1, gen_length), adapter.mask_id, dtype=torch.long, device=prompt_ids.device)
    x = torch.cat([prompt_ids, masks], dim=1)  # [1, T]
    commit_step = torch.full((gen_length,), -1, dtype=torch.long)
    return x, p, commit_step


def _commit(x, s, e, x0, commit, commit_step, p, step):
    x[:, s:e] = torch.where(commit, x0, x[:, s:e])
    idx = commit[0].nonzero().squeeze(-1) + (s - p)
    commit_step[idx] = step


def swordsman_generate(
    adapter: DLMAdapter,
    prompt_ids: torch.Tensor,
    cfg: SwordsmanConfig | None = None,
    generator: torch.Generator | None = None,
) -> DecodeResult:
    """Decode ``cfg.gen_length`` tokens with entropy-driven blocks and dynamic unmasking.

    The paper's decoder (abstract: entropy-driven partition + dynamic parallel unmasking), as official
    ``llada/generate.py::generate_adaptive`` and its prefix/dual-cache variants; Dream as
    ``dream/model/generation_utils_block.py::_sample_adaptive``.

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
    x, p, commit_step = _init_state(adapter, prompt_ids, g)
    total = p + g
    mask_id = adapter.mask_id
    conf_dtype = getattr(torch, cfg.confidence_dtype)
    nfe, step = 0, 0
    boundaries: list[int] = []
    taus: list[float] = []
    partition_u: list[torch.Tensor] = []
    s = p
    while s < total:
        # Line 3: full pass -> partition signal, step-0 logits of the block, fresh cache.
        logits, past = adapter.forward(x, use_cache=cfg.cache != "none")  # [1, T, V]
        nfe += 1
        u = uncertainty(logits[0], cfg.metric)  # [T]
        partition_u.append(u[p:].detach().cpu())
        ell = next_block_length(
            u, s, cfg.min_block_len, cfg.max_block_len, cfg.min_jump, seq_end=total
        )
        e = s + ell
        boundaries.append(e)
        blk_logits = logits[:, s:e]  # [1, ℓ, V]
        h_ref: float | None = None
        t = 0
        while True:
            masked = x[:, s:e] == mask_id  # [1, ℓ]
            h_cur = float(token_entropy(blk_logits)[masked].mean())
            if h_ref is None:
                h_ref = h_cur if cfg.pivot == "initial" else float(cfg.pivot)
            tau = dynamic_threshold(
                h_cur, h_ref, cfg.tau_max, cfg.tau_min, cfg.gamma, cfg.schedule, cfg.threshold_rule
            )
            if t == 0 and cfg.dream_first_token_greedy:
                # Dream cached path (repo): commit the block's first token from the full pass alone.
                x0 = blk_logits.float().index_fill(-1, torch.tensor([mask_id]), -torch.inf)
                x0 = x0.argmax(-1)  # [1, ℓ]
                commit = torch.zeros_like(masked)
                commit[:, 0] = masked[:, 0]
                if not commit.any():
                    commit[:, masked[0].nonzero()[0]] = True
            else:
                x0, commit = select_transfer(
                    blk_logits, x[:, s:e], mask_id, tau, cfg.temperature, generator, conf_dtype
                )
            taus.append(tau)
            _commit(x, s, e, x0, commit, commit_step, p, step)
            step += 1
            t += 1
            if not (x[:, s:e] == mask_id).any():
                break
            if t >= ell:  # >= 1 commit per step, so a block of ℓ must finish in ℓ steps
                raise RuntimeError(f"block [{s}, {e}) did not finish in {ell} steps")
            blk_logits = adapter.block_forward(x, s, e, past, cfg.cache)  # [1, ℓ, V]
            nfe += 1
        s = e
    return DecodeResult(
        sequences=x,
        nfe=nfe,
        boundaries=boundaries,
        taus=taus,
        wall_time=time.perf_counter() - t0,
        prompt_len=p,
        commit_step=commit_step,
        partition_u=partition_u,
    )


def fixed_block_generate(
    adapter: DLMAdapter,
    prompt_ids: torch.Tensor,
    gen_length: int,
    block_len: int = 32,
    tau: float = 0.9,
    cache: str = "none",
    confidence_dtype: torch.dtype = torch.float64,
) -> DecodeResult:
    """Fast-dLLM baseline: fixed blocks of ``block_len``, fixed threshold ``tau`` + forced top-1 (Fast-dLLM).

    Each block starts with a full pass (refreshing the cache) and continues with cached block passes.
    The last block is shorter when ``gen_length`` is not a multiple of ``block_len``.
    """
    _check_inputs(adapter, prompt_ids, gen_length, cache)
    if block_len < 1:
        raise ValueError(f"block_len must be >= 1, got {block_len}")
    if not 0.0 < tau <= 1.0:
        raise ValueError(f"tau must be in (0, 1], got {tau}")
    t0 = time.perf_counter()
    x, p, commit_step = _init_state(adapter, prompt_ids, gen_length)
    total = p + gen_length
    nfe, step = 0, 0
    boundaries = [min(b + block_len, total) for b in range(p, total, block_len)]
    taus: list[float] = []
    s = p
    for e in boundaries:
        logits, past = adapter.forward(x, use_cache=cache != "none")  # [1, T, V]
        nfe += 1
        blk_logits = logits[:, s:e]
        while True:
            x0, commit = select_transfer(
                blk_logits, x[:, s:e], adapter.mask_id, tau, confidence_dtype=confidence_dtype
            )
            _commit(x, s, e, x0, commit, commit_step, p, step)
            taus.append(tau)
            step += 1
            if not (x[:, s:e] == adapter.mask_id).any():
                break
            blk_logits = adapter.block_forward(x, s, e, past, cache)
            nfe += 1
        s = e
    return DecodeResult(x, nfe, boundaries, taus, time.perf_counter() - t0, p, commit_step)


def vanilla_generate(
    adapter: DLMAdapter,
    prompt_ids: torch.Tensor,
    gen_length: int,
    steps: int,
    block_len: int | None = None,
) -> DecodeResult:
    """Vanilla LLaDA decoding: a fixed number of steps, committing the k most confident tokens (official ``generate``).

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
    x, p, commit_step = _init_state(adapter, prompt_ids, gen_length)
    nfe, step = 0, 0
    boundaries = []
    for b in range(n_blocks):
        s, e = p + b * block_len, p + (b + 1) * block_len
        boundaries.append(e)
        ks = [block_len // per_block + (i < block_len % per_block) for i in range(per_block)]
        for k in ks:
            logits = adapter.forward(x)[0][:, s:e]  # [1, ℓ, V]
            nfe += 1
            probs = torch.softmax(logits.float(), -1)
            probs[..., adapter.mask_id] = -1.0  # never propose the mask token
            conf, x0 = probs.max(-1)  # [1, ℓ]
            masked = x[:, s:e] == adapter.mask_id
            conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
            top = conf[0].topk(k).indices
            commit = torch.zeros_like(masked)
            commit[0, top] = True
            _commit(x, s, e, x0, commit, commit_step, p, step)
            step += 1
    return DecodeResult(x, nfe, boundaries, [], time.perf_counter() - t0, p, commit_step)
