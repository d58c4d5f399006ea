"""async_spark.models: losses and regularizers as pure numpy/scipy functions (no Spark).

See :mod:`async_spark.models.linear` for the objective, the GLM trick and the flat parameter
layout; :mod:`async_spark.models.scoring` for a saved model's metrics on other rows.
"""

from async_spark.models.linear import (
    LOSSES,
    LinearModel,
    block_gradient_sum,
    block_loss_sum,
    elastic_net,
    full_gradient,
    gradient_from_scalars,
    init_params,
    loss_derivatives,
    loss_values,
    margins,
    max_squared_row_norm,
    objective,
    pack_params,
    penalty_gradient,
    prox_penalty,
    regularizer,
    regularizer_gradient,
    sample_scalars,
    sample_smoothness,
    split_params,
    uniform_l2,
)
from async_spark.models.scoring import HeldOutScores, SavedLinearModel, read_saved_model

__all__ = [
    "LOSSES",
    "HeldOutScores",
    "SavedLinearModel",
    "read_saved_model",
    "LinearModel",
    "elastic_net",
    "init_params",
    "split_params",
    "pack_params",
    "margins",
    "loss_values",
    "loss_derivatives",
    "block_loss_sum",
    "block_gradient_sum",
    "sample_scalars",
    "gradient_from_scalars",
    "regularizer",
    "regularizer_gradient",
    "penalty_gradient",
    "uniform_l2",
    "prox_penalty",
    "objective",
    "full_gradient",
    "max_squared_row_norm",
    "sample_smoothness",
]
