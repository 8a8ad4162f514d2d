"""The one place where third-party warnings that the project cannot avoid are filtered, each with why.

Warnings raised by this project's own calls are fixed at the call, not filtered: a test
(``tests/common/test_warnings.py``) turns every ``DeprecationWarning``/``FutureWarning`` attributed
to ``common``, ``methods`` or ``scripts`` into an error for the calls the toys make. What is left here
comes from inside a dependency and does not go away by calling it differently.

:func:`install` is called when ``common`` is imported; ``tests/conftest.py`` gives pytest the same
filters through :func:`pytest_filters`, so ``make test`` and ``make demo`` filter alike.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

__all__ = ["THIRD_PARTY_FILTERS", "WarningFilter", "install", "pytest_filters"]


@dataclass(frozen=True)
class WarningFilter:
    """One filter: ignore ``category`` whose message matches ``message`` when raised in ``module``."""

    message: str  # regex matched at the start of the warning's text
    category: type[Warning]
    module: str  # regex matched against the module the warning is attributed to
    reason: str


THIRD_PARTY_FILTERS: tuple[WarningFilter, ...] = (
    WarningFilter(
        message=r"`(is_)?gradient_checkpointing(_enable|_disable)?` is deprecated",
        category=FutureWarning,
        module=r"transformers\.modeling_utils",
        reason=(
            "transformers 5 renamed gradient_* to activation_* checkpointing; peft's get_peft_model "
            "and transformers'/TRL's Trainer still call the old model methods internally. The project "
            "itself calls neither name on a model."
        ),
    ),
    WarningFilter(
        message=r"You are using 'rollout_func', which is an experimental feature",
        category=UserWarning,
        module="",  # attributed to whichever module builds the trainer
        reason=(
            "TRL's rollout_func is the one hook for a custom rollout (ThreadWeaver's parallel trie "
            "rollout, paper Sec. 3); TRL marks it experimental on every trainer it builds. The API "
            "is pinned by constraints.txt and its use is tested (tests/common/test_bf16_step.py)."
        ),
    ),
    WarningFilter(
        message=r"`torch\.jit\.script_method` is deprecated",
        category=DeprecationWarning,
        module=r"torch\.jit\._script",
        reason=(
            "torch's own torch/utils/mkldnn.py decorates its 14 Mkldnn* ScriptModule methods with the "
            "deprecated script_method when imported, and torch._inductor imports it (compile_fx -> "
            "fx_passes.pre_grad -> torch.fx.experimental.optimization) whenever flex attention is "
            "compiled (ThreadWeaver's trie mask). The project never calls script_method."
        ),
    ),
)


def install() -> None:
    """Add :data:`THIRD_PARTY_FILTERS` to the process's warning filters (idempotent)."""
    for f in THIRD_PARTY_FILTERS:
        warnings.filterwarnings("ignore", message=f.message, category=f.category, module=f.module)


def pytest_filters() -> list[str]:
    """The same filters as pytest ``filterwarnings`` lines (``action:message:category:module``)."""
    return [f"ignore:{f.message}:{f.category.__name__}:{f.module}" for f in THIRD_PARTY_FILTERS]
