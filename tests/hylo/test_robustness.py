"""Layers HyLo cannot precondition are skipped with a logged reason, never a crash (frozen
layers while frozen, layers without a gradient, unbatched and empty batches too); half
precision (autocast, bfloat16 models) is captured and inverted in float32."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from async_spark.hylo import kernels as K
from async_spark.hylo.layers import grad_matrix
from async_spark.hylo.preconditioner import HyLo


class Mixed(nn.Module):
    """Every kind of layer the preconditioner must leave alone, beside two it handles."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)  # supported
        self.grouped = nn.Conv2d(4, 4, 3, padding=1, groups=2)
        self.reflect = nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect")
        self.same = nn.Conv2d(4, 4, 3, padding="same")
        self.up = nn.ConvTranspose2d(4, 4, 1)
        self.conv1d = nn.Conv1d(4, 4, 1)
        self.bn = nn.BatchNorm2d(4)
        self.shared = nn.Linear(4, 4)  # called twice per forward
        self.lazy = nn.LazyLinear(3)  # uninitialized when HyLo is built
        self.head = nn.Linear(3, 3)  # supported

    def forward(self, x):
        h = torch.tanh(self.conv(x))
        h = self.bn(self.same(self.reflect(self.grouped(h))))
        h = self.up(h)
        h = self.conv1d(h.flatten(2)).mean(2)
        h = torch.tanh(self.shared(torch.tanh(self.shared(h))))
        return self.head(torch.tanh(self.lazy(h)))


def _batch(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 2, 5, 5, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_unsupported_layers_are_skipped_with_a_logged_reason(caplog):
    torch.manual_seed(0)
    model = Mixed()
    with caplog.at_level(logging.INFO, logger="async_spark.hylo.preconditioner"):
        p = HyLo(model, method="kid", rank_ratio=0.5, damping=0.1)
    assert [ly.name for ly in p.layers] == ["conv", "shared", "head"]
    expected = {
        "grouped": "grouped convolution (groups=2)",
        "reflect": "padding_mode='reflect'",
        "same": "padding='same'",
        "up": "ConvTranspose2d is not supported",
        "conv1d": "Conv1d is not supported",
        "lazy": "lazy module",
    }
    assert set(p.skipped_layers) == set(expected)  # BatchNorm's scale is not a layer to report
    for name, why in expected.items():
        assert why in p.skipped_layers[name]
        assert any(name in r.getMessage() and why in r.getMessage() for r in caplog.records)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="async_spark.hylo.preconditioner"):
        for step in range(3):  # trains: no exception from any of them
            x, y = _batch(seed=step)
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            raw = model.shared.weight.grad.clone()
            p.step()
            # the shared layer was found at the first forward and keeps its plain gradient
            torch.testing.assert_close(model.shared.weight.grad, raw, rtol=0, atol=0)
            opt.step()
    assert "shared weights" in p.skipped_layers["shared"]
    warned = [r.getMessage() for r in caplog.records if "'shared'" in r.getMessage()]
    assert len(warned) == 1 and "shared weights" in warned[0]  # once, not at every step
    assert p.last_methods["conv"] == p.last_methods["head"] == "kid"
    assert p.layers[1].inverse is None and p.inverse_updates == 3


def test_gradient_accumulation_is_not_mistaken_for_shared_weights():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    p = HyLo(model, method="sngd", damping=0.1)
    for _ in range(2):  # two micro-batches, a backward each, then one step
        x = torch.randn(6, 4)
        F.cross_entropy(model(x), torch.randint(0, 2, (6,))).backward()
    p.step()
    assert p.skipped_layers == {} and p.layers[0].inverse is not None


def test_a_lazy_layer_initialized_before_hylo_is_preconditioned():
    torch.manual_seed(0)
    model = nn.Sequential(nn.LazyLinear(5), nn.Tanh(), nn.Linear(5, 2))
    model(torch.randn(2, 4))  # initializes it: now an nn.Linear(4, 5)
    p = HyLo(model, method="sngd", damping=0.1)
    assert [ly.name for ly in p.layers] == ["0", "2"] and p.layers[0].d_in == 5


def test_rows_that_do_not_match_the_weight_are_skipped_not_raised(caplog):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 2))
    p = HyLo(model, method="kis", damping=0.1, rank_ratio=0.5)
    x = torch.randn(6, 4)
    F.cross_entropy(model(x), torch.randint(0, 2, (6,))).backward()
    p.layers[0].G = p.layers[0].G[:3]  # as a hook that saw another batch would leave them
    with caplog.at_level(logging.WARNING, logger="async_spark.hylo.preconditioner"):
        p.step()
    assert "one row per sample" in p.skipped_layers["0"]
    assert p.layers[1].inverse is not None


def test_an_inverse_that_cannot_be_computed_is_zero_not_an_exception(caplog):
    # rows so large that the kernel overflows: no LinAlgError (the run's loss then says it
    # diverged); a zero inverse makes the direction grad / damping
    A = torch.full((4, 3), 1e30)
    G = torch.full((4, 2), 1e30)
    with caplog.at_level(logging.WARNING, logger="async_spark.hylo.kernels"):
        C = K.woodbury_inverse(A, G, 0.5)
    assert torch.equal(C, torch.zeros(4, 4)) and "could not be inverted" in caplog.text


def test_kid_weights_that_defeat_cholesky_fall_back():
    T = torch.tensor([[1e10, 1.0], [1e10, 1.0]])
    W = torch.eye(2) + T @ T.T  # float32: the identity is lost
    (inv,) = K.kid_block_inverses([W])
    assert torch.isfinite(inv).all() and inv.dtype == torch.float32


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.fc = nn.Linear(3 * 25, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def test_inverses_are_float32_under_autocast():
    torch.manual_seed(0)
    model = Small()
    p = HyLo(model, method="kid", rank_ratio=0.5, damping=0.1)
    x, y = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
        assert out.dtype == torch.bfloat16
        F.cross_entropy(out, y).backward()
        A = {ly.name: ly.A for ly in p.layers}
        G = {ly.name: ly.G for ly in p.layers}
        grads = {ly.name: grad_matrix(ly) for ly in p.layers}
        p.step()  # inside autocast, as a user's loop would call it
    for ly in p.layers:
        assert A[ly.name].dtype == G[ly.name].dtype == torch.float32  # captured in float32
        assert ly.inverse.dtype == ly.A_all.dtype == torch.float32
        # the same direction as the kernels give in float32 outside autocast
        r = max(1, -(-A[ly.name].shape[0] // 2))
        ref = K.kid_direction(A[ly.name], G[ly.name], grads[ly.name], 0.1, r)
        got = grad_matrix(ly)
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_a_bfloat16_model_is_preconditioned_in_float32():
    torch.manual_seed(0)
    model = Small().to(torch.bfloat16)
    p = HyLo(model, method="hybrid", rank_ratio=0.5, damping=0.1)
    x, y = _batch()
    F.cross_entropy(model(x.to(torch.bfloat16)).float(), y).backward()
    p.step()
    assert all(ly.inverse.dtype == torch.float32 for ly in p.layers)
    assert model.fc.weight.grad.dtype == torch.bfloat16
    assert torch.isfinite(model.fc.weight.grad.float()).all()


@pytest.mark.parametrize("method", ["kis", "kid"])
def test_float16_factors_are_inverted_in_float32(method):
    # the captured rows of a half model: the kernels refuse float16, the hooks hand them
    # float32, so nothing on the way raises
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2)).half()
    p = HyLo(model, method=method, rank_ratio=0.5, damping=0.1)
    x = torch.randn(6, 4).half()
    F.cross_entropy(model(x).float(), torch.randint(0, 2, (6,))).backward()
    p.step()
    assert all(ly.inverse.dtype == torch.float32 for ly in p.layers)
    assert model[0].weight.grad.dtype == torch.float16


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 5), nn.Tanh(), nn.Linear(5, 2))


def _train_step(model, p, seed):
    x, y = torch.randn(6, 4, generator=torch.Generator().manual_seed(seed)), torch.arange(6) % 2
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    p.step()


def test_a_frozen_layer_captures_nothing_and_is_listed_until_unfrozen(caplog):
    from async_spark.hylo.preconditioner import FROZEN

    model = _mlp()
    p = HyLo(model, method="kid", rank_ratio=0.5, damping=0.1)
    _train_step(model, p, 0)
    assert p.layers[1].inverse is not None and p.skipped_layers == {}
    model[2].requires_grad_(False)  # frozen after it had an inverse
    with caplog.at_level(logging.INFO, logger="async_spark.hylo.preconditioner"):
        for step in range(1, 4):
            _train_step(model, p, step)
            # no rows, no inverse, no window: nothing is computed for a weight that won't move
            assert p.layers[1].inverse is None and len(p.layers[1].window) == 0
            assert model[2].weight.grad is None
            assert p.last_methods == {"0": "kid", "2": "sgd", "4": "kid"}
    assert p.skipped_layers == {"2": FROZEN}
    said = [r.getMessage() for r in caplog.records if "'2'" in r.getMessage()]
    assert len(said) == 1 and FROZEN in said[0]  # once, not at every step
    model[2].requires_grad_(True)
    _train_step(model, p, 4)
    assert p.skipped_layers == {} and p.last_methods["2"] == "kid"
    # frozen from the start: listed at construction, trains, is never preconditioned
    model = _mlp()
    model[2].weight.requires_grad_(False)  # the bias alone still trains, with its plain gradient
    p = HyLo(model, method="kis", rank_ratio=0.5, damping=0.1)
    assert p.skipped_layers == {"2": FROZEN}
    _train_step(model, p, 0)
    assert p.layers[1].inverse is None and model[2].bias.grad is not None
    assert p.layers[0].inverse is not None and p.inverse_updates == 1


class Branchy(nn.Module):
    """A layer used only on some steps, and one whose output does not reach the loss."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 5)
        self.extra = nn.Linear(5, 5)
        self.probe = nn.Linear(5, 3)  # its output is only logged
        self.head = nn.Linear(5, 2)
        self.use_extra = False

    def forward(self, x):
        h = torch.tanh(self.a(x))
        if self.use_extra:
            h = torch.tanh(self.extra(h))
        self.probe_out = self.probe(h)
        return self.head(h)


def test_layers_without_a_gradient_keep_it_none_and_the_others_are_preconditioned():
    torch.manual_seed(0)
    model = Branchy()
    p = HyLo(model, method="sngd", damping=0.1)
    for step in range(4):
        model.use_extra = step == 2
        _train_step(model, p, step)
        assert model.probe.weight.grad is None
        assert (model.extra.weight.grad is None) == (step != 2)
        assert p.last_methods["a"] == p.last_methods["head"] == "sngd"
        assert p.last_methods["probe"] == "sgd"
        assert p.last_methods["extra"] == ("sngd" if step == 2 else "sgd")
    assert p.skipped_layers == {} and p.layers[2].inverse is None  # probe: no rows ever
    assert p.method_counts["extra"] == {"sgd": 3, "sngd": 1}


def test_an_unbatched_call_is_a_batch_of_one():
    def grads(batched):
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(2, 3, 3),
            nn.Tanh(),
            nn.Flatten(-3),
            nn.Linear(27, 4),
            nn.Tanh(),
            nn.Linear(4, 2),
        ).double()
        p = HyLo(model, method="sngd", damping=0.1)
        x = torch.randn(2, 5, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
        out = model(x.unsqueeze(0) if batched else x)  # (1, 2) or (2,)
        F.cross_entropy(out.reshape(1, 2), torch.tensor([1])).backward()
        p.step()
        assert p.last_methods == {"0": "sngd", "3": "sngd", "5": "sngd"}
        return [q.grad.clone() for q in model.parameters()]

    for got, ref in zip(grads(False), grads(True), strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-14)


def test_an_empty_batch_captures_nothing_and_keeps_the_inverses():
    model = nn.Sequential(nn.Conv2d(2, 3, 3), nn.Tanh(), nn.Flatten(), nn.Linear(27, 3))
    p = HyLo(model, method="kid", rank_ratio=0.5, damping=0.1)
    x, y = _batch()
    F.cross_entropy(model(x), y).backward()
    p.step()
    kept = [ly.inverse for ly in p.layers]
    model.zero_grad()
    model(torch.randn(0, 2, 5, 5)).sum().backward()  # e.g. a rank's empty share of a batch
    p.step()
    assert [ly.inverse for ly in p.layers] == kept and p.inverse_updates == 1
    assert p.skipped_layers == {} and torch.equal(model[3].weight.grad, torch.zeros(3, 27))
