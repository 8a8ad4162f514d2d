"""Which config keys each paper stage reads: the table behind :func:`common.artifacts.list_artifacts`.

A stage's needs are a tuple of small specs, each naming the config keys (dotted paths into the
composed config) that hold one artifact: the ``model`` group (:class:`ModelNeed`), every set of the
``benchmark`` group (:class:`BenchNeed`), a :class:`~common.config.DatasetSpec` node
(:class:`DataNeed`), a local file or folder (:class:`FileNeed`), an OpenAI-compatible endpoint
(:class:`ApiNeed`), or the hub sets of lm-evaluation-harness tasks (:class:`LmEvalNeed`). ``when``
restricts a need to configs where it applies (e.g. the EMBED encoder only when ``embed`` is one of the
representations); ``made_by`` names the earlier stage that writes a file. The table is read from
each method's ``methods/<slug>/run.py`` stage functions; ``tests/test_artifacts_check.py`` checks that
every paper stage of every method has an entry and that every key exists in its paper presets.
Beside it, what the hub says about some ids: :data:`GATED`, :data:`SCRIPT_BASED`, :data:`SIZE_GB`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

When = Callable[[DictConfig], bool] | None


def get(cfg: DictConfig, key: str) -> Any:
    """The value at a dotted ``key`` of ``cfg`` (None when absent)."""
    return OmegaConf.select(cfg, key, default=None)


@dataclass(frozen=True)
class ModelNeed:
    """A checkpoint named by ``name`` (hub id), with an optional local ``path`` key that wins."""

    name: str = "model.name"
    path: str | None = "model.path"
    revision: str | None = "model.revision"
    when: When = None


@dataclass(frozen=True)
class BenchNeed:
    """Every set of the ``benchmark`` group (or those listed at ``only``, when that key is set)."""

    only: str | None = None
    when: When = None


@dataclass(frozen=True)
class DataNeed:
    """A ``DatasetSpec`` node at ``key`` (its ``path`` wins over its ``hub_id``)."""

    key: str
    made_by: str | None = None
    when: When = None


@dataclass(frozen=True)
class FileNeed:
    """A local file or folder at ``key`` (a string, or a list of strings); ``default`` is used when
    the key is empty, ``optional`` skips it then."""

    key: str
    made_by: str | None = None
    optional: bool = False
    default: str | None = None
    when: When = None


@dataclass(frozen=True)
class ApiNeed:
    """An OpenAI-compatible chat endpoint: the served ``model``, its ``url`` key (None in the
    config: api.openai.com or ``OPENAI_BASE_URL``) and the key naming the API-key variable."""

    model: str
    url: str | None = None
    key_env: str | None = None
    when: When = None


@dataclass(frozen=True)
class LmEvalNeed:
    """The hub sets that lm-evaluation-harness loads for the task names at ``key``."""

    key: str
    when: When = None


# lm-evaluation-harness task -> (hub id, config) of its ``dataset_path`` / ``dataset_name``
# (lm_eval/tasks/gsm8k/gsm8k.yaml, minerva_math/minerva_math_*.yaml, humaneval/humaneval.yaml,
# mbpp/mbpp.yaml of EleutherAI/lm-evaluation-harness).
LM_EVAL_TASK_DATA: dict[str, tuple[str, str | None]] = {
    "gsm8k": ("openai/gsm8k", "main"),
    "minerva_math": ("EleutherAI/hendrycks_math", None),
    "humaneval": ("openai/openai_humaneval", None),
    "mbpp": ("google-research-datasets/mbpp", "full"),
}

# Hub ids (or "org/*") that need an accepted licence and a token, with what to accept. Sources: the
# model and data set pages (a "You need to agree to share your contact information" / licence form).
GATED: dict[str, str] = {
    "meta-llama/*": "the Llama community licence",
    "mistralai/*": "Mistral AI's access conditions",
    "walledai/XSTest": "the data set's access conditions",
    "walledai/AdvBench": "the data set's access conditions",
}
# Loading-script data sets (``datasets`` >= 4 raises "Dataset scripts are no longer supported"):
# what to do instead. google/docci: docci.py on the hub reads docci_descriptions.jsonlines and the
# images archive from storage.googleapis.com (huggingface.co/datasets/google/docci, docci.py).
SCRIPT_BASED: dict[str, str] = {
    "google/docci": (
        "download the official DOCCI files (docci_descriptions.jsonlines and the images archive), "
        "save them as a `datasets` folder with an `image` column (Dataset.save_to_disk) and set "
        "method.train_data.path=<that folder> (docs/methods/georl.md)"
    ),
    # main branch: winogrande.py (its parquet PRs are unmerged); autoqra's loader then reads the
    # Hub's parquet export (methods/autoqra/paper_data.py::dataset_records).
    "allenai/winogrande": (
        "the loader reads the Hub's parquet export instead; prepare it once on a connected machine: "
        "python -c \"import datasets; datasets.load_dataset('allenai/winogrande', "
        "revision='refs/convert/parquet', data_dir='winogrande_xl', split='validation')\""
    ),
}
# Approximate download size in GB: models = parameters on the model card x bytes per parameter of
# the published weights (bf16/fp16: 2, fp32: 4); data sets = the hub's file listing where noted.
SIZE_GB: dict[str, float] = {
    "Qwen/Qwen2.5-Math-7B": 15.2,
    "Qwen/Qwen2.5-7B-Instruct": 15.2,
    "Qwen/Qwen2.5-VL-7B-Instruct": 16.6,
    "Qwen/Qwen3-4B": 8.0,
    "Qwen/Qwen3-4B-Base": 8.0,
    "Qwen/Qwen3-8B": 16.4,
    "Qwen/Qwen3-8B-Base": 16.4,
    "Qwen/Qwen3-1.7B-Base": 3.4,
    "Qwen/Qwen3-Embedding-0.6B": 1.2,
    "Qwen/WebWorld-8B": 16.4,
    "meta-llama/Llama-2-7b-hf": 13.5,
    "meta-llama/Llama-3.1-8B": 16.1,
    "meta-llama/Llama-3.1-8B-Instruct": 16.1,
    "meta-llama/Llama-3.2-3B": 6.4,
    "meta-llama/Llama-3.2-3B-Instruct": 6.4,
    "mistralai/Mistral-7B-Instruct-v0.3": 14.5,
    "llava-hf/llava-1.5-7b-hf": 14.1,
    "llava-hf/llava-1.5-13b-hf": 26.7,
    "GSAI-ML/LLaDA-8B-Instruct": 16.0,
    "GSAI-ML/LLaDA-1.5": 16.0,
    "Dream-org/Dream-v0-Base-7B": 15.2,
    "HuggingFaceTB/SmolLM2-360M-Instruct": 0.7,
    "FacebookAI/roberta-base": 0.5,
    "roberta-large": 1.4,
    "google/vit-base-patch16-224-in21k": 0.4,
    "gpt2": 0.5,
    "EleutherAI/pythia-160m": 0.3,
    "openai/clip-vit-large-patch14": 1.7,
    "sentence-transformers/gtr-t5-base": 0.4,
    "google/docci": 7.6,  # images.tar.gz 7.59 GB (hub file listing)
    "Qwen/WebWorldData": 52.0,  # issue 42: the ~52 GB training file
}

MODEL = ModelNeed()
BENCH = BenchNeed()


def _eq(key: str, value: Any) -> When:
    return lambda cfg: get(cfg, key) == value


def _ne(key: str, value: Any) -> When:
    return lambda cfg: get(cfg, key) != value


def _has(key: str, item: Any) -> When:
    return lambda cfg: item in (get(cfg, key) or ())


def _set(key: str) -> When:
    return lambda cfg: bool(get(cfg, key))


_EPICACHE_EVAL = (
    MODEL,
    BENCH,
    ModelNeed("method.embedder", "method.embedder_path", None, when=_set("method.embedder")),
    ApiNeed(
        "method.judge_model",
        "method.judge_base_url",
        "method.judge_api_key_env",
        when=_set("method.judge_model"),
    ),
    FileNeed("method.sensitivity_path", made_by="profile", optional=True),
)
_KMKC_PROFILES = FileNeed(
    "method.paper.profiles_path", made_by="profile", default="<run_dir>/paper/profile.jsonl"
)
_SALO_FILES = tuple(
    FileNeed(f"method.paper.{k}", optional=True)
    for k in ("official_gcg_path", "official_autodan_path", "csv", "jbb", "autodan")
)
_WEBWORLD_JUDGE = ApiNeed("method.paper.bench.judge", "method.paper.bench.judge_url")

# slug -> stage -> needs (the paper stages of methods/<slug>/run.py's STAGES)
STAGE_NEEDS: dict[str, dict[str, tuple]] = {
    "agentxray": {
        "paper": (
            BenchNeed(only="method.sets"),
            ApiNeed("method.llm_model", "method.base_url", "method.llm_api_key_env"),
        ),
    },
    "apo": {
        "train": (MODEL, DataNeed("method.train_data")),
        "eval": (MODEL, BENCH),
        "paper": (MODEL, DataNeed("method.train_data"), BENCH),
    },
    "autoqra": {"paper": (MODEL, DataNeed("method.paper.sft_data"), BENCH)},
    "epicache": {
        "profile": (
            MODEL,
            FileNeed("method.profile.text_path", when=_set("method.profile.text_path")),
            DataNeed("method.profile", when=lambda c: not get(c, "method.profile.text_path")),
        ),
        "eval": _EPICACHE_EVAL,
    },
    "georl": {
        "paper": (
            MODEL,
            DataNeed("method.train_data"),
            ModelNeed("method.clip.name", "method.clip.path", None),
        ),
    },
    "instruction_selection": {
        "select": (
            MODEL,
            DataNeed("method.pool"),
            DataNeed("method.queries"),
            DataNeed("method.warmup_data", when=_has("method.representations", "less")),
            ModelNeed(
                "method.embed_model",
                "method.embed_path",
                None,
                when=_has("method.representations", "embed"),
            ),
        ),
        "finetune": (
            MODEL,
            FileNeed("method.subset_file", made_by="select"),
            DataNeed("method.pool"),
            DataNeed("method.queries"),
        ),
    },
    "kmkc": {
        "profile": (MODEL, DataNeed("method.train_sets.*")),
        "sft": (MODEL, _KMKC_PROFILES),
        "cdkc": (MODEL, _KMKC_PROFILES),
        "eval": (MODEL, BENCH),
        "paper": (MODEL, DataNeed("method.train_sets.*"), BENCH),
    },
    "kore": {
        "paper": (
            MODEL,
            FileNeed("method.paper.data_path"),
            FileNeed("method.paper.image_root"),
            FileNeed("method.paper.calib_path"),
        ),
        "evoke": (
            MODEL,
            BENCH,
            FileNeed("method.evoke.adapter_dir", made_by="paper", optional=True),
            FileNeed("method.evoke.gold_file", optional=True),
            FileNeed("method.evoke.image_root", optional=True),
            FileNeed("method.evoke.answers_file", optional=True),
        ),
    },
    "llminertia": {
        "paper": (
            BENCH,
            ModelNeed(when=_ne("method.engine", "openai")),
            ApiNeed("model.name", "method.base_url", when=_eq("method.engine", "openai")),
            ModelNeed("method.pre_model", None, None, when=_set("method.pre_model")),
        ),
        "induce": (MODEL, FileNeed("method.corpus_path")),
    },
    "maxrl": {
        "train": (MODEL, DataNeed("method.train_data")),
        "eval": (MODEL, BENCH),
        "compare": (FileNeed("method.compare_files", made_by="eval"),),
    },
    "mcce": {
        "paper": (
            MODEL,
            ApiNeed("method.api_model", "method.api_base_url", "method.api_key_env"),
            FileNeed("method.init_file"),
            FileNeed("method.oracle_dir"),
        ),
    },
    "sacopt": {
        "paper": (
            BENCH,
            ApiNeed("method.llm_model", "method.llm_base_url", "method.llm_api_key_env"),
        ),
    },
    "salo": {"paper": (MODEL, BENCH, *_SALO_FILES)},
    "slicefine": {"glue": (MODEL, BENCH), "vision": (MODEL, BENCH)},
    "sv_features": {"synthetic": (), "ioi": (MODEL,), "checkpoints": (MODEL,)},
    "swordsman": {
        "paper": (
            MODEL,
            BenchNeed(when=_eq("method.eval.engine", "local")),
            LmEvalNeed("method.eval.tasks", when=_eq("method.eval.engine", "lm_eval")),
        ),
    },
    "threadweaver": {
        "synth": (
            DataNeed("method.synth.source"),
            ApiNeed(
                "method.synth.llm_model",
                "method.synth.llm_base_url",
                "method.synth.llm_api_key_env",
            ),
        ),
        "self_train": (MODEL, DataNeed("method.rl_data")),
        "sft": (MODEL, DataNeed("method.sft_data", made_by="synth")),
        "rl": (MODEL, DataNeed("method.rl_data")),
        "eval": (MODEL, BENCH),
    },
    "weasel": {
        "select": (
            FileNeed("method.data_path"),
            ModelNeed(
                "method.scorer_model",
                "method.scorer_path",
                None,
                when=lambda c: (
                    get(c, "method.scorer") != "jaccard"
                    and bool(get(c, "method.scorer_model") or get(c, "method.scorer_path"))
                ),
            ),
        ),
        "sft": (
            MODEL,
            FileNeed(
                "method.output_path", made_by="select", default="<run_dir>/weasel_selected.json"
            ),
        ),
    },
    "webworld": {
        "stage1": (MODEL, DataNeed("method.paper.data")),
        "stage2": (MODEL, FileNeed("method.paper.stage2_data")),
        "synth": (
            FileNeed("method.paper.synth.seeds"),
            ApiNeed("method.paper.synth.world_model", "method.paper.synth.world_model_url"),
            ApiNeed("method.paper.synth.agent", "method.paper.synth.agent_url"),
            ApiNeed("method.paper.synth.value_model", "method.paper.synth.value_url"),
        ),
        "agent": (MODEL, FileNeed("method.paper.agent_data", made_by="synth")),
        "bench": (
            BENCH,
            ModelNeed(when=lambda c: not get(c, "method.paper.bench.wm_url")),
            ApiNeed(
                "model.name", "method.paper.bench.wm_url", when=_set("method.paper.bench.wm_url")
            ),
            _WEBWORLD_JUDGE,
        ),
    },
}


def stage_needs(slug: str, stage: str) -> tuple | None:
    """The needs of ``slug``'s ``stage``, or None when the table has no entry (toy stages)."""
    return STAGE_NEEDS.get(slug, {}).get(stage)


def applies(need: Any, cfg: DictConfig) -> bool:
    """Whether ``need`` applies to ``cfg`` (its ``when`` holds, or it has none)."""
    return need.when is None or bool(need.when(cfg))


__all__ = [
    "BENCH",
    "GATED",
    "LM_EVAL_TASK_DATA",
    "MODEL",
    "SCRIPT_BASED",
    "SIZE_GB",
    "STAGE_NEEDS",
    "ApiNeed",
    "BenchNeed",
    "DataNeed",
    "FileNeed",
    "LmEvalNeed",
    "ModelNeed",
    "applies",
    "get",
    "stage_needs",
]
