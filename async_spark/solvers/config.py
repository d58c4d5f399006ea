"""The configuration of a linear training run, validated before anything starts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from async_spark.engine.policies import (
    PartialBarrier,
    Policy,
    PolicyError,
    StalenessBound,
    StaleSynchronous,
)
from async_spark.engine.stragglers import StragglerModel
from async_spark.models.linear import LOSSES

from .choice import AUTO, choose_method
from .methods import METHODS, MomentumFamily
from .momentum import MOMENTUM_RULES
from .validation import (
    ConfigError,
    check_choice,
    check_finite,
    check_fraction,
    check_int,
    check_number,
    check_stragglers,
    escape,
    quote,
)

__all__ = ["LINEAR_METHODS", "MOMENTUM_METHODS", "SYNC_METHODS", "TrainConfig", "ConfigError"]

# Read from the method table: a new row is a new --method everywhere.
LINEAR_METHODS = tuple(METHODS)
SYNC_METHODS = tuple(name for name, row in METHODS.items() if row.synchronous)
MOMENTUM_METHODS = tuple(name for name, row in METHODS.items() if row.momentum)
ASYNC_METHODS = tuple(name for name in METHODS if name not in SYNC_METHODS)
NON_PROXIMAL_MOMENTUM = tuple(
    name
    for name, row in METHODS.items()
    if isinstance(row.family, MomentumFamily) and not MOMENTUM_RULES[row.family.rule][2]
)
STEP_RULES = ("constant", "sqrt", "staleness")
#: Which weights the penalty acts on when the columns are standardized: the original columns'
#: (standardization is then a preconditioner only; the minimizer is the raw problem's) or the
#: standardized columns' (pyspark.ml's and glmnet's ``standardization=True``).
PENALTY_ON = ("original", "standardized")
IN_PROCESS_PARTITIONS = 8  # blocks of a run without Spark (its tasks are threads)
FORMATS = ("auto", "libsvm", "parquet")
PUBLISHERS = ("broadcast", "inline")
TRANSPORTS = ("resident", "jobs")


@dataclass
class TrainConfig:
    """Everything ``async-spark train`` accepts (see ``async-spark train --help``)."""

    data: Any = "builtin:synthetic"
    format: str = "auto"
    num_features: int | None = None
    standardize: bool = True  # as pyspark.ml: train on scaled columns, report raw-scale weights
    # the columns whose weights l2/l1 penalize (PENALTY_ON); "standardized" as pyspark.ml, glmnet
    # and scikit-learn's StandardScaler + LogisticRegression
    penalty_on: str = "standardized"
    # an intercept per output (as pyspark.ml's fitIntercept); without one, standardization
    # scales the columns without centering them (nothing would absorb the shift)
    fit_intercept: bool = True
    # logistic | squares | softmax, or "auto" (the default, as pyspark.ml's family="auto"):
    # logistic for two label values, softmax for more classes, read off the data (for_data)
    loss: str = "auto"
    # a row of the method table, or "auto" (the default): validate() resolves it to one
    # (solvers.choice) and says why in ``chosen_by``
    method: str = AUTO
    l2: float = 1e-4
    l1: float = 0.0
    step: float | str = "auto"
    step_safeguard: bool = True  # lower the step when the tasks' sampled losses rise
    step_rule: str | None = None  # default: constant (saga; sgd with an automatic step), sqrt
    momentum: float | None = None  # beta for hb/ag/apg with an explicit --step
    # beta / (1 + c * staleness) for asynchronous momentum; None: the method's default (1 for ahb
    # with an automatic step, else 0: methods.Method.damping)
    momentum_damping: float | None = None
    # the gradient restart of synchronous ag/apg with an automatic step (solvers.methods)
    momentum_restart: bool = True
    # weigh an asynchronous SGD or momentum result by the inverse of its block's share of the
    # recent results, so that fast blocks do not count more (solvers.loop.BlockShares)
    block_weights: bool = True
    # the fraction of its block a task samples; None: the method's default (0.1 for SAGA, the
    # whole block for the others: methods.DEFAULT_BATCH_FRACTION)
    batch_fraction: float | None = None
    # P, the number of blocks; None: the session's task slots (Spark's default parallelism, so no
    # more blocks than tasks can run at once unless asked), 8 for an in-process run
    partitions: int | None = None
    beta: float | None = None
    tau: int | None = None
    ssp: int | None = None
    stragglers: str = "none"
    straggler_base: float | None = None  # seconds; None: measured in a warm-up
    seed: int = 0
    max_updates: int | None = None
    time_budget: float | None = None
    target_objective: float | None = None
    # the convergence test (recording.tolerance_met) on every snapshot while training; None or 0:
    # none (the library's default; the command line and the Estimators test at 1e-6)
    tol: float | None = None
    eval_every: float = 1.0
    out: str | None = None
    quiet: bool = False
    max_retries: int = 3
    checkpoint_every: int | None = None  # updates between checkpoints (needs out)
    checkpoint_seconds: float | None = None  # seconds between checkpoints (needs out)
    keep_checkpoints: int = 3
    publisher: str = "broadcast"  # the job transport's model versions: broadcast or inline
    transport: str = "resident"  # resident tasks (one Spark job per run) or one job per task
    extra: dict[str, Any] = field(default_factory=dict)
    chosen_by: str | None = None  # set by validate() when method was "auto": the rule's row
    loss_chosen: bool = False  # set by for_data() when loss was "auto"

    def validate(self) -> TrainConfig:
        """Check every option once (one :class:`ConfigError` naming the first bad one)."""
        check_choice("method", self.method, (AUTO, *LINEAR_METHODS))
        if self.method == AUTO:
            choice = choose_method(self)
            self.method, self.chosen_by = choice.method, choice.why
        check_choice("loss", self.loss, (AUTO, *LOSSES))
        if self.format == "csv":
            raise ConfigError(
                "format",
                "csv: CSV is not a supported format; convert the file to LIBSVM or Parquet "
                "(docs/quickstart.md, 'Your own data')",
            )
        check_choice("format", self.format, FORMATS)
        check_number("l2", self.l2, strict=False)
        check_number("l1", self.l1, strict=False)
        check_choice("penalty_on", self.penalty_on, PENALTY_ON)
        if self.step != "auto":
            self.step = check_number("step", self.step)
        for name in ("step_safeguard", "momentum_restart", "block_weights", "fit_intercept"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, f"must be true or false, got {quote(getattr(self, name))}")
        if self.step_rule is not None:
            check_choice("step_rule", self.step_rule, STEP_RULES)
            if METHODS[self.method].momentum:  # (alpha, beta) are a pair: no schedule for alpha
                raise ConfigError(
                    "step_rule",
                    f"applies to the methods without momentum, not {escape(str(self.method))}",
                )
        # its range for every method (a synchronous or momentum-free method ignores it)
        if self.momentum_damping is not None:
            check_number("momentum_damping", self.momentum_damping, strict=False)
        self._validate_momentum()
        self._validate_line_search()
        if self.batch_fraction is not None:
            check_fraction("batch_fraction", self.batch_fraction)
        if self.partitions is not None:
            check_int("partitions", self.partitions, 1)
        if self.num_features is not None:
            check_int("num_features", self.num_features, 1)
        check_int("seed", self.seed, 0)  # before Spark starts: the tasks' samples use it
        self._validate_policy()
        self.straggler_model()
        if self.straggler_base is not None:
            check_number("straggler_base", self.straggler_base)
        if self.max_updates is not None:
            check_int("max_updates", self.max_updates, 1)
        if self.time_budget is not None:
            check_number("time_budget", self.time_budget)
        if self.target_objective is not None:
            check_finite("target_objective", self.target_objective)
        if self.tol is not None:
            self.tol = check_number("tol", self.tol, strict=False)
        check_number("eval_every", self.eval_every)
        check_int("max_retries", self.max_retries, 0)
        if self.checkpoint_every is not None:
            check_int("checkpoint_every", self.checkpoint_every, 1)
        if self.checkpoint_seconds is not None:
            check_number("checkpoint_seconds", self.checkpoint_seconds)
        check_int("keep_checkpoints", self.keep_checkpoints, 1)
        if (self.checkpoint_every or self.checkpoint_seconds) and self.out is None:
            field = "checkpoint_every" if self.checkpoint_every else "checkpoint_seconds"
            raise ConfigError(field, "needs {out} DIR")
        check_choice("publisher", self.publisher, PUBLISHERS)
        check_choice("transport", self.transport, TRANSPORTS)
        if self.max_updates is None and self.time_budget is None and self.target_objective is None:
            self.time_budget = 20.0
        return self

    def _validate_momentum(self) -> None:
        if not METHODS[self.method].momentum:
            if self.momentum is not None:
                raise ConfigError(
                    "momentum",
                    f"applies to {', '.join(MOMENTUM_METHODS)}, not {escape(str(self.method))}",
                )
            return
        if self.step != "auto" and self.momentum is None:
            raise ConfigError("momentum", "is needed with an explicit {step} for hb/ag/apg")
        if self.step == "auto" and not self.l2 > 0:
            raise ConfigError(
                "l2",
                f"must be > 0 for an automatic {{step}} of {escape(str(self.method))} (mu = l2 is "
                "the strong convexity the momentum is chosen from); or give {step} and {momentum}",
            )
        if self.l1 and self.method in NON_PROXIMAL_MOMENTUM:
            raise ConfigError(
                "l1",
                f"needs a method that takes the penalty's prox; {escape(self.method)} does not "
                "(use apg, its proximal form, or saga/asaga/sgd/asgd)",
            )
        if self.momentum is not None:
            if check_number("momentum", self.momentum, strict=False) >= 1:
                raise ConfigError("momentum", f"must be in [0, 1), got {quote(self.momentum)}")

    def _validate_line_search(self) -> None:
        """A method that finds its steps by a line search (lbfgs) on exact rounds takes no step
        options and whole blocks only (with l1 it is OWL-QN)."""
        if not METHODS[self.method].family.reads_losses:
            return
        name = escape(str(self.method))
        if self.step != "auto":
            raise ConfigError("step", f"does not apply to {name}: its line search finds the steps")
        if self.step_rule is not None:
            raise ConfigError(
                "step_rule", f"does not apply to {name}: its line search finds the steps"
            )
        if self.batch_fraction not in (None, 1, 1.0):
            raise ConfigError(
                "batch_fraction",
                f"must be 1 for {name} (its line search needs the exact objective), got "
                f"{quote(self.batch_fraction)}",
            )

    def _validate_policy(self) -> None:
        if self.synchronous:
            for name in ("beta", "tau", "ssp"):
                if getattr(self, name) is not None:
                    raise ConfigError(
                        name,
                        f"applies to the asynchronous methods ({', '.join(ASYNC_METHODS)}), "
                        f"not {escape(str(self.method))}",
                    )
        try:
            self.policy()
        except PolicyError as exc:
            raise ConfigError(exc.field or "method", f"is not valid: {escape(str(exc))}") from None

    @property
    def synchronous(self) -> bool:
        return METHODS[self.method].synchronous

    def max_delay(self, num_blocks: int) -> int:
        """Updates an accepted result can be late by: the other tasks in flight (P - 1), or
        ``--tau`` when it bounds the staleness (0 for synchronous methods)."""
        if self.synchronous:
            return 0
        return min(num_blocks - 1, self.tau) if self.tau is not None else num_blocks - 1

    def policy(self) -> Policy:
        """sgd/saga: the bulk-synchronous barrier; asgd/asaga: as --beta/--tau/--ssp say."""
        if self.synchronous:
            return Policy.sync()
        return Policy(
            barrier=None if self.beta is None else PartialBarrier(self.beta),
            staleness=None if self.tau is None else StalenessBound(self.tau),
            ssp=None if self.ssp is None else StaleSynchronous(self.ssp),
        )

    def for_session(self, spark: Any) -> TrainConfig:
        """This config with ``partitions`` set: as given, else the session's task slots (8 for an
        in-process run, ``spark=None``)."""
        if self.partitions is not None:
            return self
        if spark is None:
            return dataclasses.replace(self, partitions=IN_PROCESS_PARTITIONS)
        from async_spark.engine.connect import default_parallelism

        return dataclasses.replace(self, partitions=default_parallelism(spark))

    def for_method(self) -> TrainConfig:
        """This config with ``batch_fraction`` and ``momentum_damping`` set: as given, else the
        method's defaults (the damping only with an automatic step: an explicit ``step`` and
        ``momentum`` are the plain method the user asked for)."""
        row = METHODS[self.method]
        given: dict[str, Any] = {}
        if self.batch_fraction is None:
            given["batch_fraction"] = row.family.batch_fraction
        if self.momentum_damping is None:
            given["momentum_damping"] = row.damping if self.step == "auto" else 0.0
        return dataclasses.replace(self, **given) if given else self

    def for_data(self, desc: Any) -> TrainConfig:
        """This config with an ``"auto"`` loss resolved to the one the dataset was opened for
        (``desc.loss``, from :meth:`open_data`; ``loss_chosen`` then says so). A loss named
        explicitly must be the one the dataset's labels were mapped for, when they were."""
        opened = getattr(desc, "loss", None)
        if self.loss != AUTO:
            if opened is not None and opened != self.loss:
                raise ConfigError(
                    "loss",
                    f"is {self.loss}, but the dataset's labels were mapped for {opened}: open "
                    "the data with the run's loss",
                )
            return self
        if opened not in LOSSES:
            raise ConfigError(
                "loss",
                "is auto, but the dataset was opened with loss=None (labels unchecked): open it "
                "with loss='auto' or name the loss",
            )
        return dataclasses.replace(self, loss=opened, loss_chosen=True)

    def open_data(self) -> tuple[Any, Any]:
        """The run's dataset as ``(BlockSource, DatasetDescriptor)`` (see ``open_dataset``);
        ``partitions`` must be set (see :meth:`for_session`)."""
        from async_spark.data.dataset import open_dataset

        if self.partitions is None:
            raise ConfigError("partitions", "is not set: call for_session(spark) first")
        return open_dataset(
            self.data,
            self.partitions,
            format=self.format,
            num_features=self.num_features,
            standardize=self.standardize,
            loss=self.loss,
            center=self.fit_intercept,
        )

    def straggler_model(self) -> StragglerModel:
        """The model ``stragglers`` names, seeded by ``seed`` (a :class:`ConfigError` if it names
        none): parsed once, by :meth:`validate` or the first call, and kept while neither field
        changes."""
        key = (self.stragglers, self.seed)
        kept = self.__dict__.get("_straggler_model")
        if kept is None or kept[0] != key:
            kept = key, check_stragglers("stragglers", self.stragglers, seed=self.seed)
            self.__dict__["_straggler_model"] = kept
        return kept[1]

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not isinstance(d["data"], str):
            d["data"] = "arrays"
        return d
