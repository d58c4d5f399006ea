"""async_spark.optim: pure update rules (``init`` / ``update``), step-size and momentum choices.

No Spark, no torch, no I/O: every rule is a pair of functions of numpy arrays with a typed
``NamedTuple`` state (see DESIGN, "Style to follow").
"""

from async_spark.optim.dcasgd import DCASGD, DCASGDState, DCMessage, dcasgd
from async_spark.optim.momentum import (
    APGState,
    HeavyBallState,
    NesterovState,
    RobustMomentumState,
    UpdateRule,
    accelerated_projected_gradient,
    heavy_ball,
    momentum_rule,
    nesterov,
    robust_momentum,
)
from async_spark.optim.parameters import (
    Curvature,
    estimate_curvature,
    momentum_parameters,
    robust_momentum_parameters,
)
from async_spark.optim.projections import (
    L1,
    Ball,
    Box,
    ElasticNet,
    Simplex,
    project_ball,
    project_box,
    project_simplex,
    prox_elastic_net,
    prox_l1,
)
from async_spark.optim.saga import SAGA, SAGAMessage, SAGAState, combine_saga_messages, saga
from async_spark.optim.sgd import SGD, SGDMessage, SGDState, combine_sgd_messages, sgd
from async_spark.optim.steps import (
    STEP_RULES,
    ConstantStep,
    InvSqrtStep,
    StalenessScaledStep,
    StepRule,
    as_step_rule,
    auto_step,
    make_step_rule,
)

__all__ = [
    # momentum rules (issue 4)
    "UpdateRule",
    "HeavyBallState",
    "NesterovState",
    "APGState",
    "RobustMomentumState",
    "heavy_ball",
    "nesterov",
    "accelerated_projected_gradient",
    "robust_momentum",
    "momentum_rule",
    # parameters from (mu, L) and (mu, L) from data
    "momentum_parameters",
    "robust_momentum_parameters",
    "Curvature",
    "estimate_curvature",
    # projections and proximal maps
    "Box",
    "Ball",
    "Simplex",
    "L1",
    "ElasticNet",
    "project_box",
    "project_ball",
    "project_simplex",
    "prox_l1",
    "prox_elastic_net",
    # SGD / SAGA with ASYNC's conventions (issue 3)
    "SGD",
    "SGDMessage",
    "SGDState",
    "sgd",
    "combine_sgd_messages",
    "SAGA",
    "SAGAMessage",
    "SAGAState",
    "saga",
    "combine_saga_messages",
    # delay-compensated ASGD
    "DCASGD",
    "DCASGDState",
    "DCMessage",
    "dcasgd",
    # step-size rules
    "StepRule",
    "ConstantStep",
    "InvSqrtStep",
    "StalenessScaledStep",
    "STEP_RULES",
    "make_step_rule",
    "as_step_rule",
    "auto_step",
]
