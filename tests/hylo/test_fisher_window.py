"""``fisher_window``: the kernel over the last W inverse updates' rows, against a dense Fisher."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from async_spark.hylo.preconditioner import HyLo
from async_spark.hylo.schedules import EpochWindowRule


def _batch(seed: int, n: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g, dtype=torch.float64), torch.randint(
        0, 3, (n,), generator=g
    )


def _flat_grad(lin: nn.Linear) -> np.ndarray:
    assert lin.weight.grad is not None and lin.bias.grad is not None
    return torch.cat([lin.weight.grad, lin.bias.grad[:, None]], 1).reshape(-1).numpy().copy()


def _per_sample(lin: nn.Linear, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Per-sample gradients by autograd, one sample at a time (rows u_i)."""
    rows = []
    for i in range(x.shape[0]):
        lin.zero_grad()
        F.cross_entropy(lin(x[i : i + 1]), y[i : i + 1]).backward()
        rows.append(_flat_grad(lin))
    return np.stack(rows)


def _step(lin: nn.Linear, precond: HyLo, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    lin.zero_grad()
    F.cross_entropy(lin(x), y).backward()
    precond.step()
    return _flat_grad(lin)


@pytest.mark.parametrize("window", [2, 3])
def test_sngd_window_matches_dense_average_fisher(window):
    # a Linear layer (no optimizer step: the weights stay put); after each step the direction is
    # (F_bar + lambda I)^{-1} grad, F_bar the mean of the last `window` batches' empirical Fishers
    torch.manual_seed(0)
    lin = nn.Linear(4, 3).double()
    precond = HyLo(lin, method="sngd", damping=0.2, fisher_window=window)
    fishers = []
    for step in range(5):
        x, y = _batch(step)
        U = _per_sample(lin, x, y)
        fishers.append(U.T @ U / x.shape[0])
        lin.zero_grad()
        F.cross_entropy(lin(x), y).backward()
        grad = _flat_grad(lin)
        F_bar = np.mean(fishers[-window:], axis=0)
        ref = np.linalg.solve(F_bar + 0.2 * np.eye(15), grad)
        got = _step(lin, precond, x, y)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-11)
        assert precond.layers[0].A_all.shape[0] == 5 * min(step + 1, window)


def _twin_linears() -> tuple[nn.Linear, nn.Linear]:
    """Two float64 Linear layers with the same weights."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 3).double()
    lin2 = nn.Linear(4, 3).double()
    lin2.load_state_dict(lin.state_dict())
    return lin, lin2


def test_window_of_one_is_the_default():
    lin, lin2 = _twin_linears()
    a = HyLo(lin, method="kis", rank_ratio=0.6, damping=0.1, seed=3)
    b = HyLo(lin2, method="kis", rank_ratio=0.6, damping=0.1, seed=3, fisher_window=1)
    for step in range(3):
        x, y = _batch(step)
        np.testing.assert_array_equal(_step(lin, a, x, y), _step(lin2, b, x, y))


def test_kid_window_at_full_rank_equals_sngd_window():
    lin, lin2 = _twin_linears()
    kid = HyLo(lin, method="kid", rank_ratio=1.0, damping=0.1, fisher_window=3)
    sngd = HyLo(lin2, method="sngd", damping=0.1, fisher_window=3)
    for step in range(4):
        x, y = _batch(step)
        np.testing.assert_allclose(
            _step(lin, kid, x, y), _step(lin2, sngd, x, y), rtol=1e-7, atol=1e-10
        )
    assert kid.layers[0].A_all.shape[0] == 15


def test_hybrid_window_mixes_kid_and_kis_captures():
    # KID in epoch 0, KIS afterwards: the window keeps both; at full rank every capture is exact,
    # so the mixed window equals SNGD's window
    lin, lin2 = _twin_linears()
    rule = EpochWindowRule([(0, 1)])
    p = HyLo(lin, method="hybrid", switch=rule, rank_ratio=1.0, damping=0.1, fisher_window=3)
    q = HyLo(lin2, method="sngd", damping=0.1, fisher_window=3)
    for step in range(5):
        if step == 2:
            p.set_epoch(1)
        x, y = _batch(step)
        np.testing.assert_allclose(_step(lin, p, x, y), _step(lin2, q, x, y), rtol=1e-7, atol=1e-10)
    assert [c.method for c in p.layers[0].window] == ["kis", "kis", "kis"]
    assert p.layers[0].A_all.shape[0] == 15


def test_hybrid_window_at_reduced_rank_keeps_every_capture():
    torch.manual_seed(0)
    lin = nn.Linear(4, 3).double()
    rule = EpochWindowRule([(0, 1)])
    p = HyLo(lin, method="hybrid", switch=rule, rank_ratio=0.4, damping=0.1, fisher_window=4)
    for step in range(4):
        if step == 2:
            p.set_epoch(1)
        got = _step(lin, p, *_batch(step))
        assert np.isfinite(got).all()
    layer = p.layers[0]
    assert [c.method for c in layer.window] == ["kid", "kid", "kis", "kis"]
    assert layer.A_all.shape[0] == 8  # four captures of r = ceil(0.4 * 5) = 2 rows
    assert layer.inverse.shape == (8, 8)


@pytest.mark.parametrize("method", ["kid", "kis", "hybrid"])
def test_state_dict_round_trip_keeps_the_window(method):
    def make(seed_model: int = 0) -> tuple[nn.Linear, HyLo]:
        torch.manual_seed(seed_model)
        lin = nn.Linear(4, 3).double()
        return lin, HyLo(lin, method=method, rank_ratio=0.6, damping=0.1, fisher_window=3, seed=5)

    lin, p = make()
    for step in range(4):
        _step(lin, p, *_batch(step))
    buf = io.BytesIO()
    torch.save(p.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    lin2, q = make(seed_model=1)
    lin2.load_state_dict(lin.state_dict())
    q.load_state_dict(state)
    assert [c.method for c in q.layers[0].window] == [c.method for c in p.layers[0].window]
    assert method == "hybrid" or len(q.layers[0].window) == 3
    for step in range(4, 7):
        x, y = _batch(step)
        np.testing.assert_array_equal(_step(lin, p, x, y), _step(lin2, q, x, y))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_window_refused(bad):
    with pytest.raises(ValueError, match="fisher_window must be an integer >= 1"):
        HyLo(nn.Linear(2, 2), fisher_window=bad)


def test_non_finite_capture_skips_the_update_and_keeps_the_inverses(caplog):
    torch.manual_seed(0)
    lin = nn.Linear(4, 3).double()
    p = HyLo(lin, method="kid", rank_ratio=0.6, damping=0.1, fisher_window=2)
    _step(lin, p, *_batch(0))
    inverse, rows = p.layers[0].inverse.clone(), p.layers[0].A_all.clone()
    x, y = _batch(1)
    x[2, 1] = float("nan")  # a diverging run: non-finite inputs and output gradients
    with caplog.at_level("WARNING", logger="async_spark.hylo.preconditioner"):
        _step(lin, p, x, y)  # no LinAlgError from the reduction
    assert p.inverse_updates == 1 and p.steps == 2
    assert torch.equal(p.layers[0].inverse, inverse) and torch.equal(p.layers[0].A_all, rows)
    assert len(p.layers[0].window) == 1
    assert "inverse update skipped" in caplog.text
    _step(lin, p, *_batch(2))  # finite again: updates resume
    assert p.inverse_updates == 2 and len(p.layers[0].window) == 2


def test_window_keeps_its_own_copies_and_restarts_on_a_dtype_change():
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)  # float32
    p = HyLo(lin, method="kid", rank_ratio=0.6, damping=0.1, fisher_window=3)
    x, y = _batch(0)
    lin.zero_grad()
    F.cross_entropy(lin(x.float()), y).backward()
    p.step()
    for w in p.layers[0].window[0].weights:  # not a view into the update's gathered buffer
        assert w.untyped_storage().nbytes() == w.numel() * w.element_size()
    lin.double()
    _step(lin, p, *_batch(1))
    assert [c.A.dtype for c in p.layers[0].window] == [torch.float64]
