"""The preconditioner on Linear and Conv2d against the kernels applied by hand."""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from async_spark.hylo import kernels as K
from async_spark.hylo.preconditioner import HyLo
from async_spark.hylo.schedules import GeometricDamping


class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, kernel_size=(1, 3), padding=(0, 1), stride=(1, 2))
        self.fc = nn.Linear(3 * 4, 4, bias=False)
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        h = torch.tanh(self.conv(x))
        h = torch.tanh(self.fc(h.flatten(1)))
        return self.out(h)


def _data(n=10, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, 1, 8, generator=g, dtype=dtype)
    y = torch.randint(0, 3, (n,), generator=g)
    return x, y


def _model(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return Tiny().to(dtype)


def _by_hand(model, x, y):
    """Per-layer A, G and gradient matrices built without hooks."""
    acts = {}
    model.zero_grad()
    c = model.conv(x)
    c.retain_grad()
    h1 = torch.tanh(c)
    flat = h1.flatten(1)
    f = model.fc(flat)
    f.retain_grad()
    h2 = torch.tanh(f)
    o = model.out(h2)
    o.retain_grad()
    F.cross_entropy(o, y).backward()
    n = x.shape[0]
    patches = F.unfold(x, (1, 3), padding=(0, 1), stride=(1, 2)).mean(2)
    acts["conv"] = (
        torch.cat([patches, torch.ones(n, 1, dtype=x.dtype)], 1),
        c.grad.sum((2, 3)) * n,
        torch.cat([model.conv.weight.grad.reshape(3, -1), model.conv.bias.grad[:, None]], 1),
    )
    acts["fc"] = (flat.detach(), f.grad * n, model.fc.weight.grad.clone())
    acts["out"] = (
        torch.cat([h2.detach(), torch.ones(n, 1, dtype=x.dtype)], 1),
        o.grad * n,
        torch.cat([model.out.weight.grad, model.out.bias.grad[:, None]], 1),
    )
    return acts


def _precond_grads(model):
    return {
        "conv": torch.cat(
            [model.conv.weight.grad.reshape(3, -1), model.conv.bias.grad[:, None]], 1
        ),
        "fc": model.fc.weight.grad.clone(),
        "out": torch.cat([model.out.weight.grad, model.out.bias.grad[:, None]], 1),
    }


def _run(model, precond, x, y):
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    precond.step()
    return _precond_grads(model)


@pytest.mark.parametrize("method", ["sngd", "kid"])
def test_matches_kernels_by_hand(method):
    x, y = _data()
    model = _model()
    hand = _by_hand(model, x, y)
    precond = HyLo(model, method=method, rank_ratio=0.4, damping=0.05)
    got = _run(model, precond, x, y)
    for name, (A, G, grad) in hand.items():
        if method == "sngd":
            ref = K.sngd_direction(A, G, grad, 0.05)
        else:
            ref = K.kid_direction(A, G, grad, 0.05, math.ceil(0.4 * 10))
        torch.testing.assert_close(got[name], ref, rtol=1e-9, atol=1e-11)
    assert precond.last_methods == {"conv": method, "fc": method, "out": method}


def test_kis_matches_kernels_by_hand_with_same_generator():
    x, y = _data()
    model = _model()
    hand = _by_hand(model, x, y)
    precond = HyLo(model, method="kis", rank_ratio=0.3, damping=0.1, seed=7)
    got = _run(model, precond, x, y)
    gen = torch.Generator().manual_seed(7)
    for name in ("conv", "fc", "out"):  # layers are reduced in registration order
        A, G, grad = hand[name]
        ref = K.kis_direction(A, G, grad, 0.1, 3, generator=gen)
        torch.testing.assert_close(got[name], ref, rtol=1e-9, atol=1e-11)


def test_linear_layer_matches_dense_fisher():
    # a single Linear layer, n < d: SNGD equals the explicit (F + lambda I)^{-1} grad
    torch.manual_seed(0)
    lin = nn.Linear(4, 3).double()
    x = torch.randn(5, 4, dtype=torch.float64)
    y = torch.randint(0, 3, (5,))
    precond = HyLo(lin, method="sngd", damping=0.2)
    lin.zero_grad()
    out = lin(x)
    F.cross_entropy(out, y).backward()
    grad = torch.cat([lin.weight.grad, lin.bias.grad[:, None]], 1).clone()
    # per-sample gradients from autograd, one sample at a time
    U = []
    for i in range(5):
        lin.zero_grad()
        F.cross_entropy(lin(x[i : i + 1]), y[i : i + 1]).backward()
        U.append(torch.cat([lin.weight.grad, lin.bias.grad[:, None]], 1).reshape(-1))
    U = torch.stack(U)
    Fm = U.T @ U / 5
    ref = torch.linalg.solve(Fm + 0.2 * torch.eye(15, dtype=torch.float64), grad.reshape(-1))
    lin.zero_grad()
    F.cross_entropy(lin(x), y).backward()
    precond.step()
    got = torch.cat([lin.weight.grad, lin.bias.grad[:, None]], 1)
    torch.testing.assert_close(got.reshape(-1), ref, rtol=1e-9, atol=1e-11)


def test_inverse_reused_between_updates_and_eval_mode_inactive():
    x, y = _data()
    model = _model()
    precond = HyLo(model, method="sngd", damping=0.1, inv_update_steps=3)
    _run(model, precond, x, y)
    inv0 = precond.layers[0].inverse.clone()
    x2, y2 = _data(seed=1)
    _run(model, precond, x2, y2)  # step 1: no capture, same inverse
    assert torch.equal(precond.layers[0].inverse, inv0)
    assert precond.inverse_updates == 1
    model.eval()
    with torch.no_grad():
        model(x2)
    assert all(layer.A is None for layer in precond.layers)
    model.train()
    _run(model, precond, x2, y2)  # step 2
    _run(model, precond, x2, y2)  # step 3: update
    assert precond.inverse_updates == 2
    assert not torch.equal(precond.layers[0].inverse, inv0)


def test_batch_smaller_than_rank():
    x, y = _data(n=2)
    model = _model()
    precond = HyLo(model, method="kid", rank_ratio=1.0, damping=0.1)
    got = _run(model, precond, x, y)
    ref_model = _model()
    ref = _run(ref_model, HyLo(ref_model, method="sngd", damping=0.1), x, y)
    for k in got:
        torch.testing.assert_close(got[k], ref[k])
    # rank_ratio * n < 1 still keeps one row
    x1, y1 = _data(n=1)
    p = HyLo(_model(), method="kis", rank_ratio=0.1, damping=0.1)
    _run(p.model, p, x1, y1)
    assert p.layers[0].A_all.shape[0] == 1


def test_skip_layers_and_explicit_layers():
    model = _model()
    p = HyLo(model, skip_layers=["fc"])
    assert [layer.name for layer in p.layers] == ["conv", "out"]
    p.remove_hooks()
    p = HyLo(model, skip_layers=[nn.Conv2d])
    assert [layer.name for layer in p.layers] == ["fc", "out"]
    p.remove_hooks()
    p = HyLo(model, layers=[model.out, "fc"])
    assert [layer.name for layer in p.layers] == ["out", "fc"]
    x, y = _data()
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    conv_grad = model.conv.weight.grad.clone()
    p.step()
    assert torch.equal(model.conv.weight.grad, conv_grad)  # not preconditioned


def test_hybrid_auto_rule_logs_methods():
    x, y = _data()
    model = _model()
    p = HyLo(model, method="hybrid", switch="auto", switch_threshold=1e9, damping=0.1)
    _run(model, p, x, y)
    assert set(p.last_methods.values()) == {"kid"}  # first update: no history -> KID
    _run(model, p, x, y)
    assert set(p.last_methods.values()) == {"kis"}  # change below the huge threshold
    assert p.method_counts["fc"] == {"kid": 1, "kis": 1}


def test_hybrid_epoch_windows():
    x, y = _data()
    model = _model()
    p = HyLo(model, method="hybrid", switch="epochs", kid_epochs=[(0, 1), (3, 4)], damping=0.1)
    seen = []
    for epoch in range(5):
        p.set_epoch(epoch)
        _run(model, p, x, y)
        seen.append(p.last_methods["out"])
    assert seen == ["kid", "kis", "kis", "kid", "kis"]


def test_damping_schedule_is_used():
    sched = GeometricDamping(start=1.0, target=0.1, warmup_steps=1, decay_updates=2)
    x, y = _data()
    model = _model()
    p = HyLo(model, method="sngd", damping=sched)
    for _ in range(3):
        _run(model, p, x, y)
    assert p.layers[0].damping == pytest.approx(sched(2))
    assert sched(0) == 1.0 and sched(1) < 1.0


def test_kl_clip_scales_directions():
    x, y = _data()
    m1, m2 = _model(), _model()
    g1 = _run(m1, HyLo(m1, method="sngd", damping=0.01), x, y)
    p2 = HyLo(m2, method="sngd", damping=0.01, kl_clip=1e-8, lr=0.1)
    g2 = _run(m2, p2, x, y)
    assert p2.last_kl_scale < 1.0
    for k in g1:
        torch.testing.assert_close(g2[k], g1[k] * p2.last_kl_scale)


def test_state_dict_round_trip():
    x, y = _data()
    model = _model()
    p = HyLo(model, method="hybrid", rank_ratio=0.5, damping=0.1, inv_update_steps=2)
    for _ in range(3):
        _run(model, p, x, y)
    buf = io.BytesIO()
    torch.save(p.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    model2 = _model()
    model2.load_state_dict(model.state_dict())
    q = HyLo(model2, method="hybrid", rank_ratio=0.5, damping=0.1, inv_update_steps=2)
    q.load_state_dict(state)
    assert q.steps == 3 and q.inverse_updates == 2
    x2, y2 = _data(seed=3)
    for _ in range(2):  # step 3 reuses, step 4 updates (KIS sampling uses the restored RNG)
        a = _run(model, p, x2, y2)
        b = _run(model2, q, x2, y2)
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)
    assert p.method_counts == q.method_counts
    with pytest.raises(ValueError, match="layers"):
        HyLo(_model(), skip_layers=["fc"]).load_state_dict(state)


def test_float32_model():
    x, y = _data(dtype=torch.float32)
    model = _model(dtype=torch.float32)
    p = HyLo(model, method="kid", rank_ratio=0.5, damping=0.1, inverse_dtype=torch.float64)
    g = _run(model, p, x, y)
    assert all(v.dtype == torch.float32 and torch.isfinite(v).all() for v in g.values())
    assert p.layers[0].inverse.dtype == torch.float64


class WithDepthwise(nn.Module):
    def __init__(self):
        super().__init__()
        self.dw = nn.Conv2d(4, 4, 3, groups=4)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"damping": 0.0}, "damping must be a finite number > 0"),
        ({"damping": -0.1}, "damping must be a finite number > 0"),
        ({"rank_ratio": 0.0}, r"rank_ratio must be a number in \(0, 1\]"),
        ({"rank_ratio": 1.5}, r"rank_ratio must be a number in \(0, 1\]"),
        ({"method": "kfac"}, "method must be one of"),
        ({"inv_update_steps": 0}, "inv_update_steps must be an integer >= 1"),
        ({"switch": "sometimes"}, "switch must be one of"),
        ({"assignment": "random"}, "assignment must be one of"),
        ({"kl_clip": 0.001}, "lr must be given"),
        ({"kl_clip": -1.0, "lr": 0.1}, "kl_clip must be a finite number > 0"),
        ({"layers": ["bn"]}, "layers: 'bn' is a BatchNorm2d; supported are nn.Linear"),
        ({"layers": ["dw"]}, "layers: 'dw' is a Conv2d; supported"),
        ({"layers": ["nope"]}, "layers: no module named 'nope'"),
        ({"layers": [nn.Linear(2, 2)]}, "is not a module of the model"),
        ({"skip_layers": ["fc"]}, "no supported layer left"),
        ({"inverse_dtype": torch.float16}, "inverse_dtype must be"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HyLo(WithDepthwise(), **kwargs)


def test_depthwise_conv_skipped_by_default():
    p = HyLo(WithDepthwise())
    assert [layer.name for layer in p.layers] == ["fc"]
