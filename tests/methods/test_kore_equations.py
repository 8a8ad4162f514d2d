"""KORE's retention bound (paper App. C) against an independent computation from the inputs X.

Written for issue 32 point 4: ``test_kore.py`` checks that the drift stays below the bound, which a
looser bound (for example the sum of the null eigenvalues without its square root) also passes.
Here the bound's value is recomputed from X itself, ``||ΔB||_2 ||A||_2 ||Û^T X||_F``, and shown
to be attained by a rank-one update when A has orthonormal rows.
"""

from __future__ import annotations

import math

import torch

from methods.kore import kore_decompose, retention_bound, smallest_eigvecs


def _data(d=12, n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(d, n, generator=g, dtype=torch.float64) * torch.linspace(0.05, 3.0, d)[:, None]
    return X @ X.T, X, g


def test_retention_bound_value_is_recomputed_from_the_inputs():
    C, X, g = _data()
    r = 4
    W0 = torch.randn(9, C.shape[0], generator=g, dtype=torch.float64)
    f = kore_decompose(W0, C, r)
    U_hat, _ = smallest_eigvecs(C, r)
    dB = torch.randn(9, r, generator=g, dtype=torch.float64)
    expected = (
        torch.linalg.matrix_norm(dB, ord=2)
        * torch.linalg.matrix_norm(f.A, ord=2)
        * (U_hat.T @ X).norm()  # Frobenius norm of the inputs' null-space component
    ).item()
    assert math.isclose(retention_bound(dB, f.A, f.null_eigvals), expected, rel_tol=1e-9)


def test_retention_bound_is_attained_with_orthonormal_A():
    """A = Û^T (the lora_null_v1 init) and ΔB = u w^T with w the top left-singular vector of
    Û^T X: the drift ||ΔB A X||_F equals ||ΔB||_2 ||Û^T X||_2, which equals the bound when
    Û^T X has rank one."""
    C0, X0, g = _data(seed=1)
    r = 3
    U_hat, _ = smallest_eigvecs(C0, r)
    # keep only one null-space direction in X: Û^T X becomes rank one
    keep = U_hat[:, :1] @ U_hat[:, :1].T
    X = X0 - U_hat @ U_hat.T @ X0 + keep @ X0
    C = X @ X.T
    f = kore_decompose(torch.randn(7, C.shape[0], generator=g, dtype=torch.float64), C, r,
                       init="lora_null_v1")  # fmt: skip
    Y = f.A @ X  # [r, n]
    w = torch.linalg.svd(Y)[0][:, 0]
    u = torch.randn(7, generator=g, dtype=torch.float64)
    dB = torch.outer(u, w)
    drift = (dB @ f.A @ X).norm().item()
    bound = retention_bound(dB, f.A, f.null_eigvals)
    assert math.isclose(drift, bound, rel_tol=1e-6)
