"""Kernels against an explicit float64 (F + lambda I)^{-1} built for small layers."""

from __future__ import annotations

import pytest
import torch

from async_spark.hylo import kernels as K


def _factors(n, d_in, d_out, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(n, d_in, generator=g, dtype=dtype)
    G = torch.randn(n, d_out, generator=g, dtype=dtype)
    grad = torch.randn(d_out, d_in, generator=g, dtype=dtype)
    return A, G, grad


def _dense_direction(A, G, grad, damping, weights=None):
    """(F + lambda I)^{-1} grad with F = sum_i w_i u_i u_i^T built explicitly in float64."""
    A, G, grad = A.double(), G.double(), grad.double()
    n = A.shape[0]
    U = torch.stack([torch.outer(G[i], A[i]).reshape(-1) for i in range(n)])
    w = torch.full((n,), 1.0 / n, dtype=torch.float64) if weights is None else weights
    F = U.T @ (U * w.unsqueeze(1))
    D = F.shape[0]
    sol = torch.linalg.solve(F + damping * torch.eye(D, dtype=torch.float64), grad.reshape(-1))
    return sol.reshape(grad.shape)


def test_kernel_matrix_is_gram_of_per_sample_jacobians():
    A, G, _ = _factors(5, 3, 4)
    U = torch.stack([torch.outer(G[i], A[i]).reshape(-1) for i in range(5)])
    torch.testing.assert_close(K.kernel_matrix(A, G), U @ U.T)
    torch.testing.assert_close(K.sample_scores(A, G), torch.diagonal(U @ U.T))


@pytest.mark.parametrize("n,d_in,d_out", [(1, 3, 2), (6, 4, 3), (20, 3, 2), (7, 5, 1)])
@pytest.mark.parametrize("damping", [1e-2, 1.0])
def test_sngd_matches_dense_inverse(n, d_in, d_out, damping):
    A, G, grad = _factors(n, d_in, d_out)
    got = K.sngd_direction(A, G, grad, damping)
    torch.testing.assert_close(got, _dense_direction(A, G, grad, damping), rtol=1e-9, atol=1e-10)


def test_sngd_float32_close_to_float64():
    A, G, grad = _factors(8, 5, 3)
    got = K.sngd_direction(A.float(), G.float(), grad.float(), 0.1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(
        got.double(), _dense_direction(A, G, grad, 0.1), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("method", ["kis", "kid"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_full_rank_reductions_equal_sngd(method, dtype):
    A, G, grad = _factors(9, 4, 3, dtype=dtype)
    ref = K.sngd_direction(A, G, grad, 0.3)
    if method == "kis":
        got = K.kis_direction(A, G, grad, 0.3, 9, generator=torch.Generator().manual_seed(1))
    else:
        got = K.kid_direction(A, G, grad, 0.3, 9)
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    torch.testing.assert_close(got, ref, rtol=tol, atol=tol)


def test_kis_is_sngd_of_weighted_sampled_rows_against_dense():
    # (F_S + lambda I)^{-1} grad with F_S = sum_{i in S} u_i u_i^T / (n pi_i), built explicitly
    A, G, grad = _factors(12, 4, 3)
    idx, scale = K.kis_sample(A, G, 5, torch.Generator().manual_seed(3))
    assert torch.equal(idx, K.kis_select(A, G, 5, torch.Generator().manual_seed(3)))
    got = K.kis_direction(A, G, grad, 0.5, 5, generator=torch.Generator().manual_seed(3))
    weights = scale**2 / 5  # = 1 / (n pi_i)
    torch.testing.assert_close(
        got, _dense_direction(A[idx], G[idx], grad, 0.5, weights), rtol=1e-9, atol=1e-10
    )


def _kis_fisher_mean(A, G, rank, draws, weighted):
    n = A.shape[0]
    U = torch.stack([torch.outer(G[i], A[i]).reshape(-1) for i in range(n)])
    gen = torch.Generator().manual_seed(0)
    total = torch.zeros(U.shape[1], U.shape[1], dtype=torch.float64)
    for _ in range(draws):
        idx, scale = K.kis_sample(A, G, rank, gen)
        US = U[idx] * (scale.unsqueeze(1) if weighted else 1.0)
        total += US.T @ US / rank
    return total / draws, U.T @ U / n


def test_kis_fisher_estimate_is_unbiased():
    # Importance sampling must weight the kept rows by 1/pi_i: E[F_S] = F.  The unweighted
    # (1/r) sum over the kept rows (the paper's formula, used here until this test) is biased
    # towards the rows it favours -- with one heavy row, its trace is ~4x F's.
    A, G, _ = _factors(8, 2, 2)
    A[3] *= 6.0
    mean, F = _kis_fisher_mean(A, G, 2, 4000, weighted=True)
    rel = float((mean - F).norm() / F.norm())
    assert rel < 0.05, rel
    biased, _ = _kis_fisher_mean(A, G, 2, 500, weighted=False)
    assert float((biased - F).norm() / F.norm()) > 0.5
    # every weight is 1 at full rank (KIS = SNGD), and never below it otherwise
    _, scale = K.kis_sample(A, G, 8, torch.Generator().manual_seed(1))
    torch.testing.assert_close(scale, torch.ones(8, dtype=torch.float64))
    _, scale = K.kis_sample(A, G, 3, torch.Generator().manual_seed(1))
    assert bool((scale**2 * 8 / 3 >= 1 - 1e-12).all())


def test_kis_sampling_follows_kernel_diagonal():
    # one dominant row is (almost) always picked; zero rows come last
    A, G, _ = _factors(10, 3, 2)
    A[4] *= 100.0
    A[7] = 0.0
    gen = torch.Generator().manual_seed(0)
    picks = [K.kis_select(A, G, 2, gen).tolist() for _ in range(50)]
    assert all(4 in p for p in picks)
    assert all(7 not in p for p in picks)
    # reproducible with a seeded generator, and without replacement
    a = K.kis_select(A, G, 6, torch.Generator().manual_seed(5))
    b = K.kis_select(A, G, 6, torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and len(set(a.tolist())) == 6


def test_kis_all_zero_scores_fall_back_to_uniform():
    A = torch.zeros(6, 3, dtype=torch.float64)
    G = torch.randn(6, 2, dtype=torch.float64)
    idx = K.kis_select(A, G, 4, torch.Generator().manual_seed(0))
    assert idx.shape == (4,) and len(set(idx.tolist())) == 4


def test_kid_matches_dense_weighted_fisher():
    # KID = exact (F_W + lambda I)^{-1} grad with F_W = (1/n) U_S^T W U_S
    A, G, grad = _factors(10, 3, 2)
    idx, W = K.kid_select(A, G, 4)
    lam = 0.2
    got = K.kid_direction(A, G, grad, lam, 4)
    US = torch.stack([torch.outer(G[i], A[i]).reshape(-1) for i in idx.tolist()])
    F = US.T @ W @ US / 10
    ref = torch.linalg.solve(F + lam * torch.eye(F.shape[0], dtype=torch.float64), grad.reshape(-1))
    torch.testing.assert_close(got, ref.reshape(grad.shape), rtol=1e-8, atol=1e-10)


def test_kid_exact_when_kernel_has_low_rank():
    # rows that are scaled copies of 3 distinct rows (the largest first in K_ii order):
    # a rank-3 kernel, so KID with r = 3 is exact
    base_A, base_G, grad = _factors(3, 4, 3)
    sel = torch.tensor([0, 1, 2, 0, 1, 2, 2, 0])
    scale = torch.tensor([10.0, 10.0, 10.0, 1.0, 0.5, 0.2, 1.0, 0.7], dtype=torch.float64)
    A, G = base_A[sel] * scale.unsqueeze(1), base_G[sel]
    ref = K.sngd_direction(A, G, grad, 0.1)
    got = K.kid_direction(A, G, grad, 0.1, 3)
    torch.testing.assert_close(got, ref, rtol=1e-7, atol=1e-9)


def test_kid_error_decreases_with_rank():
    A, G, grad = _factors(40, 6, 4, seed=2)
    A = A * torch.logspace(0, -2, 40, dtype=torch.float64).unsqueeze(1)  # decaying spectrum
    ref = K.sngd_direction(A, G, grad, 1e-2)
    errs = [
        float((K.kid_direction(A, G, grad, 1e-2, r) - ref).norm() / ref.norm()) for r in (4, 20, 40)
    ]
    assert errs[2] < 1e-8 and errs[1] < errs[0]


def test_kid_core_blocks():
    W1 = torch.tensor([[2.0, 0.0], [0.0, 4.0]], dtype=torch.float64)
    W2 = torch.tensor([[1.0]], dtype=torch.float64)
    core = K.kid_core([W1, W2], 0.5, 6)
    expect = torch.diag(torch.tensor([0.5, 0.25, 1.0], dtype=torch.float64)) * (0.5 * 6 / 3)
    torch.testing.assert_close(core, expect)


def test_inputs_not_modified():
    A, G, grad = _factors(6, 3, 2)
    copies = [t.clone() for t in (A, G, grad)]
    K.kid_direction(A, G, grad, 0.1, 3)
    K.kis_direction(A, G, grad, 0.1, 3)
    for t, c in zip((A, G, grad), copies, strict=True):
        assert torch.equal(t, c)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"damping": 0.0}, "damping must be a finite number > 0"),
        ({"damping": -1.0}, "damping must be a finite number > 0"),
        ({"damping": float("nan")}, "damping must be a finite number > 0"),
        ({"damping": float("inf")}, "damping must be a finite number > 0"),
        ({"rank": 0}, r"rank must be an integer in \[1, n\] = \[1, 6\]"),
        ({"rank": 7}, r"rank must be an integer in \[1, n\] = \[1, 6\]"),
        ({"rank": 2.0}, r"rank must be an integer in \[1, n\]"),
        ({"grad": torch.zeros(3, 3, dtype=torch.float64)}, r"grad must have shape \(d_out, d_in\)"),
        ({"G": torch.zeros(5, 2, dtype=torch.float64)}, "G must have as many rows as A"),
        ({"G": torch.zeros(6, 2, dtype=torch.float32)}, "G must have the dtype and device of A"),
        ({"A": torch.zeros(6, 3, dtype=torch.int64)}, "A must have dtype float32 or float64"),
        ({"A": torch.zeros(6, 3, 1, dtype=torch.float64)}, "A must be a 2-D tensor"),
    ],
)
@pytest.mark.parametrize("fn", ["kis", "kid"])
def test_bad_arguments(kwargs, match, fn):
    A, G, grad = _factors(6, 3, 2)
    args = {"A": A, "G": G, "grad": grad, "damping": 0.1, "rank": 3}
    args.update(kwargs)
    f = K.kis_direction if fn == "kis" else K.kid_direction
    with pytest.raises(ValueError, match=match):
        f(**args)


def test_sngd_bad_damping():
    A, G, grad = _factors(4, 3, 2)
    with pytest.raises(ValueError, match="damping"):
        K.sngd_direction(A, G, grad, 0)
    with pytest.raises(TypeError, match="A must be a torch.Tensor"):
        K.sngd_direction(A.numpy(), G, grad, 0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cuda_matches_cpu(dtype):
    A, G, grad = _factors(16, 5, 4, dtype=dtype)
    for fn in (
        lambda a, g, d: K.sngd_direction(a, g, d, 0.1),
        lambda a, g, d: K.kid_direction(a, g, d, 0.1, 5),
    ):
        cpu = fn(A, G, grad)
        gpu = fn(A.cuda(), G.cuda(), grad.cuda()).cpu()
        tol = 1e-8 if dtype == torch.float64 else 1e-3
        torch.testing.assert_close(gpu, cpu, rtol=tol, atol=tol)
    idx = K.kis_select(A.cuda(), G.cuda(), 5, torch.Generator(device="cuda").manual_seed(0))
    assert idx.device.type == "cuda" and idx.shape == (5,)
    idx = K.kis_select(A.cuda(), G.cuda(), 5, torch.Generator().manual_seed(0))
    assert idx.device.type == "cuda"
