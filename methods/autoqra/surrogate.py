"""Multi-fidelity surrogate of AutoQRA Stage 1 (Eq. 7).

An MLP ``[P_low, M, q_cov, r_cov, hist_Q, hist_R] → 64 → GELU → 32 → GELU → 1`` predicts the high-fidelity
performance from a cheap low-fidelity one, trained with a Huber loss plus an L2 weight penalty. Until
``min_samples`` (LF, HF) pairs exist it returns ``P_low``.

Two training schedules (``training``):

* ``"official"`` (default) follows ``autoqra/surrogate/mlp.py::SurrogateMLPPromotion._train`` of the official
  code (harrysyz99/autoqra @ 66a5de5): one network kept across refits (warm start, a fresh Adam per refit),
  a refit after every new pair, raw targets, penalty ``λ Σ_p ‖p‖₂`` (sum of non-squared norms, not scaled by
  n), a ``train_test_split(test_size=0.2, random_state=42)`` validation split (train = validation below 5
  pairs) and early stopping on a strict improvement with patience 10.
* ``"scratch"``: the earlier schedule of this repository, kept as an option: a seeded re-initialisation at
  every refit, standardised targets, squared L2 scaled by 1/n, a seeded 20% split.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from sklearn.preprocessing import StandardScaler
from torch import nn

from common.train_loop import train_steps

from .importance import Importance
from .space import QRConfig, SearchSpace

logger = logging.getLogger(__name__)


def surrogate_features(
    cfg: QRConfig, p_low: float, mem: float, space: SearchSpace, importance: Importance
) -> np.ndarray:
    """``x = [P_low, M, q_cov, r_cov, hist_Q(q), hist_R(r)]`` (official `surrogate/mlp.py::_features`)."""
    s = importance.score
    q_cov = float(np.mean(s * space.s_q(np.asarray(cfg.q))))
    r_cov = float(np.mean(s * space.s_r(np.asarray(cfg.r))))
    hq = [cfg.q.count(v) / cfg.num_layers for v in space.Q]
    hr = [cfg.r.count(v) / cfg.num_layers for v in space.R]
    return np.asarray([p_low, mem, q_cov, r_cov, *hq, *hr], dtype=np.float64)


TRAININGS = ("official", "scratch")


class FidelitySurrogate:
    """Eq. 7: ``min Σ Huber_δ(Φ(x_i) - P_high_i) + λ·penalty(θ)``.

    Args:
        hidden: hidden widths (64, 32).
        huber_delta: δ (1.0). weight_decay: λ (0.01). lr: Adam lr (1e-3).
        max_epochs: full-batch epochs per refit (500). patience: early-stop patience (10).
        min_samples: pairs needed before fitting (10). seed: torch seed of the network's initialisation.
        training: ``"official"`` (warm refit after every pair, as the official code) or ``"scratch"``
            (seeded re-initialisation, standardised targets); see the module docstring.

    Raises:
        ValueError: for an unknown ``training`` or non-positive sizes.
    """

    def __init__(
        self,
        hidden: tuple[int, ...] = (64, 32),
        huber_delta: float = 1.0,
        weight_decay: float = 0.01,
        lr: float = 1e-3,
        max_epochs: int = 500,
        patience: int = 10,
        min_samples: int = 10,
        seed: int = 0,
        training: str = "official",
    ) -> None:
        if training not in TRAININGS:
            raise ValueError(f"training must be one of {TRAININGS}, got {training!r}")
        if min_samples < 1 or max_epochs < 1 or patience < 1:
            raise ValueError(
                f"min_samples, max_epochs and patience must be >= 1, got "
                f"{min_samples}, {max_epochs}, {patience}"
            )
        self.hidden, self.huber_delta, self.weight_decay = tuple(hidden), huber_delta, weight_decay
        self.lr, self.max_epochs, self.patience = lr, max_epochs, patience
        self.min_samples, self.seed, self.training = int(min_samples), int(seed), training
        self.X: list[np.ndarray] = []
        self.y: list[float] = []
        self.net: nn.Module | None = None
        self.scaler: StandardScaler | None = None
        self.y_mean, self.y_std = 0.0, 1.0
        self.epochs: list[int] = []  # epochs run by each refit (logged, tested)

    @property
    def is_fitted(self) -> bool:
        """Whether the network has been fitted (official ``surrogate/mlp.py``: identity until then)."""
        return self.net is not None

    @property
    def refit_per_pair(self) -> bool:
        """True when every new pair triggers a refit (the official schedule).

        Source: official ``surrogate/mlp.py``.
        """
        return self.training == "official"

    def update(self, x: np.ndarray, p_high: float, refit: bool = True) -> None:
        """Add one (features, P_high) pair; refit on the whole buffer once enough pairs exist.

        Source: paper Eq. 7 (as numbered in official ``surrogate/mlp.py``), schedule as
        that file.

        With ``training="scratch"`` the search adds a generation's pairs with ``refit=False`` and calls
        ``fit()`` once; with ``"official"`` it refits after every pair, as the official ``update`` does.
        """
        self.X.append(np.asarray(x, dtype=np.float64))
        self.y.append(float(p_high))
        if refit:
            self.fit()

    def fit(self) -> None:
        """Refit on the whole buffer if it holds at least ``min_samples`` pairs.

        Source: paper Eq. 7 (Huber loss + penalty), as official ``surrogate/mlp.py``.
        """
        if len(self.y) >= self.min_samples:
            if self.training == "official":
                self._fit_official()
            else:
                self._fit_scratch()

    def _build(self, d_in: int) -> nn.Module:
        torch.manual_seed(self.seed)
        dims = [d_in, *self.hidden]
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.GELU()]
        return nn.Sequential(*layers, nn.Linear(dims[-1], 1))

    def _fit_official(self) -> None:
        from sklearn.model_selection import train_test_split

        X = np.stack(self.X)
        y = np.asarray(self.y, dtype=np.float64)
        self.scaler = StandardScaler().fit(X)
        Xs = self.scaler.transform(X)
        if len(Xs) < 5:
            X_tr, X_va, y_tr, y_va = Xs, Xs, y, y
        else:
            X_tr, X_va, y_tr, y_va = train_test_split(Xs, y, test_size=0.2, random_state=42)
        if self.net is None:  # warm start: the network persists across refits
            self.net = self._build(X.shape[1])
        net = self.net
        self.y_mean, self.y_std = 0.0, 1.0  # raw targets
        opt = torch.optim.Adam(net.parameters(), lr=self.lr)
        loss_fn = nn.HuberLoss(delta=self.huber_delta)
        Xt, yt = torch.tensor(X_tr, dtype=torch.float32), torch.tensor(y_tr, dtype=torch.float32)
        Xv, yv = torch.tensor(X_va, dtype=torch.float32), torch.tensor(y_va, dtype=torch.float32)
        st = {"best": float("inf"), "state": None, "bad": 0, "epoch": 0}

        def objective(_i: int) -> torch.Tensor:
            loss = loss_fn(net(Xt).squeeze(-1), yt)
            return loss + self.weight_decay * sum(torch.norm(p, p=2) for p in net.parameters())

        def validate(i: int, _loss: float) -> bool:  # early stopping on the held-out split
            st["epoch"] = i + 1
            net.eval()
            with torch.no_grad():
                v = float(loss_fn(net(Xv).squeeze(-1), yv))
            if v < st["best"]:
                st["best"], st["bad"] = v, 0
                st["state"] = {k: t.clone() for k, t in net.state_dict().items()}
            else:
                st["bad"] += 1
                if st["bad"] >= self.patience:
                    return True
            net.train()
            return False

        train_steps(
            net,
            objective,
            self.max_epochs,
            optimizer=opt,
            desc="autoqra surrogate",
            callback=validate,
        )
        if st["state"] is not None:
            net.load_state_dict(st["state"])
        self.epochs.append(st["epoch"])
        net.eval()

    def _fit_scratch(self) -> None:
        X = np.stack(self.X)
        y = np.asarray(self.y)
        if len(np.unique(X, axis=0)) < 2:
            logger.info("surrogate: fewer than 2 distinct points, keeping identity")
            return
        gen = torch.Generator().manual_seed(self.seed)
        self.scaler = StandardScaler().fit(X)
        self.y_mean, self.y_std = float(y.mean()), float(y.std() + 1e-8)
        Xt = torch.tensor(self.scaler.transform(X), dtype=torch.float32)
        yt = torch.tensor((y - self.y_mean) / self.y_std, dtype=torch.float32)
        perm = torch.randperm(len(y), generator=gen)
        n_val = max(1, len(y) // 5)
        val, tr = perm[:n_val], perm[n_val:]
        net = self._build(X.shape[1])
        opt = torch.optim.Adam(net.parameters(), lr=self.lr)
        loss_fn = nn.HuberLoss(delta=self.huber_delta)
        st = {"best": float("inf"), "state": None, "bad": 0, "epoch": 0}

        def objective(_i: int) -> torch.Tensor:
            reg = sum(p.pow(2).sum() for p in net.parameters())
            return loss_fn(net(Xt[tr]).squeeze(-1), yt[tr]) + self.weight_decay * reg / len(tr)

        def validate(i: int, _loss: float) -> bool:  # early stopping on the held-out split
            st["epoch"] = i + 1
            with torch.no_grad():
                v = float(loss_fn(net(Xt[val]).squeeze(-1), yt[val]))
            if v < st["best"] - 1e-6:
                st["best"], st["bad"] = v, 0
                st["state"] = {k: t.clone() for k, t in net.state_dict().items()}
            else:
                st["bad"] += 1
                if st["bad"] >= self.patience:
                    return True
            return False

        train_steps(
            net,
            objective,
            self.max_epochs,
            optimizer=opt,
            desc="autoqra surrogate",
            callback=validate,
        )
        if st["state"] is not None:
            net.load_state_dict(st["state"])
        self.epochs.append(st["epoch"])
        self.net = net.eval()

    def predict(self, x: np.ndarray) -> float:
        """Predicted ``P_high``; ``P_low`` (= ``x[0]``) while unfitted.

        Source: official ``surrogate/mlp.py`` (returns ``P_low`` until fitted).
        """
        x = np.asarray(x, dtype=np.float64)
        if self.net is None:
            return float(x[0])
        with torch.no_grad():
            z = torch.tensor(self.scaler.transform(x[None]), dtype=torch.float32)
            return float(self.net(z).squeeze()) * self.y_std + self.y_mean
