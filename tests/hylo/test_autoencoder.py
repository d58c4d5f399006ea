"""The deep autoencoder workload: model, dataset, reconstruction loss through train(), Adam,
the time to a target loss, and the per-model defaults."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from async_spark.hylo import HyLo
from async_spark.hylo.baselines import _per_image_bce
from async_spark.hylo.data import load_dataset
from async_spark.hylo.defaults import RECOMMENDED, recommended
from async_spark.hylo.epochs import LossLog, loss_and_correct
from async_spark.hylo.models import AutoEncoder, autoencoder_sizes, build_model
from async_spark.hylo.train import TrainConfig, train


def test_autoencoder_is_the_classic_mirrored_mlp():
    net = build_model("autoencoder")
    widths = [(m.in_features, m.out_features) for m in net.encoder]
    assert widths == [(784, 1000), (1000, 500), (500, 250), (250, 30)]
    assert [(m.in_features, m.out_features) for m in net.decoder] == [
        (b, a) for a, b in reversed(widths)
    ]
    assert net(torch.rand(3, 784)).shape == (3, 784)
    assert len(HyLo(net).layers) == 8  # every layer is preconditioned
    assert autoencoder_sizes(250) == ((250, 125, 62), 30)
    small = build_model("autoencoder", width=40, activation="sigmoid")
    assert small.activation == "sigmoid" and small.encoder[0].out_features == 40
    custom = AutoEncoder(20, (7, 5), 2)
    assert custom(torch.rand(2, 20)).shape == (2, 20)
    for bad in ({"activation": "tanh"}, {"code": 0}, {"hidden": (4, 0)}):
        with pytest.raises(ValueError):
            AutoEncoder(**bad)


def test_code_layer_is_linear_and_output_is_logits():
    torch.manual_seed(0)
    net = AutoEncoder(6, (5,), 3, activation="sigmoid")
    x = torch.rand(4, 6)
    code = net.encoder[1](torch.sigmoid(net.encoder[0](x)))
    out = net.decoder[1](torch.sigmoid(net.decoder[0](code)))
    torch.testing.assert_close(net(x), out)


def test_digits_dataset_is_real_offline_and_split():
    pytest.importorskip("sklearn")
    d = load_dataset("builtin:digits", "autoencoder")
    assert d.task == "reconstruction"
    assert d.x_train.shape == (1500, 784) and d.x_test.shape == (297, 784)
    assert torch.equal(d.y_train, d.x_train) and 0.0 <= float(d.x_train.min())
    assert float(d.x_train.max()) <= 1.0
    # the split is fixed, and no test image is a training image
    again = load_dataset("builtin:digits", "autoencoder")
    assert torch.equal(again.x_train, d.x_train)
    dist = torch.cdist(d.x_test[:50], d.x_train).min(1).values
    assert bool((dist > 0).all())
    more = load_dataset("builtin:digits", "autoencoder", n_train=2000)
    assert more.x_train.shape == (2000, 784) and torch.equal(more.x_train[:1500], d.x_train)
    assert not torch.equal(more.x_train[1500:], d.x_train[:500])  # shifted copies
    with pytest.raises(ValueError, match="needs model 'autoencoder'"):
        load_dataset("builtin:digits", "cnn1d")
    s = load_dataset("synthetic", "autoencoder", n_train=8, n_test=4)
    assert s.task == "reconstruction" and s.x_train.shape == (8, 784)


def test_reconstruction_loss_is_per_image_and_asdl_reductions_agree():
    g = torch.Generator().manual_seed(0)
    out, y = torch.randn(5, 784, generator=g), torch.rand(5, 784, generator=g)
    loss, correct, count = loss_and_correct("reconstruction", out, y)
    per_pixel = F.binary_cross_entropy_with_logits(out, y)
    assert float(loss) == pytest.approx(784 * float(per_pixel), rel=1e-5)
    assert (correct, count) == (0, 0)
    torch.testing.assert_close(_per_image_bce(out, y), loss)
    torch.testing.assert_close(_per_image_bce(out, y, reduction="sum"), 5 * loss)
    per_image = _per_image_bce(out, y, reduction="none")
    assert per_image.shape == (5,)
    torch.testing.assert_close(per_image.mean(), loss)


def test_loss_log_first_and_sustained_times():
    log = LossLog()
    for s, loss in ((1.0, 400.0), (2.0, 290.0), (3.0, 310.0), (4.0, 280.0), (5.0, math.nan)):
        log.observe(loss, s)
    assert log.time_to(300.0) == 2.0
    assert log.time_to_sustained(300.0) is None  # the NaN at the end counts as above
    log.observe(270.0, 6.0)
    assert log.time_to_sustained(300.0) == 6.0 and log.best == 270.0
    assert log.time_to(None) is None and LossLog().best is None


@pytest.mark.parametrize("optimizer", ["hylo", "adam", "kfac", "smw"])
def test_autoencoder_trains_to_a_target_through_train(optimizer, tmp_path):
    pytest.importorskip("sklearn")
    if optimizer in ("kfac", "smw"):
        pytest.importorskip("asdl")
    cfg = {
        "model": "autoencoder",
        "data": "builtin:digits",
        "optimizer": optimizer,
        "width": 32,
        "epochs": 3,
        "evals_per_epoch": 2,
        "target_loss": 1e9,  # reached at the first evaluation
        "out": str(tmp_path),
    }
    s = train(cfg)
    assert s["test_accuracy"] is None and not s["diverged"]
    evals = s["train_loss_evaluations"]
    assert len(evals) == 6 and all(math.isfinite(v) for _, v in evals)
    assert evals[-1][1] < evals[0][1]  # it learns
    assert s["time_to_target_loss"] == evals[0][0] == s["time_to_sustained_target_loss"]
    assert s["final_train_loss"] == evals[-1][1]
    assert s["best_train_loss"] == min(v for _, v in evals)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["train_set_loss"] == evals[-1][1]
    # stop_at_target ends at the first epoch that reached it
    stopped = train({**cfg, "stop_at_target": True, "out": None})
    assert stopped["epochs_run"] == 1 and stopped["time_to_target_loss"] is not None


def test_adam_is_torch_adam_with_momentum_as_beta1():
    from async_spark.hylo.train import build_optimizers

    net = build_model("autoencoder", width=8)
    cfg = TrainConfig(model="autoencoder", data="synthetic", optimizer="adam", momentum=0.8)
    built = build_optimizers(cfg, net, steps_per_epoch=4)
    assert isinstance(built.optimizer, torch.optim.Adam) and built.preconditioner is None
    group = built.optimizer.param_groups[0]
    assert (
        group["betas"] == (0.8, 0.999) and group["lr"] == recommended("autoencoder", "adam")["lr"]
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"model": "autoencoder", "data": "builtin:mnist1d"}, "needs"),
        ({"model": "cnn1d", "data": "builtin:digits"}, "needs model 'autoencoder'"),
        ({"activation": "tanh"}, "activation must be one of"),
        ({"target_loss": -1.0}, "target_loss must be a finite number > 0"),
        ({"stop_at_target": True}, "stop_at_target needs target_loss"),
        ({"damping": "bogus"}, "damping must be a finite number > 0"),
    ],
)
def test_bad_autoencoder_configs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs).validate()


def test_auto_fields_take_the_models_defaults_and_explicit_values_win():
    for model, rows in RECOMMENDED.items():
        for family in rows:
            optimizer = "hylo" if family == "hylo" else family
            data = "builtin:mnist1d" if model == "cnn1d" else "synthetic"
            r = TrainConfig(model=model, data=data, optimizer=optimizer).resolved()
            rec = recommended(model, optimizer)
            assert (r.damping, r.kl_clip, r.fisher_window, r.warmup_epochs) == (
                rec["damping"],
                rec["kl_clip"],
                rec["fisher_window"],
                rec["warmup_epochs"],
            )
            assert r.lr == rec["lr"]
            r.validate()
    ae = TrainConfig(model="autoencoder", data="builtin:digits", optimizer="kis").resolved()
    assert (ae.damping, ae.kl_clip, ae.fisher_window) == (3.0, 0.01, 10)
    r32 = TrainConfig(model="resnet32", data="synthetic").resolved()
    assert (r32.damping, r32.damping_target, r32.warmup_epochs) == (1.5, 0.1, 5)
    mine = TrainConfig(model="unet", damping=0.5, kl_clip=None, lr=0.2).resolved()
    assert (mine.damping, mine.kl_clip, mine.lr) == (0.5, None, 0.2)
    assert TrainConfig(optimizer="kfac").resolved().fisher_window == 1
