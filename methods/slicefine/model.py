"""Applying SliceFine to a model and moving its slices (paper Fig. 1: row, column and
row-column slices that slide; the schedule's details are our inference).

``apply_slicefine`` swaps every targeted ``nn.Linear`` for a :class:`SliceFineLinear`, freezes all
other weights (except ``modules_to_save``, e.g. a classifier head) and returns a
:class:`SliceFineModel`. Every ``switch_every`` steps ``switch()`` commits each layer's slice into its
weight and activates the next one, synchronously across layers:

- ``mode="row"`` / ``"column"``: a sweep; the cursor advances by r, the last partial slice is clamped
  to d − r, and it wraps to 0 after the end (our reconstruction of "slides");
- ``mode="alternate"``: row and column blocks alternate, each with its own cursor (our inference).

``merge_and_unload`` returns the original module classes with the update folded in (zero new
parameters); ``slice_state_dict`` / ``save_slices`` is the compact artifact: the final values of the
touched rows and columns (each entry once, as contiguous blocks), which restore the merged weights
bit-exactly on top of the base model.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from methods.slicefine.layer import SliceFineLinear

Mode = Literal["row", "column", "alternate"]
_MODES = ("row", "column", "alternate")


@dataclass
class SliceFineConfig:
    """SliceFine's knobs (all values are reconstructed defaults, not paper settings)."""

    r: int = 4  # slice width; "r = 1 is often competitive" (project page), 4 [inferred]
    mode: Mode = "row"  # row | column | alternate (paper Fig. 1)
    switch_every: int | None = 100  # N steps between moves; None = static slice [inferred]
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")  # LiME's targets
    init_position: Literal["random", "zero"] = "random"  # "randomly chosen slice" (paper)
    train_bias: bool = False  # [inferred]
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {self.mode!r}")
        if self.switch_every is not None and self.switch_every <= 0:
            raise ValueError(
                f"switch_every must be a positive int or None, got {self.switch_every}"
            )
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r <= 0:
            raise ValueError(f"r must be a positive int, got {self.r!r}")
        if self.init_position not in ("random", "zero"):
            raise ValueError(
                f"init_position must be 'random' or 'zero', got {self.init_position!r}"
            )


def next_position(pos: int, r: int, dim: int) -> int:
    """The sweep's next slice start: pos + r, clamped to dim − r for the last partial slice, 0 after.

    Source: our inference (the paper's Figure 1 says the slice slides; the rule was not
    recovered).
    """
    nxt = pos + r
    if nxt >= dim:
        return 0
    return min(nxt, dim - r)


def _matches(name: str, targets: str | Iterable[str]) -> bool:
    if isinstance(targets, str):
        return re.fullmatch(targets, name) is not None
    return any(name == t or name.endswith("." + t) for t in targets)


def _shared_weights(model: nn.Module) -> set[int]:
    seen: dict[int, int] = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        seen[id(p)] = seen.get(id(p), 0) + 1
    return {k for k, n in seen.items() if n > 1}


class SliceFineModel(nn.Module):
    """A model whose target linears carry moving trainable slices (paper Fig. 1: slices that slide;
    the switch schedule is our inference).

    Attributes:
        model: the wrapped model (its target layers replaced by ``SliceFineLinear``).
        layers: ``{module name: SliceFineLinear}``.
        config: the :class:`SliceFineConfig`.
    """

    def __init__(
        self, model: nn.Module, layers: dict[str, SliceFineLinear], config: SliceFineConfig
    ):
        super().__init__()
        self.model = model
        self.config = config
        self._names = list(layers)
        # Independent cursors for the alternate mode: {name: {"row": pos, "column": pos}}.
        self._cursor = {n: {layers[n].orient: layers[n].pos} for n in layers}
        self.num_switches = 0
        self._replaced: dict[int, tuple[nn.Parameter, nn.Parameter]] = {}

        # Expose the wrapped model's forward signature (HF Trainer drops dataset columns by it).
        def forward(*args, **kwargs):
            return self.model(*args, **kwargs)

        self.forward = functools.update_wrapper(forward, model.forward)

    @property
    def layers(self) -> dict[str, SliceFineLinear]:
        """The wrapped target layers by module name; engineering, not in the paper."""
        modules = dict(self.model.named_modules())
        return {n: modules[n] for n in self._names}

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "model":
                raise
            return getattr(self.model, name)  # config, generation_config, ... of the wrapped model

    def delta_parameters(self) -> list[nn.Parameter]:
        """The trainable slice parameters (one ``delta`` per target layer).

        Source: engineering, not in the paper.
        """
        return [layer.delta for layer in self.layers.values()]

    def trainable_parameters(self) -> int:
        """Number of trainable scalars (active slices plus heads/biases left trainable).

        Source: engineering, not in the paper.
        """
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    @torch.no_grad()
    def switch(self) -> None:
        """Commits every active slice and activates the next one (paper Figure 1; synchronous).

        Switching all layers at once is our inference.

        Call :func:`reset_slice_optimizer_state` afterwards (the callback does): it clears the
        moments and swaps in the new ``delta`` Parameters created by orientation flips.
        """
        for name, layer in self.layers.items():
            old_delta = layer.delta
            layer.commit()
            cursors = self._cursor[name]
            orient = layer.orient
            cursors[orient] = next_position(layer.pos, layer.r, layer.dim(orient))
            if self.config.mode == "alternate":
                orient = "row" if orient == "column" else "column"
                cursors.setdefault(orient, 0)
            layer.move_to(cursors[orient], orient)
            if layer.delta is not old_delta:
                self._replaced[id(old_delta)] = (old_delta, layer.delta)
        self.num_switches += 1

    @torch.no_grad()
    def slice_state_dict(self) -> dict[str, torch.Tensor]:
        """The compact artifact: the final values of the touched slices, nothing else.

        Source: our choice (compact artifact; not described in the paper).

        Flat ``{key: tensor}`` (safetensors-ready). Per layer, every maximal run of touched rows
        ``[a, b)`` is stored as ``"<layer>.rows.<a>-<b>"`` = W[a:b, :], and every run of touched
        columns ``[c, d)`` as ``"<layer>.cols.<c>-<d>"`` = W[untouched rows, c:d] (the crossing with
        touched rows is already in the row blocks). The payload is therefore exactly the touched
        entries, each once; loading it on top of the untouched base model reproduces the merged
        weights bit-exactly.
        """
        out: dict[str, torch.Tensor] = {}
        for name, layer in self.layers.items():
            w = layer.effective_weight()
            rows = sorted(layer.touched_rows)
            for a, b in _runs(rows):
                out[f"{name}.rows.{a}-{b}"] = w[a:b, :].contiguous()
            keep = _untouched(rows, w.shape[0])
            if keep.numel():
                for c, d in _runs(sorted(layer.touched_cols)):
                    out[f"{name}.cols.{c}-{d}"] = w[keep, c:d].contiguous()
        return out

    def save_slices(self, path) -> int:
        """Writes :meth:`slice_state_dict` as a safetensors file; returns its size in bytes.

        Source: our choice (compact artifact; not described in the paper).
        """
        import os

        from safetensors.torch import save_file

        save_file(self.slice_state_dict(), str(path))
        return os.path.getsize(path)

    @torch.no_grad()
    def merge_and_unload(self) -> nn.Module:
        """Folds every slice into its weight and returns the model with its original ``nn.Linear``s.

        Source: engineering (same architecture as the base model, as the paper claims).
        """
        modules = dict(self.model.named_modules())
        for name in self._names:
            layer = modules[name]
            layer.commit()
            parent_name, _, child = name.rpartition(".")
            parent = modules[parent_name] if parent_name else self.model
            setattr(parent, child, layer.base)
        self._names = []
        return self.model


def _runs(sorted_idx: list[int]) -> list[tuple[int, int]]:
    """Maximal runs ``[a, b)`` of consecutive integers in a sorted list."""
    runs: list[tuple[int, int]] = []
    for i in sorted_idx:
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def _untouched(sorted_rows: list[int], n: int) -> torch.Tensor:
    keep = torch.ones(n, dtype=torch.bool)
    if sorted_rows:
        keep[torch.tensor(sorted_rows, dtype=torch.long)] = False
    return keep.nonzero().squeeze(1)


def _parse_key(key: str) -> tuple[str, str, int, int]:
    try:
        name, kind, span = key.rsplit(".", 2)
        a, b = (int(v) for v in span.split("-"))
    except ValueError:
        raise ValueError(
            f"artifact key {key!r} is not '<layer>.rows.<a>-<b>' or '<layer>.cols.<c>-<d>'"
        ) from None
    if kind not in ("rows", "cols") or not 0 <= a < b:
        raise ValueError(f"artifact key {key!r}: kind must be rows|cols and 0 <= a < b")
    return name, kind, a, b


@torch.no_grad()
def load_slice_state_dict(model: nn.Module, artifact) -> nn.Module:
    """Writes a ``slice_state_dict`` (dict or safetensors path) into a base model's ``nn.Linear``s.

    Source: our choice (compact artifact; not described in the paper).

    Raises:
        ValueError: on a missing module, a malformed key, or a block whose shape does not fit
            the model's weight.
    """
    if not isinstance(artifact, dict):
        from safetensors.torch import load_file

        artifact = load_file(str(artifact))
    modules = dict(model.named_modules())
    per_layer: dict[str, dict[str, list]] = {}
    for key, value in artifact.items():
        name, kind, a, b = _parse_key(key)
        if name not in modules or not isinstance(modules[name], nn.Linear):
            raise ValueError(f"artifact layer {name!r} is not an nn.Linear of this model")
        per_layer.setdefault(name, {"rows": [], "cols": []})[kind].append((a, b, value))
    for name, blocks in per_layer.items():
        w = modules[name].weight
        d_out, d_in = w.shape
        rows = sorted(i for a, b, _ in blocks["rows"] for i in range(a, b))
        keep = _untouched(rows, d_out) if _rows_fit(rows, d_out) else None
        checks = [(b <= d_out and tuple(v.shape) == (b - a, d_in)) for a, b, v in blocks["rows"]]
        checks += [
            (keep is not None and b <= d_in and tuple(v.shape) == (keep.numel(), b - a))
            for a, b, v in blocks["cols"]
        ]
        if not all(checks):
            raise ValueError(
                f"artifact layer {name!r}: a block's shape does not fit the model's weight "
                f"{tuple(w.shape)} (rows blocks [b-a, d_in], cols blocks [untouched rows, d-c])"
            )
        for a, b, v in blocks["rows"]:
            w[a:b, :] = v.to(w)
        for a, b, v in blocks["cols"]:
            w[keep, a:b] = v.to(w)
    return model


def _rows_fit(rows: list[int], n: int) -> bool:
    return not rows or rows[-1] < n


def apply_slicefine(
    model: nn.Module,
    target_modules: str | Iterable[str] = ("q_proj", "k_proj", "v_proj", "o_proj"),
    r: int = 4,
    mode: Mode = "row",
    switch_every: int | None = 100,
    seed: int = 0,
    init_position: Literal["random", "zero"] = "random",
    train_bias: bool = False,
    modules_to_save: Iterable[str] = (),
) -> SliceFineModel:
    """Wraps ``model`` for SliceFine training (Fig. 1; which layers is our
    inference).

    Args:
        model: any ``nn.Module`` (modified in place).
        target_modules: module-name suffixes (``["query", "value"]``) or a full-match regex.
        r: slice width.
        mode: ``"row"``, ``"column"`` or ``"alternate"`` (alternate starts with a column block).
        switch_every: steps between moves (used by the callback / loop); None for a static slice.
        seed: seeds the random initial positions.
        init_position: ``"random"`` (seeded, per layer) or ``"zero"``.
        train_bias: keep the target layers' biases trainable.
        modules_to_save: name suffixes of modules kept fully trainable (e.g. a classifier head).

    Raises:
        ValueError: no module matches, a weight is tied to another module, or a module is already
            wrapped; r out of range (from the layer).
        TypeError: a target is not an ``nn.Linear``.
    """
    config = SliceFineConfig(
        r=r,
        mode=mode,
        switch_every=switch_every,
        target_modules=tuple(
            [target_modules] if isinstance(target_modules, str) else target_modules
        ),
        init_position=init_position,
        train_bias=train_bias,
        seed=seed,
    )
    if any(isinstance(m, SliceFineLinear) for m in model.modules()):
        raise ValueError("model already has SliceFine layers; apply_slicefine once per model")
    names = [n for n, _ in model.named_modules() if n and _matches(n, target_modules)]
    if not names:
        raise ValueError(f"no module matches target_modules={target_modules!r}")
    shared = _shared_weights(model)
    for p in model.parameters():
        p.requires_grad_(False)
    rng = random.Random(seed)
    modules = dict(model.named_modules())
    layers = {}
    for name in names:
        base = modules[name]
        if not isinstance(base, nn.Linear):
            raise TypeError(
                f"target {name!r} is a {type(base).__name__}, not nn.Linear; convert it first"
            )
        if id(base.weight) in shared:
            raise ValueError(
                f"target {name!r} shares its weight with another module (tied embeddings?); "
                "a commit would silently change both"
            )
        orient = "column" if mode == "alternate" else mode
        dim = base.out_features if orient == "row" else base.in_features
        if not 1 <= r <= dim:
            raise ValueError(f"r must satisfy 1 <= r <= {dim} for {name!r} ({orient}s), got r={r}")
        pos = rng.randint(0, dim - r) if init_position == "random" else 0
        layer = SliceFineLinear(base, r=r, orient=orient, pos=pos)
        if train_bias and base.bias is not None:
            base.bias.requires_grad_(True)
        parent_name, _, child = name.rpartition(".")
        setattr(modules[parent_name] if parent_name else model, child, layer)
        layers[name] = layer
    for n, m in model.named_modules():
        if any(n == s or n.endswith("." + s) for s in modules_to_save):
            for p in m.parameters():
                p.requires_grad_(True)
    return SliceFineModel(model, layers, config)


def reset_slice_optimizer_state(optimizer: torch.optim.Optimizer, model: SliceFineModel) -> int:
    """Empties the optimiser state of every ``delta`` (a new slice is a new set of weights;
    our inference).

    Also swaps the new ``delta`` Parameters of orientation flips (alternate mode) into the
    optimiser's parameter groups, so the optimiser keeps training the active slices.

    Returns:
        The number of parameters whose state was reset.
    """
    if model._replaced:
        for group in optimizer.param_groups:
            group["params"] = [
                model._replaced[id(p)][1] if id(p) in model._replaced else p
                for p in group["params"]
            ]
        for old, _ in model._replaced.values():
            optimizer.state.pop(old, None)
        model._replaced.clear()
    n = 0
    held = {id(p) for g in optimizer.param_groups for p in g["params"]}
    for p in model.delta_parameters():
        if id(p) in held:
            optimizer.state[p] = {}
            n += 1
    return n


def check_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Raises if the optimiser holds frozen parameters (it was built before ``apply_slicefine``).

    Source: engineering, not in the paper.
    """
    frozen = sum(1 for g in optimizer.param_groups for p in g["params"] if not p.requires_grad)
    if frozen:
        raise ValueError(
            f"optimizer holds {frozen} frozen parameters: build it after apply_slicefine, from "
            "[p for p in model.parameters() if p.requires_grad]"
        )
