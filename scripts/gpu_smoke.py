"""One prepared GPU check: every paper stage for one or two steps, in bfloat16, on tiny models.

    bash scripts/gpu_smoke.sh                 # on a machine with one CUDA GPU and icml26[dev] installed
    python -m scripts.gpu_smoke --only maxrl  # some methods
    python -m scripts.gpu_smoke --device cpu  # the same wiring on a CPU (float32, no vLLM)

The cases are the paper-preset smoke tables of the test suite (``PAPER_SMOKE`` in
``tests/methods/test_<slug>.py``): the shipped ``<slug>_paper`` presets shrunk to seconds, on tiny
local models and fixture files, so nothing needs the network. On CUDA the smoke's CPU switches are
turned back: ``bf16=true``, ``model.dtype=bfloat16``, and vLLM on where ``vllm`` imports (skipped
with the reason printed where it does not). One line per method: ``ok`` or ``failed`` with the
first line of the error; the table also goes to ``--out`` (Markdown) for ``docs/index.md``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys
import tempfile
import time
import traceback
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("ICML26_PROGRESS", "0")

_CPU_SWITCHES = {  # the smoke's CPU choices and what a GPU run turns them into
    "bf16=false": "bf16=true",
    "model.dtype=float32": "model.dtype=bfloat16",
}
_VLLM_SWITCHES = {"use_vllm=false": "use_vllm=true", "engine=hf": "engine=vllm"}


def gpu_overrides(overrides: list[str], vllm: bool) -> list[str]:
    """The CPU smoke overrides, with precision (and engines, when ``vllm``) set for a GPU."""
    out = []
    for o in overrides:
        for table in (_CPU_SWITCHES, _VLLM_SWITCHES if vllm else {}):
            for cpu, gpu in table.items():
                if o.endswith(cpu):
                    o = o[: -len(cpu)] + gpu
        out.append(o)
    return out


class _Timeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Timeout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="method slugs (default: all)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--case-timeout", type=int, default=120, help="seconds per stage")
    parser.add_argument("--out", default="outputs/gpu_smoke.md", help="Markdown table written here")
    args = parser.parse_args(argv)

    import torch

    from common.registry import REPO_ROOT, compose, run_method
    from scripts.paper_smoke import cases as smoke_cases
    from scripts.paper_smoke import format_override, smoke_module, tiny_model_dirs

    sys.path.insert(0, str(REPO_ROOT))
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: run with --device cpu for the CPU wiring")
        return 2
    vllm = args.device == "cuda" and importlib.util.find_spec("vllm") is not None
    print(f"device: {torch.cuda.get_device_name(0) if args.device == 'cuda' else 'cpu'}; "
          f"vLLM engine paths: {'on' if vllm else 'skipped (vllm is not importable here)'}")  # fmt: skip
    cases = [c for c in smoke_cases() if args.only is None or c[0] in args.only]
    status: dict[str, list[str]] = defaultdict(list)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="icml26_gpu_smoke_") as tmp:
        tiny = tiny_model_dirs(Path(tmp) / "models")
        for i, (slug, preset, stage) in enumerate(cases):
            case_dir = Path(tmp) / f"case{i}"
            case_dir.mkdir()
            module = smoke_module(slug)
            key = stage if preset == f"{slug}_paper" else f"{preset}/{stage}"
            values = {"tmp": str(case_dir), "repo": str(REPO_ROOT), **tiny}
            t0 = time.monotonic()
            signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(args.case_timeout)
            try:
                setup = getattr(module, "paper_smoke_setup", None)
                if setup is not None:
                    values.update(setup(case_dir))
                overrides = [format_override(o, values) for o in module.PAPER_SMOKE[key]]
                if args.device == "cuda":
                    overrides = gpu_overrides(overrides, vllm)
                cfg = compose(
                    [f"experiment={preset}", f"method.stage={stage}", *overrides],
                    run_dir=case_dir / "run",
                )
                run_method(cfg)
                line = f"ok ({time.monotonic() - t0:.0f} s)"
            except _Timeout:
                line = f"failed: over {args.case_timeout} s"
            except Exception as err:  # noqa: BLE001 - one line per case, the run goes on
                first = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
                line = f"failed: {type(err).__name__}: {first}"
                traceback.print_exc(limit=3)
            finally:
                signal.alarm(0)
                if args.device == "cuda":
                    torch.cuda.empty_cache()
            status[slug].append(f"{key}: {line}")
            print(f"  {slug:<22} {key:<36} {line}", flush=True)
    rows = ["| method | result | stages |", "|---|---|---|"]
    for slug, lines in sorted(status.items()):
        ok = all(": ok" in s for s in lines)
        first_fail = next((s for s in lines if ": ok" not in s), "")
        rows.append(f"| {slug} | {'ok' if ok else 'failed'} | {first_fail or '; '.join(lines)} |")
    table = "\n".join(rows)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d", time.gmtime())
    Path(args.out).write_text(f"GPU smoke, {stamp}, {args.device}, vLLM {'on' if vllm else 'off'}, "
                              f"{time.monotonic() - start:.0f} s\n\n{table}\n")  # fmt: skip
    print("\n" + table)
    print(f"\n{sum(all(': ok' in s for s in v) for v in status.values())}/{len(status)} methods ok "
          f"in {time.monotonic() - start:.0f} s; table in {args.out}")  # fmt: skip
    return 0 if all(all(": ok" in s for s in v) for v in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
