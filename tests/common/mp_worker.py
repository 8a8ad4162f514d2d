"""Worker of the multi-process test: two training steps of one trainer, parameters saved.

Run directly (one process) or under ``accelerate launch --config_file
configs/accelerate/multi_cpu.yaml`` (two processes, gloo). Completions are deterministic functions of
the prompt and of the completion's position in the global batch, so one process and two processes
with the same global batch see the same rollouts and must end with the same parameters.

    python tests/common/mp_worker.py --trainer maxrl --per-device 4 --out DIR
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import signal
import weakref
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("ICML26_PROGRESS", "0")

import torch  # noqa: E402

N = 4  # completions per prompt
PROMPTS = ["2 + 3 =", "7 - 4 =", "1 + 1 =", "9 - 2 ="]


def _length_reward(completions, completion_ids, **_):
    """A binary reward that varies inside a group: 1 for completions of 3+ tokens."""
    return [float(len(ids) >= 3) for ids in completion_ids]


class HashEmbedder:
    """A deterministic bag-of-words embedder for Geo-RL (float32, never zero)."""

    def encode(self, texts):
        out = torch.zeros(len(texts), 8)
        for i, t in enumerate(texts):
            for w in t.split():
                out[i, sum(map(ord, w)) % 7] += 1.0
            out[i, -1] += 0.1
        return out


def _quality(prompts, completions, completion_ids, **_):
    """A Geo-RL grounding quality in (0, 1] that varies inside a group."""
    return [0.3 + 0.3 * (len(ids) % 3) for ids in completion_ids]


def _deterministic(base):
    """A trainer whose rollouts depend only on the prompt and the global position (no sampling)."""

    class Deterministic(base):
        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                                  has_tool_images=False):  # fmt: skip
            rank, local = self.accelerator.process_index, len(prompt_ids)
            step = self.state.global_step
            out = []
            for i, ids in enumerate(prompt_ids):
                j = (rank * local + i) % num_generations  # position inside the group
                seed = (sum(ids) + 31 * step) % 97
                length = 1 + (j + seed) % 4  # 1..4 tokens: rewards differ within a group
                out.append([5 + (seed + 3 * k + j) % 200 for k in range(length)])
            return out, None

    return Deterministic


def _grpo_args(out: str, per_device: int, **extra):
    from common.rl import cpu_grpo_kwargs

    return cpu_grpo_kwargs(
        output_dir=out,
        per_device_train_batch_size=per_device,
        num_generations=N,
        max_completion_length=4,
        max_steps=2,
        learning_rate=0.5,
        optim="sgd",  # Adam's normalisation would magnify reduction-order noise in tiny gradients
        lr_scheduler_type="constant",
        loss_type="grpo",
        shuffle_dataset=False,
        **extra,
    )


def _pgrpo(out: Path, per_device: int):
    """ThreadWeaver's P-GRPO on the toy tokenizer: alternate rows follow a correct parallel trace
    and a wrong sequential one (the oracle engine of the threadweaver tests)."""
    from datasets import Dataset

    from common.rl import cpu_grpo_kwargs
    from methods.threadweaver import (
        PGRPOConfig,
        PGRPOReward,
        PGRPOTrainer,
        Trajectory,
        extract_units,
    )
    from methods.threadweaver.toy import make_codebook, toy_tokenizer, toy_trajectory
    from tests.methods.test_threadweaver import MixedOracle, _small_model

    tok = toy_tokenizer(n_symbols=4, chain_len=4)
    cb = make_codebook(4, 4, seed=0)
    t1, t2 = toy_trajectory([0, 2], cb, "par"), toy_trajectory([1, 3, 0], cb, "par")
    par = Trajectory([t1.segments[0], " ; ", t2.segments[0]], t2.final)
    seq = Trajectory(toy_trajectory([0, 2], cb, "seq").segments, "A: c0 c0")  # wrong answer

    def enc(s):
        return tok(s, add_special_tokens=False)["input_ids"]

    prompt = [tok.bos_token_id, *enc("Q: s0 s2\n")]
    engine = MixedOracle(*(extract_units(prompt, t, enc, tok.eos_token_id)[1] for t in (par, seq)))
    engine.n_prompt = len(prompt)
    ds = Dataset.from_list([{"prompt": tok.decode(prompt), "answer": par.final}] * 8)
    kw = cpu_grpo_kwargs(
        output_dir=str(out / "trl"), max_steps=2, learning_rate=0.5, optim="sgd",
        lr_scheduler_type="constant", per_device_train_batch_size=per_device, num_generations=N,
        shuffle_dataset=False,
    )  # fmt: skip
    reward = PGRPOReward(verify=lambda text, g: text.replace("<eos>", "").endswith(g))
    return PGRPOTrainer(
        model=_small_model(len(tok), "qwen3"), args=PGRPOConfig(**kw, rollout_budget_tokens=200),
        train_dataset=ds, processing_class=tok, reward_funcs=[reward],
        engine_factory=lambda tr: engine,
    )  # fmt: skip


def main() -> weakref.ref | None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--trainer",
        choices=["grpo", "maxrl", "sft", "apo", "georl", "kmkc", "pgrpo"],
        required=True,
    )
    parser.add_argument("--per-device", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from datasets import Dataset

    from common.tiny import tiny_causal_lm

    torch.manual_seed(0)
    model, tok = tiny_causal_lm("qwen2", seed=0)
    out = Path(args.out)
    if args.trainer == "pgrpo":
        trainer = _pgrpo(out, args.per_device)
        model = trainer.model
    elif args.trainer == "sft":
        from trl import SFTConfig, SFTTrainer

        data = Dataset.from_dict({"text": [p + " " + str(i) for i, p in enumerate(PROMPTS * 2)]})
        config = SFTConfig(
            output_dir=str(out / "trl"), per_device_train_batch_size=args.per_device,
            max_steps=2, learning_rate=0.5, optim="sgd", lr_scheduler_type="constant", use_cpu=True, report_to="none", save_strategy="no",
            bf16=False, dataloader_pin_memory=False, disable_tqdm=True, seed=0,
            shuffle_dataset=False,
        )  # fmt: skip
        trainer = SFTTrainer(model=model, args=config, train_dataset=data, processing_class=tok)
    else:
        data = Dataset.from_dict({"prompt": PROMPTS})
        kw, extra = _grpo_args(str(out / "trl"), args.per_device), {}
        if args.trainer == "apo":
            from methods.apo.trainer import APOConfig, APOTrainer

            base, config = APOTrainer, APOConfig(**kw)
        elif args.trainer == "georl":
            from methods.georl import GeoRLGRPOConfig
            from methods.georl.trainer import GeoRLTrainer

            base, config = GeoRLTrainer, GeoRLGRPOConfig(**kw)
            extra = {"embedder": HashEmbedder(), "reward_funcs": _quality}
        elif args.trainer == "kmkc":
            from methods.kmkc import CDKCConfig, CDKCTrainer

            # the confused band freezes after step 1 and shapes the loss of step 2
            base, config = CDKCTrainer, CDKCConfig(**kw, stabilize_batches=1)
            data = data.add_column("region", ["mastered", "confused", "missing", "missing"])
        elif args.trainer == "maxrl":
            from methods.maxrl.trainer import MaxRLConfig, MaxRLTrainer

            base, config = (
                MaxRLTrainer,
                MaxRLConfig(**_grpo_args(str(out / "trl"), args.per_device)),
            )
        else:
            from trl import GRPOConfig

            from common.rl import GroupAdvantageGRPOTrainer

            base = GroupAdvantageGRPOTrainer
            config = GRPOConfig(**_grpo_args(str(out / "trl"), args.per_device))
        extra.setdefault("reward_funcs", _length_reward)
        trainer = _deterministic(base)(
            model=model, args=config, train_dataset=data, processing_class=tok, **extra
        )
    if trainer.accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, out / "init.pt")
    trainer.train()
    acc = trainer.accelerator
    record = {"world": acc.num_processes}
    if args.trainer != "sft":
        record["rewards"] = trainer.last_rewards.tolist()  # [B, N], gathered over processes
        record["advantages"] = trainer.last_advantages.tolist()
        record["band"] = getattr(trainer, "band", None)  # kmkc: the frozen confused band
    out.mkdir(parents=True, exist_ok=True)
    (out / f"record{acc.process_index}.json").write_text(json.dumps(record))
    if acc.is_main_process:
        state = {
            k: v.detach().cpu() for k, v in acc.unwrap_model(trainer.model).state_dict().items()
        }
        torch.save(state, out / "params.pt")
    acc.wait_for_everyone()
    wrapped = trainer.model_wrapped  # DistributedDataParallel with 2 processes: holds the Reducer
    return weakref.ref(wrapped) if wrapped is not model else None


def teardown(wrapped: weakref.ref | None) -> None:
    """Frees the DDP model, then destroys the process group: in that order, or a rank can hang.

    DDP's C++ Reducer holds a reference to the gloo process group, and pybind frees the Reducer with
    the GIL held. When the process group was destroyed first (``destroy_process_group`` while the
    trainer was still alive), the Reducer's reference is the last one: ``~ProcessGroupGloo`` then
    joins gloo's worker threads with the GIL held, while a worker thread that has just finished the
    final barrier waits for the GIL to free the tensors of an earlier all-gather (their Python
    objects). Both wait forever: the 2-process stall of issue 41 (py-spy: main thread in
    ``~Reducer -> ~ProcessGroupGloo -> std::thread::join``, gloo thread in
    ``~AsyncBarrierWork -> ~AsyncAllgatherWork -> decref_pyobject -> gil_scoped_acquire``). Freeing
    the trainer first leaves the last reference with the Python ``ProcessGroup`` object, whose
    destructor releases the GIL before joining; the group is still destroyed while the interpreter is
    alive (left to interpreter exit, a gloo thread taking the GIL aborts the process).
    """
    gc.collect()  # the trainer and its DDP model went with main()'s frame; cycles go here
    if wrapped is not None and wrapped() is not None:
        raise RuntimeError(
            "the DDP model outlived the trainer: destroying the process group now could hang "
            f"(referrers: {[type(r).__name__ for r in gc.get_referrers(wrapped())]})"
        )
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    # `kill -USR1` prints every thread's Python stack (the test does it before killing a hung run).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    teardown(main())
