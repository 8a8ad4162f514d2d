"""Forward-hook capture of module inputs/outputs and per-layer hidden states.

``capture`` registers hooks on named modules for the duration of a ``with`` block and always removes
them, also when the block raises. ``hidden_states`` runs a model over texts and returns, per text, the
stacked residual-stream states ``[L+1, T, D]`` without padding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Literal

import torch
from torch import nn


def _first_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (tuple, list)) and x and isinstance(x[0], torch.Tensor):
        return x[0]
    return None


@contextlib.contextmanager
def capture(
    model: nn.Module,
    module_names: Sequence[str],
    what: Literal["output", "input"] = "output",
    detach: bool = True,
) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Captures the first tensor input or output of each named module on every forward call.

    Args:
        model: the model whose submodules are hooked.
        module_names: names as in ``model.named_modules()``.
        what: ``"output"`` (the module's output) or ``"input"`` (its first positional input, e.g.
            the activation entering a linear layer).
        detach: detach captured tensors (set False to keep the graph, e.g. for gradients).

    Yields:
        A dict ``name -> list of tensors``, one per forward call, filled as the model runs.

    Raises:
        ValueError: on an unknown module name or ``what``.
    """
    if what not in ("output", "input"):
        raise ValueError(f"what must be 'output' or 'input', got {what!r}")
    modules = dict(model.named_modules())
    missing = [n for n in module_names if n not in modules]
    if missing:
        raise ValueError(f"unknown module names {missing}; e.g. {list(modules)[1:6]}")
    store: dict[str, list[torch.Tensor]] = {n: [] for n in module_names}
    handles = []

    def make_hook(name: str):
        def hook(_module, inputs, output):
            t = _first_tensor(output if what == "output" else inputs)
            if t is not None:
                store[name].append(t.detach() if detach else t)

        return hook

    try:
        for n in module_names:
            handles.append(modules[n].register_forward_hook(make_hook(n)))
        yield store
    finally:
        for h in handles:
            h.remove()


@torch.no_grad()
def hidden_states(
    model: nn.Module,
    tokenizer,
    texts: Sequence[str],
    layers: Sequence[int] | None = None,
    batch_size: int = 8,
    max_length: int | None = None,
) -> list[torch.Tensor]:
    """Per-text hidden states ``[len(layers), T_i, D]`` (padding removed), float32 on CPU.

    ``layers`` index ``output_hidden_states`` (0 = embeddings, L = last layer); None keeps all L+1.

    Raises:
        ValueError: on an empty ``texts`` or a layer out of range.
    """
    if len(texts) == 0:
        raise ValueError("texts must not be empty")
    device = next(model.parameters()).device
    out: list[torch.Tensor] = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(
            list(texts[i : i + batch_size]),
            return_tensors="pt",
            padding=True,
            truncation=max_length is not None,
            max_length=max_length,
        ).to(device)
        hs = model(**enc, output_hidden_states=True).hidden_states  # (L+1) x [b, T, D]
        n_layers = len(hs)
        idx = list(range(n_layers)) if layers is None else list(layers)
        if any(not -n_layers <= j < n_layers for j in idx):
            raise ValueError(f"layers must lie in [-{n_layers}, {n_layers}), got {idx}")
        stacked = torch.stack([hs[j] for j in idx], dim=1)  # [b, len(idx), T, D]
        for row, mask in zip(stacked, enc["attention_mask"].bool()):
            out.append(row[:, mask].float().cpu())  # [len(idx), T_i, D]
    return out
