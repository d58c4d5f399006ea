"""async_spark.optim: pure update rules (``init`` / ``update``) and step-size rules.

No Spark, no torch, no I/O.
"""

from async_spark.optim.saga import (
    SAGA,
    SAGAMessage,
    SAGAState,
    combine_saga_messages,
    saga,
    saga_task_gradient,
)
from async_spark.optim.sgd import (
    SGD,
    SGDMessage,
    SGDState,
    combine_sgd_messages,
    sample_rows,
    sgd,
    sgd_task_gradient,
)
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
    # SGD / SAGA with ASYNC's conventions (issue 3)
    "SGD",
    "SGDMessage",
    "SGDState",
    "sgd",
    "sgd_task_gradient",
    "combine_sgd_messages",
    "sample_rows",
    "SAGA",
    "SAGAMessage",
    "SAGAState",
    "saga",
    "saga_task_gradient",
    "combine_saga_messages",
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
