"""Datasets for the HyLo training entry, as in-memory tensors (no download).

* ``builtin:mnist1d`` -- MNIST-1D (Greydanus, 2020) generated locally by the ``mnist1d`` package's
  ``make_dataset`` with its default arguments (4000 training and 1000 test signals of length 40,
  10 classes; the package's fixed default seed, so every run sees the same canonical data),
  generated once per process; every load gets its own tensors.
* ``builtin:digits`` -- scikit-learn's handwritten digits (1797 real 8 x 8 images, shipped with
  the package: no download), upsampled bilinearly to 28 x 28 and scaled to [0, 1], flattened to
  784 pixels: an offline stand-in for MNIST in the deep-autoencoder task (target = input).  A
  fixed split (seed 0): 1500 training and 297 test images; ``n_train`` larger than 1500 adds
  copies shifted by up to 2 pixels in each direction (a real image moved, not noise).
* ``synthetic`` -- a learnable problem of the model's input shape: random inputs labelled by a
  fixed random teacher (classification), masks from a smoothed input channel (segmentation), or
  images in [0, 1] from a random 20-dimensional linear-sigmoid generator (reconstruction).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["BUILTIN_MODEL", "Dataset", "load_dataset", "DATASETS"]

DATASETS = ("builtin:mnist1d", "builtin:digits", "synthetic")

#: which model each built-in dataset is shaped for
BUILTIN_MODEL = {"builtin:mnist1d": "cnn1d", "builtin:digits": "autoencoder"}


@dataclass
class Dataset:
    """Training and test tensors; ``task`` is ``"classification"``, ``"segmentation"`` or
    ``"reconstruction"`` (the targets are the inputs)."""

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    task: str


@functools.lru_cache(maxsize=1)
def _mnist1d_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The canonical MNIST-1D arrays, generated once per process (about 1.6 s each time)."""
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "builtin:mnist1d needs the 'mnist1d' package (pip install mnist1d)"
        ) from e
    d = make_dataset(get_dataset_args())  # the canonical dataset (the package's default seed)
    arrays = tuple(np.array(d[k]) for k in ("x", "y", "x_test", "y_test"))
    for a in arrays:
        a.flags.writeable = False  # shared by every later call
    return arrays  # type: ignore[return-value]


def _mnist1d() -> Dataset:
    x, y, x_test, y_test = _mnist1d_arrays()
    # fresh tensors on every call: a caller may modify its copy in place
    to_x = lambda a: torch.tensor(a, dtype=torch.float32)[:, None, None, :]  # noqa: E731
    return Dataset(
        x_train=to_x(x),
        y_train=torch.tensor(y, dtype=torch.int64),
        x_test=to_x(x_test),
        y_test=torch.tensor(y_test, dtype=torch.int64),
        task="classification",
    )


@functools.lru_cache(maxsize=1)
def _digits_images() -> np.ndarray:
    """scikit-learn's 1797 digits as 28 x 28 images in [0, 1] (computed once per process)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("builtin:digits needs scikit-learn (pip install scikit-learn)") from e
    x = torch.tensor(load_digits().images, dtype=torch.float32)[:, None] / 16.0
    up = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
    images = up.clamp(0.0, 1.0)[:, 0].numpy()
    images.flags.writeable = False
    return images


DIGITS_TRAIN = 1500


def _digits(n_train: int | None) -> Dataset:
    images = torch.tensor(_digits_images())
    perm = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(0))
    train, test = images[perm[:DIGITS_TRAIN]], images[perm[DIGITS_TRAIN:]]
    if n_train is not None and n_train > DIGITS_TRAIN:
        g = torch.Generator().manual_seed(1)
        extra = []
        need = n_train - DIGITS_TRAIN
        while need > 0:
            take = min(need, DIGITS_TRAIN)
            dy, dx = (int(v) for v in torch.randint(-2, 3, (2,), generator=g))
            # shift with zero fill: the digits' borders are blank
            shifted = torch.roll(train[:take], shifts=(dy, dx), dims=(1, 2))
            if dy > 0:
                shifted[:, :dy] = 0.0
            elif dy < 0:
                shifted[:, dy:] = 0.0
            if dx > 0:
                shifted[:, :, :dx] = 0.0
            elif dx < 0:
                shifted[:, :, dx:] = 0.0
            extra.append(shifted)
            need -= take
        train = torch.cat([train, *extra])
    x_train, x_test = train.reshape(train.shape[0], -1), test.reshape(test.shape[0], -1)
    return Dataset(x_train, x_train, x_test, x_test, "reconstruction")


def _synthetic(model: str, n_train: int, n_test: int, seed: int) -> Dataset:
    g = torch.Generator().manual_seed(seed)
    n = n_train + n_test
    if model == "cnn1d":
        x = torch.randn(n, 1, 1, 40, generator=g)
        teacher = torch.randn(40, 10, generator=g)
        y = (x.flatten(1) @ teacher).argmax(1)
        task = "classification"
    elif model == "resnet32":
        x = torch.randn(n, 3, 32, 32, generator=g)
        pooled = F.avg_pool2d(x, 8).flatten(1)  # 3 * 4 * 4 = 48 features
        teacher = torch.randn(48, 10, generator=g)
        y = (pooled @ teacher).argmax(1)
        task = "classification"
    elif model == "autoencoder":
        latent = torch.randn(n, 20, generator=g)
        x = torch.sigmoid(2.0 * latent @ torch.randn(20, 784, generator=g) / math.sqrt(20))
        return Dataset(x[:n_train], x[:n_train], x[n_train:], x[n_train:], "reconstruction")
    elif model == "unet":
        x = torch.randn(n, 3, 32, 32, generator=g)
        smooth = F.avg_pool2d(x[:, :1], 5, stride=1, padding=2, count_include_pad=False)
        y = (smooth > 0).to(torch.float32)
        task = "segmentation"
    else:
        raise ValueError(
            f"model must be one of ('cnn1d', 'resnet32', 'unet', 'autoencoder'), got {model!r}"
        )
    return Dataset(x[:n_train], y[:n_train], x[n_train:], y[n_train:], task)


def load_dataset(
    data: str, model: str, seed: int = 0, n_train: int = 1024, n_test: int = 512
) -> Dataset:
    """Load ``data`` (one of :data:`DATASETS`) shaped for ``model``.

    Parameters
    ----------
    data : str
        ``"builtin:mnist1d"`` (only for ``model="cnn1d"``), ``"builtin:digits"`` (only for
        ``model="autoencoder"``; ``n_train`` above 1500 adds shifted copies) or ``"synthetic"``.
    model : str
        ``"cnn1d"``, ``"resnet32"``, ``"unet"`` or ``"autoencoder"``.
    seed : int
        Seed of the synthetic generator (MNIST-1D is always the canonical dataset, generated
        with the package's default arguments, so that seeds vary only the training).
    n_train, n_test : int
        Sizes of the synthetic sets.
    """
    if data not in DATASETS:
        raise ValueError(f"data must be one of {DATASETS}, got {data!r}")
    if data in BUILTIN_MODEL and model != BUILTIN_MODEL[data]:
        raise ValueError(f"data {data!r} needs model {BUILTIN_MODEL[data]!r}, got {model!r}")
    if data == "builtin:mnist1d":
        return _mnist1d()
    for name, v in (("n_train", n_train), ("n_test", n_test)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if data == "builtin:digits":
        return _digits(n_train)
    return _synthetic(model, n_train, n_test, seed)
