"""``icml26 check`` / ``icml26 fetch`` against a fake hub cache in tmp_path (issue 42, no network).

The fake cache has the real layout (``models--org--name/refs/main`` holding a commit hash,
``snapshots/<hash>/`` the files); ``HF_HUB_CACHE`` and ``HF_DATASETS_CACHE`` point into tmp_path and
``snapshot_download`` is replaced by a recorder that writes such a snapshot.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common import artifact_needs as an
from common import artifacts as af
from common import artifacts_cli as cli
from common.artifact_needs import STAGE_NEEDS, get
from common.config import method_schemas
from common.registry import CONFIG_DIR, REPO_ROOT, compose

PAPER_PRESETS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*_paper*.yaml"))
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def put_repo(cache: Path, repo_id: str, files: dict[str, str], repo_type: str = "model") -> Path:
    """Writes ``files`` as the main-branch snapshot of ``repo_id`` in the hub-cache layout."""
    folder = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(COMMIT)
    snap = folder / "snapshots" / COMMIT
    for name, text in files.items():
        (snap / name).parent.mkdir(parents=True, exist_ok=True)
        (snap / name).write_text(text)
    return snap


MODEL_FILES = {"config.json": "{}", "model.safetensors": "w", "tokenizer.json": "{}"}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """An empty fake hub cache (and datasets cache), no token, online mode."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # relative data/... paths resolve here
    return cache


def _state(rows, name):
    hits = [st for st in rows if st.artifact.name == name]
    assert hits, f"{name} not listed: {[st.artifact.name for st in rows]}"
    return hits[0]


def test_model_present_missing_and_incomplete(hub):
    art = af.Artifact("model", "Qwen/Qwen3-4B", "model.name")
    assert af.status(art).state == "missing"
    snap = put_repo(hub, "Qwen/Qwen3-4B", {"config.json": "{}"})
    assert af.status(art).state == "missing"  # config without weights: unfinished download
    assert "no weight file" in af.status(art).detail
    index = {
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        }
    }
    (snap / "model.safetensors.index.json").write_text(json.dumps(index))
    (snap / "model-00001-of-00002.safetensors").write_text("w")
    st = af.status(art)
    assert st.state == "missing" and "1 of 2 weight shards" in st.detail
    (snap / "model-00002-of-00002.safetensors").write_text("w")
    st = af.status(art)
    assert st.state == "present" and str(snap) in st.detail


def test_revision_is_looked_up_through_its_ref(hub):
    put_repo(hub, "EleutherAI/pythia-160m", MODEL_FILES)
    main = af.Artifact("model", "EleutherAI/pythia-160m", "model.name")
    step = af.Artifact("model", "EleutherAI/pythia-160m", "model.name", revision="step1000")
    assert af.status(main).ok and not af.status(step).ok


def test_gated_needs_token_then_reads_missing(hub, monkeypatch):
    art = af.Artifact("model", "meta-llama/Llama-3.1-8B", "model.name")
    st = af.status(art)
    assert (
        st.state == "gated" and "HF_TOKEN" in st.detail and "huggingface.co/meta-llama" in st.detail
    )
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    st = af.status(art)
    assert st.state == "missing" and "gated" in st.detail
    put_repo(hub, "meta-llama/Llama-3.1-8B", MODEL_FILES)
    assert af.status(art).state == "present"  # cached: the gate no longer matters
    xs = af.Artifact("dataset", "walledai/XSTest", "benchmark.sets.xstest.hub_id")
    monkeypatch.delenv("HF_TOKEN")
    assert af.status(xs).state == "gated"


def test_dataset_script_based_from_table_and_from_cache(hub, monkeypatch):
    docci = af.Artifact("dataset", "google/docci", "method.train_data.hub_id", split="train")
    st = af.status(docci)
    assert st.state == "script" and "method.train_data.path" in st.detail
    put_repo(hub, "org/scripted", {"scripted.py": "import datasets", "README.md": "x"}, "dataset")
    assert af.status(af.Artifact("dataset", "org/scripted", "k")).state == "script"


def test_dataset_hub_files_prepared_and_offline(hub, tmp_path, monkeypatch):
    art = af.Artifact("dataset", "math-ai/amc23", "benchmark.sets.amc23.hub_id", split="test")
    assert af.status(art).state == "missing"
    put_repo(hub, "math-ai/amc23", {"test-00000.parquet": "p", "README.md": "x"}, "dataset")
    assert af.status(art).state == "present"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # datasets needs its prepared copy offline
    st = af.status(art)
    assert st.state == "missing" and "not prepared" in st.detail
    ready = tmp_path / "datasets" / "math-ai___amc23" / "default" / "0.0.0" / "abc"
    ready.mkdir(parents=True)
    (ready / "dataset_info.json").write_text("{}")
    assert af.status(art).state == "missing"  # no arrow file of split=test yet
    (ready / "amc23-test.arrow").write_text("a")
    assert af.status(art).state == "present"


def test_local_paths_env_and_made_by(hub, tmp_path):
    f = af.Artifact("file", "data/x.json", "method.data_path", True, env=("X_DATA",))
    st = af.status(f)
    assert st.state == "missing" and "X_DATA" in st.detail
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.json").write_text("[]")
    assert af.status(f).state == "present"
    out = af.Artifact("file", "out/sub.json", "method.output_path", True, made_by="select")
    assert af.status(out).state == "missing" and "method.stage=select" in af.status(out).detail
    assert af.status(out, produced=("select",)).state == "later"
    alt = af.Artifact(
        "dataset",
        "data/nq.jsonl",
        "benchmark.sets.nq.path",
        True,
        hub_alt="RUC-NLPIR/FlashRAG_datasets",
    )
    assert "benchmark.sets.nq.path=null" in af.status(alt).detail


def test_endpoint_key_and_local_server(hub, monkeypatch):
    api = af.Artifact("endpoint", "gpt-4o", "method.llm_model", env=("OPENAI_API_KEY",))
    st = af.status(api)
    assert st.state == "missing" and "export OPENAI_API_KEY" in st.detail
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert af.status(api).state == "present" and "sk-test" not in af.status(api).detail
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    served = af.Artifact("endpoint", "m", "model.name", url=f"http://127.0.0.1:{port}/v1")
    assert af.status(served).state == "present"
    server.close()
    st = af.status(served)
    assert st.state == "missing" and "vllm serve m" in st.detail


def test_listing_follows_the_config_and_its_stages(hub):
    cfg = compose(["experiment=epicache_paper"], full=False)
    assert af.resolve_stages(cfg) == ("profile", "eval")
    arts = {a.key: a for a in af.list_artifacts(cfg)}
    assert arts["model.name"].stages == ("profile", "eval")
    assert arts["method.sensitivity_path"].made_by == "profile"
    rows = af.statuses(cfg)
    assert _state(rows, cfg.method.sensitivity_path).state == "later"
    cfg = compose(
        ["experiment=epicache_paper", "method.stage=eval", "method.judge_model=null"], full=False
    )
    arts = af.list_artifacts(cfg)
    assert not any(a.kind == "endpoint" for a in arts)  # no judge: no endpoint needed
    assert _state(af.statuses(cfg), cfg.method.sensitivity_path).state == "missing"


def test_check_exit_codes_and_output(hub, tmp_path):
    out = io.StringIO()
    overrides = ["experiment=maxrl_paper_smollm", "method.stage=eval"]
    assert cli.check(overrides, out) == 1
    text = out.getvalue()
    assert "HuggingFaceTB/SmolLM2-360M-Instruct" in text and "madrylab/gsm8k-platinum" in text
    put_repo(hub, "HuggingFaceTB/SmolLM2-360M-Instruct", MODEL_FILES)
    put_repo(hub, "madrylab/gsm8k-platinum", {"main/test-00000.parquet": "p"}, "dataset")
    out = io.StringIO()
    assert cli.check(overrides, out) == 0, out.getvalue()
    assert "2 artifacts: 2 present" in out.getvalue()
    assert cli.check(["experiment=maxrl_paper_smollm", "method.bogus=1"], io.StringIO()) == 2
    assert cli.check(["experiment=maxrl_toy"], io.StringIO()) == 0  # toys fetch nothing


def test_fetch_downloads_missing_skips_present_refuses_gated_and_scripts(hub, monkeypatch):
    calls = []

    def fake_snapshot_download(
        repo_id, repo_type=None, revision=None, cache_dir=None, token=None, allow_patterns=None
    ):
        calls.append((repo_id, repo_type, tuple(allow_patterns or ()), token))
        files = MODEL_FILES if repo_type == "model" else {"main/train-0.parquet": "p"}
        return str(put_repo(Path(cache_dir), repo_id, files, repo_type))

    monkeypatch.setattr("huggingface_hub.snapshot_download", fake_snapshot_download)
    prepared = []
    monkeypatch.setattr(cli, "prepare_dataset", prepared.append)
    put_repo(hub, "HuggingFaceTB/SmolLM2-360M-Instruct", MODEL_FILES)
    out = io.StringIO()
    assert cli.fetch(["experiment=maxrl_paper_smollm", "method.stage=train"], out) == 0, (
        out.getvalue()
    )
    assert [c[0] for c in calls] == ["openai/gsm8k"]  # the present model is skipped
    assert calls[0][1] == "dataset" and "main/*" in calls[0][2]
    assert [a.name for a in prepared] == ["openai/gsm8k"]
    calls.clear()
    out = io.StringIO()
    assert cli.fetch(["experiment=georl_paper", "model=llama3_1_8b"], out) == 1
    assert [c[0] for c in calls] == ["openai/clip-vit-large-patch14"]  # not llama, not docci
    text = out.getvalue()
    assert "refused  meta-llama/Llama-3.1-8B" in text and "HF_TOKEN" in text
    assert "refused  google/docci" in text and "loading script" in text
    monkeypatch.setenv("HF_TOKEN", "hf_x")
    calls.clear()
    assert cli.fetch(["experiment=georl_paper", "model=llama3_1_8b"], io.StringIO()) == 1  # docci
    assert calls[0][:2] == ("meta-llama/Llama-3.1-8B", "model") and calls[0][3] == "hf_x"


@pytest.mark.slow  # composes every paper stage (about 7 s): make test-all
def test_the_table_covers_every_paper_stage_and_names_real_keys():
    for slug, schema in method_schemas().items():
        assert set(schema.PAPER_STAGES) <= set(STAGE_NEEDS.get(slug, {})), slug
        assert set(STAGE_NEEDS.get(slug, {})) <= set(schema.STAGES), slug
    for preset in PAPER_PRESETS:
        cfg = compose([f"experiment={preset}"], full=False)
        for stage in af.resolve_stages(cfg):
            for need in STAGE_NEEDS[cfg.method.name][stage]:
                for attr in ("key", "name", "path", "model", "url", "key_env"):
                    key = getattr(need, attr, None)
                    if key and key.startswith("method.") and not key.endswith(".*"):
                        parent = key.rpartition(".")[0]  # the leaf may be null; its node exists
                        assert get(cfg, parent) is not None, (preset, key)


# Three presets in the quick tier (one multi-stage, one with endpoints, one with gated models); the
# rest in make test-all.
_QUICK_PRESETS = {"maxrl_paper", "sacopt_paper", "salo_paper"}


@pytest.mark.parametrize(
    "preset",
    [p if p in _QUICK_PRESETS else pytest.param(p, marks=pytest.mark.slow) for p in PAPER_PRESETS],
)
def test_check_lists_every_paper_preset_fast(hub, preset):
    cfg = compose([f"experiment={preset}"], full=False)
    t0 = time.perf_counter()
    rows = af.statuses(cfg)
    assert time.perf_counter() - t0 < 2.0
    kinds = {st.artifact.kind for st in rows}
    if cfg.get("model") is not None and cfg.method.name != "sacopt":
        assert "model" in kinds or "endpoint" in kinds, preset
    data_needs = (an.BenchNeed, an.DataNeed, an.LmEvalNeed)
    needs = [n for s in af.resolve_stages(cfg) for n in STAGE_NEEDS[cfg.method.name][s]]
    if any(isinstance(n, data_needs) and an.applies(n, cfg) for n in needs):
        assert "dataset" in kinds, preset
    assert all(st.detail for st in rows if not st.ok)  # every problem says what to do


def test_check_imports_nothing_heavy_and_runs_in_seconds(hub):
    probe = (
        "import sys, time; t = time.perf_counter()\n"
        "from common.artifacts_cli import check\n"
        "rc = check(['experiment=webworld_paper'])\n"
        "heavy = [m for m in ('torch', 'transformers', 'datasets', 'trl', 'accelerate', 'peft',"
        " 'sklearn', 'sentence_transformers', 'openai') if m in sys.modules]\n"
        "print('RESULT', rc, round(time.perf_counter() - t, 2), heavy)\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=env,
        timeout=120,
    )
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")]
    assert line, out.stderr[-2000:]
    _, rc, seconds, heavy = line[0].split(" ", 3)
    assert rc == "1" and heavy == "[]", line[0]
    assert float(seconds) < 10.0, line[0]


@pytest.mark.slow  # composes every paper preset (about 7 s): make test-all
def test_reproduce_readme_lists_the_current_artifacts():
    text = cli.README.read_text()
    assert cli.BEGIN in text, "run: python -m common.artifacts_cli"
    current = text.split(cli.BEGIN, 1)[1].split(cli.END, 1)[0]
    fresh = cli.readme_section().split(cli.BEGIN, 1)[1].split(cli.END, 1)[0]
    assert current == fresh, (
        "scripts/reproduce/README.md is stale: run python -m common.artifacts_cli"
    )
    for preset in PAPER_PRESETS:
        assert f"icml26 fetch experiment={preset}`" in current
    assert "gated: the Llama community licence" in current and "script-based" in current
