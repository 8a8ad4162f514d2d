"""common.train_loop.train_steps: closed-form SGD, clipping, scheduler, early stop, progress, errors."""

import math

import pytest
import torch

from common.train_loop import train_steps


class _Quad(torch.nn.Module):
    """f(w) = a/2 · ||w - c||² (gradient a (w - c))."""

    def __init__(self, w0, a: float = 1.0, c: float = 0.0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float64))
        self.a, self.c = a, c

    def loss(self, _step: int) -> torch.Tensor:
        return 0.5 * self.a * ((self.w - self.c) ** 2).sum()


def test_sgd_on_a_quadratic_matches_the_closed_form():
    # w_k = c + (1 - lr·a)^k (w_0 - c); the loss of step k is taken before its update.
    m = _Quad([3.0, -1.0], a=2.0, c=0.5)
    lr, k = 0.1, 7
    losses = train_steps(m, m.loss, k, optimizer=torch.optim.SGD(m.parameters(), lr=lr))
    w0 = torch.tensor([3.0, -1.0], dtype=torch.float64)
    expect = 0.5 + (1 - lr * 2.0) ** k * (w0 - 0.5)
    assert torch.allclose(m.w.detach(), expect, rtol=0, atol=1e-12)
    for i, loss in enumerate(losses):
        assert loss == pytest.approx(((1 - lr * 2.0) ** (2 * i)) * float(((w0 - 0.5) ** 2).sum()))
    assert len(losses) == k and m.training


def test_grad_clip_caps_the_step_length():
    # f = ||w||²/2 from ||w0|| = 10, clip 1: every SGD step moves lr along -w/||w|| while ||w|| > 1.
    m = _Quad([6.0, 8.0])
    train_steps(m, m.loss, 3, optimizer=torch.optim.SGD(m.parameters(), lr=0.5), grad_clip=1.0)
    assert m.w.detach().norm().item() == pytest.approx(10.0 - 3 * 0.5, abs=1e-6)


def test_scheduler_steps_after_every_optimizer_step():
    # StepLR halves lr every step: w_k = w0 · Π_{i<k} (1 - lr0/2^i).
    m = _Quad([1.0])
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    train_steps(m, m.loss, 3, optimizer=opt, scheduler=sched)
    assert m.w.item() == pytest.approx((1 - 0.5) * (1 - 0.25) * (1 - 0.125))


def test_lr_builds_adamw_on_trainable_parameters_only():
    # AdamW's first step moves each coordinate by lr·sign(grad) (weight decay 0); frozen stays.
    m = _Quad([2.0, -3.0])
    frozen = torch.nn.Parameter(torch.tensor(5.0), requires_grad=False)
    m.register_parameter("frozen", frozen)
    train_steps(m, m.loss, 1, lr=0.1)
    assert torch.allclose(m.w.detach(), torch.tensor([1.9, -2.9], dtype=torch.float64), atol=1e-6)
    assert frozen.item() == 5.0


def test_callback_sees_every_step_and_can_stop_early():
    m = _Quad([1.0])
    seen: list[tuple[int, float]] = []
    losses = train_steps(
        m,
        m.loss,
        10,
        optimizer=torch.optim.SGD(m.parameters(), lr=0.1),
        callback=lambda s, loss: seen.append((s, loss)) or s == 3,
    )
    assert [s for s, _ in seen] == [0, 1, 2, 3] and [v for _, v in seen] == losses


def test_progress_silent_with_icml26_progress_0(capsys, monkeypatch):
    for k in ("RANK", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    m = _Quad([1.0])
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    monkeypatch.setenv("ICML26_PROGRESS", "0")
    capsys.readouterr()
    train_steps(m, m.loss, 3, optimizer=opt, desc="probe-train")
    cap = capsys.readouterr()
    assert "probe-train" not in cap.out + cap.err
    monkeypatch.setenv("ICML26_PROGRESS", "1")
    train_steps(m, m.loss, 3, optimizer=opt, desc="probe-train")
    cap = capsys.readouterr()
    assert "probe-train" in cap.out + cap.err


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"steps": -1, "lr": 0.1}, "steps"),
        ({"steps": 2.0, "lr": 0.1}, "steps"),
        ({"steps": 2}, "exactly one of lr and optimizer"),
        ({"steps": 2, "lr": 0.1, "optimizer": "opt"}, "exactly one of lr and optimizer"),
        ({"steps": 2, "lr": -0.1}, "lr"),
        ({"steps": 2, "lr": math.nan}, "lr"),
        ({"steps": 2, "lr": 0.1, "grad_clip": 0.0}, "grad_clip"),
    ],
)
def test_bad_arguments_raise(kw, match):
    m = _Quad([1.0])
    if kw.get("optimizer") == "opt":
        kw = {**kw, "optimizer": torch.optim.SGD(m.parameters(), lr=0.1)}
    with pytest.raises(ValueError, match=match):
        train_steps(m, m.loss, **kw)


def test_non_scalar_loss_raises():
    m = _Quad([1.0, 2.0])
    with pytest.raises(ValueError, match="scalar"):
        train_steps(m, lambda _s: m.w * 2, 1, lr=0.1)


class _Regression(torch.nn.Module):
    """Mean squared error of a linear model on a fixed data set, one row block per micro-batch index."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, rows: int):
        super().__init__()
        self.lin = torch.nn.Linear(x.shape[1], 1, dtype=torch.float64)
        torch.nn.init.constant_(self.lin.weight, 0.3)
        torch.nn.init.constant_(self.lin.bias, -0.2)
        self.x, self.y, self.rows = x, y, rows

    def loss(self, i: int) -> torch.Tensor:
        sl = slice(i * self.rows, (i + 1) * self.rows)
        return ((self.lin(self.x[sl]).squeeze(-1) - self.y[sl]) ** 2).mean()


def test_accumulated_micro_batches_equal_one_large_batch():
    # k micro-batches of b rows (mean loss each) give the update of one batch of k·b rows.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(24, 3, generator=gen, dtype=torch.float64)
    y = torch.randn(24, generator=gen, dtype=torch.float64)
    small, large = _Regression(x, y, rows=2), _Regression(x, y, rows=6)
    ls = train_steps(small, small.loss, 4, optimizer=torch.optim.SGD(small.parameters(), lr=0.1),
                     accumulation_steps=3)  # fmt: skip
    ll = train_steps(large, large.loss, 4, optimizer=torch.optim.SGD(large.parameters(), lr=0.1))
    for a, b in zip(small.parameters(), large.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)
    assert ls == pytest.approx(ll, abs=1e-12)  # the step's loss is the mean over its micro-batches
    seen = []
    train_steps(
        small, lambda i: seen.append(i) or small.loss(i % 12), 2, lr=0.1, accumulation_steps=3
    )
    assert seen == [0, 1, 2, 3, 4, 5]
    with pytest.raises(ValueError, match="accumulation_steps"):
        train_steps(small, small.loss, 1, lr=0.1, accumulation_steps=0)
