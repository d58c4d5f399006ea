"""The ASYNC engine on stock PySpark.

The pure parts (:mod:`.core`, :mod:`.policies`, :mod:`.stragglers`, :mod:`.history`) never import
pyspark; the Spark backend lives in :mod:`.spark` and the session builder in :mod:`.session`.
"""

from .core import BlockStatus, Decision, SchedulerCore, TaskStatus, TaskTicket
from .engine import AsyncEngine, EngineError, TaskResult
from .history import HistoryStore, InlinePublisher
from .policies import (
    PartialBarrier,
    Policy,
    PolicyError,
    StalenessBound,
    StaleSynchronous,
    parse_policy,
)
from .session import JavaNotFoundError, build_session, check_java
from .stragglers import Delay, StragglerModel, parse_stragglers
from .transport import LocalTransport, Outcome, Transport

__all__ = [
    "AsyncEngine",
    "BlockStatus",
    "Decision",
    "Delay",
    "EngineError",
    "HistoryStore",
    "InlinePublisher",
    "JavaNotFoundError",
    "LocalTransport",
    "Outcome",
    "PartialBarrier",
    "Policy",
    "PolicyError",
    "SchedulerCore",
    "StaleSynchronous",
    "StalenessBound",
    "StragglerModel",
    "TaskResult",
    "TaskStatus",
    "TaskTicket",
    "Transport",
    "build_session",
    "check_java",
    "parse_policy",
    "parse_stragglers",
    "spark_transport",
]


def spark_transport(sc, **kwargs):  # type: ignore[no-untyped-def]
    """A :class:`~.spark.SparkTransport` (imports pyspark only when called)."""
    from .spark import SparkTransport

    return SparkTransport(sc, **kwargs)
