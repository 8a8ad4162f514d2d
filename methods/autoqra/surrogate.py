"""Multi-fidelity surrogate of AutoQRA Stage 1 (spec §3.5, Eq. 7).

An MLP ``[P_low, M, q_cov, r_cov, hist_Q, hist_R] → 64 → GELU → 32 → GELU → 1`` predicts the high-fidelity
performance from a cheap low-fidelity one, trained with a Huber loss plus squared-L2 weight penalty (the repo
uses the non-squared norm, spec §9.10). Until ``min_samples`` (LF, HF) pairs exist it returns ``P_low``.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from sklearn.preprocessing import StandardScaler
from torch import nn

from .importance import Importance
from .space import QRConfig, SearchSpace

logger = logging.getLogger(__name__)


def surrogate_features(
    cfg: QRConfig, p_low: float, mem: float, space: SearchSpace, importance: Importance
) -> np.ndarray:
    """``x = [P_low, M, q_cov, r_cov, hist_Q(q), hist_R(r)]`` (spec §3.5)."""
    s = importance.score
    q_cov = float(np.mean(s * space.s_q(np.asarray(cfg.q))))
    r_cov = float(np.mean(s * space.s_r(np.asarray(cfg.r))))
    hq = [cfg.q.count(v) / cfg.num_layers for v in space.Q]
    hr = [cfg.r.count(v) / cfg.num_layers for v in space.R]
    return np.asarray([p_low, mem, q_cov, r_cov, *hq, *hr], dtype=np.float64)


class FidelitySurrogate:
    """Eq. 7: ``min Σ Huber_δ(Φ(x_i) - P_high_i) + λ||θ||²``.

    Args:
        hidden: hidden widths (64, 32).
        huber_delta: δ (1.0). weight_decay: λ (0.01). lr: Adam lr (1e-3).
        max_epochs: full-batch epochs (500). patience: early-stop patience on a 20% split (10).
        min_samples: pairs needed before fitting (10). seed: torch seed for every (re)fit.
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
    ) -> None:
        self.hidden, self.huber_delta, self.weight_decay = tuple(hidden), huber_delta, weight_decay
        self.lr, self.max_epochs, self.patience = lr, max_epochs, patience
        self.min_samples, self.seed = int(min_samples), int(seed)
        self.X: list[np.ndarray] = []
        self.y: list[float] = []
        self.net: nn.Module | None = None
        self.scaler: StandardScaler | None = None
        self.y_mean, self.y_std = 0.0, 1.0

    @property
    def is_fitted(self) -> bool:
        return self.net is not None

    def update(self, x: np.ndarray, p_high: float, refit: bool = True) -> None:
        """Add one (features, P_high) pair; refit from scratch (deterministic) once enough exist.

        The search adds a generation's pairs with ``refit=False`` and calls ``fit()`` once.
        """
        self.X.append(np.asarray(x, dtype=np.float64))
        self.y.append(float(p_high))
        if refit:
            self.fit()

    def fit(self) -> None:
        """Refit on the whole buffer if it holds at least ``min_samples`` pairs."""
        if len(self.y) >= self.min_samples:
            self._fit()

    def _fit(self) -> None:
        X = np.stack(self.X)
        y = np.asarray(self.y)
        if len(np.unique(X, axis=0)) < 2:
            logger.info("surrogate: fewer than 2 distinct points, keeping identity")
            return
        gen = torch.Generator().manual_seed(self.seed)
        torch.manual_seed(self.seed)
        self.scaler = StandardScaler().fit(X)
        self.y_mean, self.y_std = float(y.mean()), float(y.std() + 1e-8)
        Xt = torch.tensor(self.scaler.transform(X), dtype=torch.float32)
        yt = torch.tensor((y - self.y_mean) / self.y_std, dtype=torch.float32)
        perm = torch.randperm(len(y), generator=gen)
        n_val = max(1, len(y) // 5)
        val, tr = perm[:n_val], perm[n_val:]
        dims = [X.shape[1], *self.hidden]
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.GELU()]
        net = nn.Sequential(*layers, nn.Linear(dims[-1], 1))
        opt = torch.optim.Adam(net.parameters(), lr=self.lr)
        loss_fn = nn.HuberLoss(delta=self.huber_delta)
        best, best_state, bad = float("inf"), None, 0
        for _ in range(self.max_epochs):
            opt.zero_grad()
            reg = sum(p.pow(2).sum() for p in net.parameters())
            loss = loss_fn(net(Xt[tr]).squeeze(-1), yt[tr]) + self.weight_decay * reg / len(tr)
            loss.backward()
            opt.step()
            with torch.no_grad():
                v = float(loss_fn(net(Xt[val]).squeeze(-1), yt[val]))
            if v < best - 1e-6:
                best, best_state, bad = v, {k: t.clone() for k, t in net.state_dict().items()}, 0
            else:
                bad += 1
                if bad >= self.patience:
                    break
        if best_state is not None:
            net.load_state_dict(best_state)
        self.net = net.eval()

    def predict(self, x: np.ndarray) -> float:
        """Predicted ``P_high``; ``P_low`` (= ``x[0]``) while unfitted."""
        x = np.asarray(x, dtype=np.float64)
        if self.net is None:
            return float(x[0])
        with torch.no_grad():
            z = torch.tensor(self.scaler.transform(x[None]), dtype=torch.float32)
            return float(self.net(z).squeeze()) * self.y_std + self.y_mean
