"""Reference models, datasets, the training entry and its CLI arguments."""

from __future__ import annotations

import argparse
import json
import time

import pytest
import torch

from async_spark.cli.hylo import add_hylo_arguments, config_from_args
from async_spark.hylo import HyLo
from async_spark.hylo.data import load_dataset
from async_spark.hylo.epochs import AccuracyLog, epoch_parts, evaluate, run_epoch_in_parts
from async_spark.hylo.models import CNN1D, UNet, build_model, resnet32, resnet50_layer_shapes
from async_spark.hylo.train import TrainConfig, train


def test_reference_models_shapes_and_layers():
    torch.manual_seed(0)
    cnn = CNN1D()
    assert cnn(torch.randn(2, 1, 1, 40)).shape == (2, 10)
    assert [ly.name for ly in HyLo(cnn).layers] == ["conv1", "conv2", "conv3", "linear"]
    r32 = resnet32()
    assert r32(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    convs = [m for m in r32.modules() if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 31 and len(HyLo(r32).layers) == 32
    unet = UNet()
    assert unet(torch.randn(2, 3, 32, 32)).shape == (2, 1, 32, 32)
    shapes = resnet50_layer_shapes()
    assert len(shapes) == 54 and max(s[1] for s in shapes[:-1]) == 4608


def test_width_scales_every_reference_model():
    def largest_layer(net):
        return max(ly.d_in * ly.d_out for ly in HyLo(net).layers)

    for name, shape in (
        ("cnn1d", (2, 1, 1, 40)),
        ("resnet32", (2, 3, 32, 32)),
        ("unet", (2, 3, 32, 32)),
    ):
        default, wide = build_model(name), build_model(name, width=32)
        assert build_model(name, width=None).state_dict().keys() == default.state_dict().keys()
        assert wide(torch.randn(shape)).shape == default(torch.randn(shape)).shape
        assert largest_layer(wide) > largest_layer(default)
    assert build_model("cnn1d", width=64).conv2.weight.shape == (64, 64, 1, 3)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="width must be an integer >= 1"):
            build_model("cnn1d", width=bad)
    with pytest.raises(ValueError, match="model must be one of"):
        build_model("vgg")


def test_datasets():
    pytest.importorskip("mnist1d")
    d = load_dataset("builtin:mnist1d", "cnn1d")
    assert d.x_train.shape == (4000, 1, 1, 40) and d.x_test.shape == (1000, 1, 1, 40)
    assert set(d.y_train.unique().tolist()) == set(range(10))
    s = load_dataset("synthetic", "unet", n_train=4, n_test=2)
    assert s.task == "segmentation" and s.y_train.shape == (4, 1, 32, 32)
    with pytest.raises(ValueError, match="needs model 'cnn1d'"):
        load_dataset("builtin:mnist1d", "unet")


def test_mnist1d_is_generated_once_and_each_load_gets_its_own_tensors():
    pytest.importorskip("mnist1d")
    from async_spark.hylo import data as data_mod

    a = load_dataset("builtin:mnist1d", "cnn1d")
    hits = data_mod._mnist1d_arrays.cache_info().hits
    b = load_dataset("builtin:mnist1d", "cnn1d")
    assert data_mod._mnist1d_arrays.cache_info().hits == hits + 1
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    a.x_train.zero_()  # a caller's in-place change stays in its copy
    assert not torch.equal(a.x_train, b.x_train)
    assert torch.equal(load_dataset("builtin:mnist1d", "cnn1d").x_train, b.x_train)


@pytest.mark.parametrize("optimizer", ["hylo", "sgd", "kfac", "smw"])
def test_train_writes_outputs(optimizer, tmp_path):
    if optimizer in ("kfac", "smw"):
        pytest.importorskip("asdl")
    out = tmp_path / optimizer
    cfg = TrainConfig(
        model="cnn1d",
        data="synthetic",
        optimizer=optimizer,
        epochs=2,
        batch_size=32,
        n_train=64,
        n_test=32,
        inv_update_steps=1,
        damping=0.3,
        lr=0.05,
        out=str(out),
    )
    summary = train(cfg)
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["optimizer"] == optimizer == summary["optimizer"]
    assert on_disk["epochs"] == 2 and on_disk["wall_seconds"] > 0
    assert set(on_disk["time_to_accuracy"]) == {"0.8", "0.85", "0.9"}
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2]
    # the saved model is the trained one: it moved away from the seeded initial weights, and
    # evaluated again on the same test set it gives the reported loss and accuracy
    state = torch.load(out / "model.pt", weights_only=True)
    torch.manual_seed(cfg.seed)
    initial = build_model("cnn1d").state_dict()
    assert state.keys() == initial.keys()
    unmoved = [name for name in initial if torch.equal(state[name], initial[name])]
    assert not unmoved, f"parameters left at their initial values: {unmoved}"
    net = CNN1D()
    net.load_state_dict(state)
    data = load_dataset("synthetic", "cnn1d", seed=cfg.seed, n_train=64, n_test=32)
    loss, acc = evaluate(net, data, torch.device("cpu"), 32)
    assert acc == on_disk["test_accuracy"] == summary["test_accuracy"] == lines[-1]["test_accuracy"]
    assert loss == pytest.approx(lines[-1]["test_loss"], rel=1e-6)
    if optimizer == "hylo":
        assert "methods" in lines[0]


def test_train_builds_the_model_at_the_requested_width(tmp_path):
    summary = train(
        {
            "data": "synthetic",
            "optimizer": "kid",
            "width": 12,
            "epochs": 1,
            "batch_size": 16,
            "n_train": 32,
            "n_test": 16,
            "out": str(tmp_path),
        }
    )
    assert summary["config"]["width"] == 12
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert state["conv2.weight"].shape == (12, 12, 1, 3)
    CNN1D(channels=12).load_state_dict(state)


def test_epoch_parts_cover_every_step_once_in_order():
    for steps in (1, 2, 7, 31):
        for parts in (1, 2, 3, 4, 40):
            cut = epoch_parts(steps, parts)
            assert len(cut) == min(parts, steps)
            assert [s for r in cut for s in r] == list(range(steps))
            assert max(len(r) for r in cut) - min(len(r) for r in cut) <= 1
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="parts must be an integer >= 1"):
            epoch_parts(5, bad)


def test_run_epoch_in_parts_evaluates_between_parts_only():
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    xs, ys = torch.randn(7, 4, 3), torch.randint(0, 2, (7, 4))
    visited, clocks = [], []

    def batch(s):
        visited.append(s)
        return xs[s], ys[s]

    def step_loss(x, y):
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        return loss

    def slow_evaluation(seconds):
        clocks.append(seconds)
        time.sleep(0.2)  # must not count as training time

    result = run_epoch_in_parts(
        net,
        opt,
        sched,
        batch,
        7,
        step_loss,
        torch.device("cpu"),
        evals_per_epoch=3,
        evaluate_between=slow_evaluation,
    )
    assert visited == list(range(7)) and result.steps == 7
    assert len(clocks) == 2 and 0 < clocks[0] <= clocks[1] <= result.seconds
    assert result.seconds < 0.2  # the 0.4 s of evaluations stayed off the clock


def test_time_to_sustained_accuracy_ignores_a_rise_that_falls_back():
    log = AccuracyLog()
    for seconds, acc in (
        (1.0, 0.70),
        (2.0, 0.86),
        (3.0, 0.83),
        (4.0, 0.87),
        (5.0, 0.91),
        (6.0, 0.88),
    ):
        log.observe(acc, seconds)
    assert log.time_to_accuracy == {"0.8": 2.0, "0.85": 2.0, "0.9": 5.0}
    assert log.time_to_sustained_accuracy() == {"0.8": 2.0, "0.85": 4.0, "0.9": None}
    assert log.best == 0.91 and log.history[2] == (3.0, 0.83)
    assert AccuracyLog().time_to_sustained_accuracy() == {"0.8": None, "0.85": None, "0.9": None}


def test_evaluations_within_an_epoch_do_not_change_training(tmp_path):
    """The mid-epoch test evaluations only observe: same model and losses as one per epoch."""
    runs = {}
    for k in (1, 3):
        out = tmp_path / str(k)
        cfg = {
            "data": "synthetic",
            "optimizer": "hylo",
            "epochs": 2,
            "batch_size": 16,
            "n_train": 96,
            "n_test": 32,
            "inv_update_steps": 2,
            "evals_per_epoch": k,
            "out": str(out),
        }
        runs[k] = (
            train(cfg),
            torch.load(out / "model.pt", weights_only=True),
            [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()],
        )
    (s1, m1, r1), (s3, m3, r3) = runs[1], runs[3]
    assert all(torch.equal(m1[name], m3[name]) for name in m1)
    assert [r["train_loss"] for r in r1] == [r["train_loss"] for r in r3]
    assert [r["test_accuracy"] for r in r1] == [r["test_accuracy"] for r in r3]
    # 6 steps per epoch in 3 parts: 2 evaluations within each epoch and 1 at its end
    assert [e[1] for e in s1["evaluations"]] == [r["test_accuracy"] for r in r1]
    clocks = [e[0] for e in s3["evaluations"]]
    assert len(clocks) == 6 and clocks == sorted(clocks) and len(set(clocks)) == 6
    assert [clocks[2], clocks[5]] == [r["train_seconds"] for r in r3]
    assert [e[1] for e in s3["evaluations"]][2::3] == [r["test_accuracy"] for r in r3]


def test_train_two_workers_unet(tmp_path):
    summary = train(
        {
            "model": "unet",
            "data": "synthetic",
            "optimizer": "kis",
            "epochs": 1,
            "batch_size": 8,
            "n_train": 16,
            "n_test": 8,
            "workers": 2,
            "inv_update_steps": 1,
            "evals_per_epoch": 2,
            "out": str(tmp_path),
            "timeout": 120,
        }
    )
    assert summary["workers"] == 2 and 0.0 <= summary["test_accuracy"] <= 1.0
    assert len(summary["evaluations"]) == 2  # rank 0 evaluated mid-epoch while rank 1 waited
    assert (tmp_path / "model.pt").exists()


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"optimizer": "lamb"}, "optimizer must be one of"),
        ({"model": "vgg"}, "model must be one of"),
        ({"epochs": 0}, "epochs must be an integer >= 1"),
        ({"damping": 0.0}, "damping must be a finite number > 0"),
        ({"rank_ratio": 0.0}, r"rank_ratio must be a number in \(0, 1\]"),
        ({"batch_size": 10, "workers": 3}, "batch_size must be a multiple of workers"),
        ({"optimizer": "kfac", "workers": 2}, "workers must be 1"),
        ({"model": "unet", "data": "builtin:mnist1d"}, "needs model 'cnn1d'"),
        ({"colour": "red"}, "unknown keys"),
        ({"width": 0}, "width must be an integer >= 1"),
        ({"evals_per_epoch": 0}, "evals_per_epoch must be an integer >= 1"),
    ],
)
def test_train_bad_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        train(kwargs)


def test_cli_arguments_round_trip():
    parser = add_hylo_arguments(argparse.ArgumentParser())
    args = parser.parse_args(
        "--model resnet32 --data synthetic --optimizer kid --epochs 3 --batch-size 64 "
        "--lr 0.2 --workers 2 --kid-epochs 0-2,5-6 --lr-decay-epochs 2 --fisher-window 4 --width 24 --evals-per-epoch 2".split()
    )
    cfg = config_from_args(args)
    assert cfg["kid_epochs"] == [[0, 2], [5, 6]] and cfg["lr_decay_epochs"] == [2]
    assert cfg["fisher_window"] == 4 and cfg["factor_decay"] == 0.0 and cfg["width"] == 24
    assert cfg["evals_per_epoch"] == 2
    TrainConfig(**cfg).validate()
    assert TrainConfig(**cfg).workers == 2


def test_kl_clip_scale_matches_the_formula():
    from async_spark.hylo.preconditioner import kl_clip_scale

    g = torch.Generator().manual_seed(0)
    pairs = [(torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)) for _ in range(2)]
    pairs = [(d, d * 2.0 + 0.1 * g_) for d, g_ in pairs]  # <d, g> > 0
    vg = sum(float((d * g_).sum()) for d, g_ in pairs) * 0.3**2
    assert kl_clip_scale(pairs, 0.3, 1e-3) == pytest.approx(min(1.0, (1e-3 / vg) ** 0.5))
    assert kl_clip_scale(pairs, 0.3, 1e9) == 1.0
    assert kl_clip_scale([(d, -d) for d, _ in pairs], 0.3, 1e-3) == 1.0  # <d, g> < 0


def test_kfac_baseline_is_kl_clipped_like_hylo():
    """train's K-FAC: ASDL's direction scaled by HyLo's KL-clip factor, nothing else changed."""
    pytest.importorskip("asdl")
    import torch.nn.functional as F

    from async_spark.hylo.baselines import asdl_maker
    from async_spark.hylo.models import build_model

    def direction(kl_clip):
        torch.manual_seed(0)
        net = build_model("cnn1d")
        maker = asdl_maker("kfac", net, 16, damping=0.1, kl_clip=kl_clip, lr=lambda: 0.5)
        x = torch.randn(16, 1, 1, 40, generator=torch.Generator().manual_seed(1))
        y = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(2))
        dummy = maker.setup_model_call(net, x)
        maker.setup_loss_call(F.cross_entropy, dummy, y)
        maker.forward_and_backward()
        return [p.grad.clone() for p in net.parameters()]

    free, clipped = direction(None), direction(1e-6)
    scale = clipped[0].norm() / free[0].norm()
    assert 0 < float(scale) < 1
    for a, b in zip(free, clipped, strict=True):
        torch.testing.assert_close(b, a * scale, rtol=1e-4, atol=1e-8)


def test_kfac_factor_decay_is_asdl_running_average():
    """factor_decay d: ASDL weighs the new factor by 1 - d (and runs on a CPU-only torch)."""
    pytest.importorskip("asdl")
    import torch.nn.functional as F
    from asdl.core import SHAPE_KRON

    from async_spark.hylo.baselines import asdl_maker
    from async_spark.hylo.models import build_model

    def factors(decay, batches):
        torch.manual_seed(0)
        net = build_model("cnn1d")
        maker = asdl_maker("kfac", net, 16, damping=0.1, factor_decay=decay, inv_update_steps=1)
        for seed in batches:
            x = torch.randn(16, 1, 1, 40, generator=torch.Generator().manual_seed(seed))
            y = torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(seed + 1))
            dummy = maker.setup_model_call(net, x)
            maker.setup_loss_call(F.cross_entropy, dummy, y)
            maker.forward_and_backward()
        kron = maker._get_module_symmatrix(net.linear, SHAPE_KRON)
        return kron.A.clone(), kron.B.clone()

    # no optimizer step: the weights, and so each batch's factors, stay put
    # (ASDL keeps the factors only when it averages; one batch at 0.5 gives half its factors)
    a1, b1 = (2 * f for f in factors(0.5, [1]))
    a2, b2 = (2 * f for f in factors(0.5, [2]))
    ra, rb = factors(0.75, [1, 2])
    torch.testing.assert_close(ra, 0.75 * 0.25 * a1 + 0.25 * a2, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(rb, 0.75 * 0.25 * b1 + 0.25 * b2, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(a1, a2)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"fisher_window": 0}, "fisher_window must be an integer >= 1"),
        ({"fisher_window": 2, "optimizer": "kfac"}, "fisher_window applies to the HyLo"),
        ({"factor_decay": 1.0, "optimizer": "kfac"}, r"factor_decay must be a number in \[0, 1\)"),
        ({"factor_decay": 0.9, "optimizer": "hylo"}, "factor_decay applies to optimizer 'kfac'"),
    ],
)
def test_curvature_memory_options_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs).validate()


def test_divergence_is_reported_not_raised(tmp_path):
    # a learning rate far too large: the loss becomes non-finite within the first epoch
    s = train(
        {
            "model": "cnn1d",
            "data": "synthetic",
            "optimizer": "hylo",
            "lr": 1e12,
            "kl_clip": None,
            "epochs": 3,
            "batch_size": 64,
            "n_train": 256,
            "n_test": 64,
            "out": str(tmp_path),
        }
    )
    assert s["diverged"] is True and s["test_accuracy"] == 0.0
    assert s["epochs_run"] == 1
    assert json.loads((tmp_path / "summary.json").read_text())["diverged"] is True
    assert (tmp_path / "metrics.jsonl").read_text() == ""  # no line for a diverged epoch
