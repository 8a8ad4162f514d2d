"""SALO's run-config schema (``method=salo``): the CPU toy's sizes and the paper stage's settings.

Light on purpose (stdlib and :mod:`common.config` only): the CLI loads it to type-check a composed
config before any heavy import. The LLM comes from the ``model`` group (``configs/model/*.yaml``)
and the training, calibration and AdvBench sets from ``benchmark=salo_safety``; only the per-model
attack files (official CSVs, JailbreakBench artifacts, AutoDAN results) are named here. Defaults are
the official code's (Exbilar/SALO e76e63e: ``configs.py``, ``train_probe.py``, ``process_data.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from common.config import MethodConfig

ATTACK_TYPES = ("direct", "suffix", "prefill")
PLACEMENTS = ("user", "prefill")
# benchmark set names the paper stage reads, by role (configs/benchmark/salo_safety.yaml)
TRAIN_SETS = ("saferlhf", "toxic_chat")
CALIBRATION_SET = "xstest"
ATTACK_SETS = ("advbench",)


@dataclass
class ToyConfig:
    """Sizes of the CPU toy (LM steps kept small to fit 2 loaded cores)."""

    lm_steps: int = 300
    lm_batch_size: int = 48
    lm_lr: float = 3e-3
    hidden_size: int = 64
    num_layers: int = 4
    n_train: int = 1000  # clean prompts per class for the detectors
    n_calib: int = 200
    n_test: int = 300
    haystack_len: int = 60
    n_filters: int = 16
    n_gcg: int = 40  # harmful prompts attacked by a real GCG run on the toy LM (target "COMPLY")
    gcg_steps: int = 30
    gcg_tokens: int = 4
    min_clean_acc: float = 0.95
    min_attack_success: float = 0.90


@dataclass
class GCGGenerate:
    """Regenerate GCG suffixes on the model (``n_prompts`` AdvBench goals; 0 = off; GCG paper sizes)."""

    n_prompts: int = 0
    steps: int = 250
    n_tokens: int = 20
    topk: int = 256
    n_candidates: int = 512


@dataclass
class SaloPaperConfig:
    """The paper stage's data handling and per-model attack files.

    Attributes:
        batch_size: prompts per forward pass while extracting volumes.
        saferlhf_cap: PKU-SafeRLHF prompts kept (official 4000).
        toxic_chat_cap_per_class / toxic_chat_max_chars: toxic-chat caps (official 1500, 400).
        advbench_limit: AdvBench goals kept (None: all 520).
        official_gcg_path: the official per-model GCG CSV (``datasets/<model>-gcg.csv`` of
            Exbilar/SALO; suffix attack, ``prompt + injection``), reported as ``gcg``.
        official_autodan_path: the official per-model AutoDAN CSV (``datasets/<model>-AutoDAN.csv``;
            assistant prefill, as the official ``eval_attacks.py`` places it), reported as ``autodan``.
        csv: further attack CSVs by name: ``{path, attack_type}`` (direct | suffix | prefill).
        jbb: JailbreakBench artifacts by name (path).
        autodan: AutoDAN results JSON by name: ``{path, placement}`` (user | prefill).
        gcg_generate: GCG regenerated on the model itself.
    """

    batch_size: int = 8
    saferlhf_cap: int = 4000
    toxic_chat_cap_per_class: int = 1500
    toxic_chat_max_chars: int = 400
    advbench_limit: int | None = None
    official_gcg_path: str | None = None
    official_autodan_path: str | None = None
    csv: dict[str, dict[str, str]] = field(default_factory=dict)
    jbb: dict[str, str] = field(default_factory=dict)
    autodan: dict[str, dict[str, str]] = field(default_factory=dict)
    gcg_generate: GCGGenerate = field(default_factory=GCGGenerate)

    def __post_init__(self) -> None:
        for group, key, options in (
            ("csv", "attack_type", ATTACK_TYPES),
            ("autodan", "placement", PLACEMENTS),
        ):
            for name, spec in getattr(self, group).items():
                if not spec.get("path"):
                    raise ValueError(f"method.paper.{group}.{name} needs a path")
                value = spec.get(key, "suffix" if group == "csv" else "user")
                if value not in options or set(spec) - {"path", key}:
                    raise ValueError(
                        f"method.paper.{group}.{name}: expected {{path, {key}}} with {key} in "
                        f"{options}, got {dict(spec)}"
                    )


@dataclass
class SaloRunConfig(MethodConfig):
    """``method=salo``: the CPU toy (``stage=toy``) and the paper pipeline (``stage=paper``).

    Attributes:
        window: end-exclusive layer window into ``output_hidden_states`` (official ``configs.py``:
            Qwen/Mistral [10, 20), Llama-3.1 [5, 15)).
        n_filters, layer_kernel, token_kernels, dropout: the SALO operator (official).
        epochs, batch_size, lr, weight_decay, grad_clip: detector training (official CLI).
        target_fpr: operating point on XSTest's safe prompts (official 10%).
        toy_window, sweep_windows: the toy's window and its ROI sweep.
        mlp_dim: mean-pooled MLP baseline width (official).
        toy: the toy's sizes. paper: the paper stage's data handling and attack files.
    """

    STAGES: ClassVar[dict[str, str]] = {
        "toy": "CPU toy: tiny refusal LM, suffix/prefill/GCG attacks, SALO vs static baselines",
        "paper": "paper: train on clean prompts of `benchmark`, calibrate on XSTest, detect attacks",
    }
    PAPER_STAGES: ClassVar[tuple[str, ...]] = ("paper",)
    MODEL_KINDS: ClassVar[tuple[str, ...]] = ("causal_lm",)
    BENCHMARK_FORMATS: ClassVar[tuple[str, ...]] = ("salo_safety",)

    name: str = "salo"
    stage: str = "toy"
    window: list[int] = field(default_factory=lambda: [10, 20])  # Qwen2.5-7B (official configs.py)
    n_filters: int = 64
    layer_kernel: int = 3
    token_kernels: list[int] = field(default_factory=lambda: [2, 3, 5])
    dropout: float = 0.5
    epochs: int = 5
    batch_size: int = 16
    lr: float = 1e-3
    weight_decay: float = 1e-2
    grad_clip: float = 1.0
    target_fpr: float = 0.10
    toy_window: list[int] = field(default_factory=lambda: [1, 4])
    # ROI sensitivity (paper abstract): SALO-max retrained on each extra toy window
    sweep_windows: list[list[int]] = field(default_factory=lambda: [[0, 3], [0, 4]])
    mlp_dim: int = 512
    toy: ToyConfig = field(default_factory=ToyConfig)
    paper: SaloPaperConfig = field(default_factory=SaloPaperConfig)

    def __post_init__(self) -> None:
        if not 0.0 < self.target_fpr < 1.0:
            raise ValueError(f"method.target_fpr must lie in (0, 1), got {self.target_fpr}")
        if len(self.window) != 2 or self.window[1] <= self.window[0]:
            raise ValueError(
                f"method.window must be [start, end) with end > start, got {self.window}"
            )
        # the operator's 'same' conv needs at least layer_kernel layers (SALO._check raises later)
        windows = {"window": self.window, "toy_window": self.toy_window}
        windows.update({f"sweep_windows[{i}]": w for i, w in enumerate(self.sweep_windows)})
        for key, w in windows.items():
            if len(w) != 2 or w[1] - w[0] < self.layer_kernel:
                raise ValueError(
                    f"method.{key} must be [start, end) spanning at least method.layer_kernel="
                    f"{self.layer_kernel} layers, got {list(w)}"
                )
