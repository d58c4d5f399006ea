"""The ASYNC engine on stock PySpark.

The pure parts (:mod:`.core`, :mod:`.policies`, :mod:`.stragglers`, :mod:`.history`) never import
pyspark; the Spark backends live in :mod:`.spark` (a Spark job per task) and :mod:`.resident` (one
job of resident tasks per run, tickets over :mod:`.wire`; it imports pyspark only when constructed),
and the session builder in :mod:`.session`.
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
from .resident import ResidentTransport
from .session import JavaNotFoundError, build_session, check_java
from .stragglers import Delay, StragglerModel, parse_stragglers
from .transport import LocalTransport, Outcome, TaskCall, Transport

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
    "ResidentTransport",
    "SchedulerCore",
    "StaleSynchronous",
    "StalenessBound",
    "StragglerModel",
    "TaskCall",
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
