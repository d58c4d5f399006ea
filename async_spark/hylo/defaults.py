"""Per-model defaults of the training entry, each with where it comes from.

A :class:`~async_spark.hylo.train.TrainConfig` field left at ``"auto"`` (``damping``,
``damping_target``, ``kl_clip``, ``fisher_window``, ``warmup_epochs``) or ``None`` (``lr``)
takes the value :func:`recommended` gives for its model and optimizer.  One table for all models
cannot work: HyLo's damping and the KL clip are absolute, and the layers' Fisher matrices follow
the loss's scale (the autoencoder's cross-entropy is summed over an image's 784 pixels: per
sample gradients 784 times, and a Fisher 784^2 times, those of the per-pixel mean).  Measured
(2 shared CPU cores, ``docs/hylo.md``): HyLo's best MNIST-1D point (damping 0.03, KL clip 1e-3)
diverged on the autoencoder within 5 epochs, and damping 3 with KL clip 0.03, near the
autoencoder's point, left the CNN at 68% test accuracy after 15 epochs (94% is reachable).

Sources (``SOURCES`` names one per model):

* ``cnn1d`` -- the fair sweep of ``benchmarks/hylo_mnist1d.py`` (36 points per optimizer on a
  tuning seed, ``benchmarks/RESULTS.md``, session 3, 25 channels): HyLo lr 0.3 / damping 0.03 /
  ``fisher_window`` 10, K-FAC lr 0.1 / damping 0.01, SMW-NGD lr 0.3 / damping 0.3, SGD lr 0.1;
  the KL clip 1e-3 of KAISA.  No warm-up (none was needed at 30 epochs).
* ``autoencoder`` -- the sweep of ``benchmarks/hylo_autoencoder.py --quick`` (width 250, the
  points its tuning seed chose), checked at the classic width 1000: HyLo KL clip 0.01 /
  ``fisher_window`` 10 (the clip binds at every step: lr 0.1 no longer sets the step) with
  damping 3, not the sweep's 1, which diverged at width 1000 on one of two seeds (damping 3
  reached the target on it in 12 epochs); SMW-NGD lr 0.3 / damping 3; SGD and Adam lr 5e-3.
  K-FAC: damping 3 / KL clip 0.01, not the sweep's 0.3 / 0.03, which was the fastest on the
  tuning seed but blew up on 2 of 3 others.
* ``resnet32`` -- HyLo's public ResNet-32 script (Mu et al., SC22): damping 1.5 decaying
  geometrically to 0.1 after 5 warm-up epochs, KL clip 1e-3; its lr 1.8 is for a global batch of
  4096 (32 GPUs x 128): scaled linearly to the default batch of 128, 0.056.  Not measured here
  (a CPU cannot train ResNet-32 in a session).
* ``unet`` -- HyLo's U-Net script: damping 0.03, 10 warm-up epochs, KL clip 1e-3; lr 0.1 (the
  script's 8e-4 belongs to its own loss scaling; not measured here).

No model's default decays the learning rate (``lr_decay_epochs`` is not an ``"auto"`` field):
a step decay's epochs belong to the run's length, which this table cannot know.  The measured
models need no warm-up (``autoencoder``: HyLo reached its target in about 12 epochs without).

``sgd`` and ``adam`` ignore the curvature fields; SMW-NGD ignores the KL clip (ASDL
preconditions inside its backward pass).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AUTO", "HYLO_FAMILY", "RECOMMENDED", "SOURCES", "recommended"]

#: the value of a TrainConfig field that takes the model's default
AUTO = "auto"
HYLO_FAMILY = ("hylo", "kis", "kid", "sngd")

_BASE: dict[str, Any] = {
    "damping": 0.03,
    "damping_target": None,
    "kl_clip": 1e-3,
    "fisher_window": 1,
    "warmup_epochs": 0,
}

#: model -> optimizer family ("hylo" stands for hylo/kis/kid/sngd) -> fields
RECOMMENDED: dict[str, dict[str, dict[str, Any]]] = {
    "cnn1d": {
        "hylo": {"lr": 0.3, "damping": 0.03, "kl_clip": 1e-3, "fisher_window": 10},
        "kfac": {"lr": 0.1, "damping": 0.01, "kl_clip": 1e-3},
        "smw": {"lr": 0.3, "damping": 0.3},
        "sgd": {"lr": 0.1},
        "adam": {"lr": 1e-3},
    },
    "autoencoder": {
        "hylo": {"lr": 0.1, "damping": 3.0, "kl_clip": 0.01, "fisher_window": 10},
        "kfac": {"lr": 0.1, "damping": 3.0, "kl_clip": 0.01},
        "smw": {"lr": 0.3, "damping": 3.0},
        "sgd": {"lr": 5e-3},
        "adam": {"lr": 5e-3},
    },
    "resnet32": {
        "hylo": {
            "lr": 0.056,
            "damping": 1.5,
            "damping_target": 0.1,
            "kl_clip": 1e-3,
            "warmup_epochs": 5,
        },
        "kfac": {"lr": 0.056, "damping": 1.5, "warmup_epochs": 5},
        "smw": {"lr": 0.056, "damping": 1.5, "warmup_epochs": 5},
        "sgd": {"lr": 0.1, "warmup_epochs": 5},
        "adam": {"lr": 1e-3, "warmup_epochs": 5},
    },
    "unet": {
        "hylo": {"lr": 0.1, "damping": 0.03, "kl_clip": 1e-3, "warmup_epochs": 10},
        "kfac": {"lr": 0.1, "damping": 0.03, "warmup_epochs": 10},
        "smw": {"lr": 0.1, "damping": 0.03, "warmup_epochs": 10},
        "sgd": {"lr": 0.1, "warmup_epochs": 10},
        "adam": {"lr": 1e-3, "warmup_epochs": 10},
    },
}

SOURCES = {
    "cnn1d": "benchmarks/hylo_mnist1d.py sweep (RESULTS.md, session 3)",
    "autoencoder": "benchmarks/hylo_autoencoder.py --quick sweep (RESULTS.md)",
    "resnet32": "HyLo's ResNet-32 script (SC22), lr scaled to batch 128; not measured here",
    "unet": "HyLo's U-Net script (SC22); not measured here",
}


def recommended(model: str, optimizer: str) -> dict[str, Any]:
    """Every ``"auto"`` field's value (and ``lr``) for ``optimizer`` on ``model``."""
    family = "hylo" if optimizer in HYLO_FAMILY else optimizer
    try:
        row = RECOMMENDED[model][family]
    except KeyError:
        raise ValueError(
            f"no defaults for optimizer {optimizer!r} on model {model!r}; "
            f"models: {sorted(RECOMMENDED)}"
        ) from None
    out = {**_BASE, **row}
    if family != "hylo":
        out["fisher_window"] = 1  # HyLo's knob only
    return out
