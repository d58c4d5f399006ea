"""async_spark.hylo: HyLo hybrid low-rank natural gradient in PyTorch (no Spark import).

Mu, Soori, Can, Gurbuzbalaban, Mehri Dehnavi, "HyLo: a hybrid low-rank natural gradient descent
method", SC22.

- :mod:`~async_spark.hylo.kernels`: pure SNGD / KIS / KID functions on tensors
- :class:`HyLo`: the preconditioner (hooks on Linear/Conv2d, ``step()`` rewrites ``.grad``);
  its per-layer plumbing in :mod:`~async_spark.hylo.layers` and the collective inverse update
  (reduce, gather, ``fisher_window``, invert, broadcast) in :mod:`~async_spark.hylo.inverse_update`
- :mod:`~async_spark.hylo.schedules`: damping decay, learning-rate warm-up, hybrid switch rules
- :mod:`~async_spark.hylo.comm` / :mod:`~async_spark.hylo.assignment`: collectives behind a small
  interface (one process, torch.distributed) and layer-to-rank assignment by cost
- :mod:`~async_spark.hylo.models`, :mod:`~async_spark.hylo.data`: reference models and datasets
- :func:`async_spark.hylo.train.train`: the training entry (its options: :mod:`async_spark.cli.hylo`);
  :mod:`~async_spark.hylo.epochs`: the epoch loop it shares with the Spark stage's ranks
- :mod:`~async_spark.hylo.baselines`: ASDL's K-FAC and SMW-NGD, set up for a fair comparison
"""

from .assignment import contiguous_assignment, greedy_assignment, inverse_cost, makespan
from .comm import Communicator, LocalCommunicator, TorchCommunicator
from .kernels import (
    kernel_matrix,
    kid_block_inverses,
    kid_core,
    kid_direction,
    kid_select,
    kis_direction,
    kis_sample,
    kis_select,
    sample_scores,
    sngd_direction,
    woodbury_apply,
    woodbury_inverse,
)
from .preconditioner import METHODS, HyLo, supported_layer
from .schedules import EpochWindowRule, GeometricDamping, GradNormChangeRule, warmup_multistep

__all__ = [
    "HyLo",
    "METHODS",
    "supported_layer",
    "sngd_direction",
    "kis_direction",
    "kid_direction",
    "kernel_matrix",
    "sample_scores",
    "kis_sample",
    "kis_select",
    "kid_select",
    "kid_core",
    "kid_block_inverses",
    "woodbury_inverse",
    "woodbury_apply",
    "Communicator",
    "LocalCommunicator",
    "TorchCommunicator",
    "greedy_assignment",
    "contiguous_assignment",
    "inverse_cost",
    "makespan",
    "GeometricDamping",
    "warmup_multistep",
    "EpochWindowRule",
    "GradNormChangeRule",
]
