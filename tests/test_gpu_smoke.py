"""The GPU smoke script turns the CPU smoke switches back on (and only those)."""

from scripts.gpu_smoke import gpu_overrides


def test_gpu_overrides_restore_precision_and_engines():
    cpu = [
        "model.path=/m",
        "model.dtype=float32",
        "method.trainer.bf16=false",
        "method.trainer.use_vllm=false",
        "method.eval.engine=hf",
        "method.trainer.max_steps=1",
    ]
    assert gpu_overrides(cpu, vllm=False) == [
        "model.path=/m",
        "model.dtype=bfloat16",
        "method.trainer.bf16=true",
        "method.trainer.use_vllm=false",
        "method.eval.engine=hf",
        "method.trainer.max_steps=1",
    ]
    on = gpu_overrides(cpu, vllm=True)
    assert "method.trainer.use_vllm=true" in on and "method.eval.engine=vllm" in on
