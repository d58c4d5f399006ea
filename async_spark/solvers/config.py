"""The configuration of a linear training run, validated before anything starts."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from async_spark.engine.policies import (
    PartialBarrier,
    Policy,
    PolicyError,
    StalenessBound,
    StaleSynchronous,
)
from async_spark.engine.stragglers import StragglerModel, parse_stragglers

__all__ = ["LINEAR_METHODS", "MOMENTUM_METHODS", "SYNC_METHODS", "TrainConfig", "ConfigError"]

LINEAR_METHODS = ("sgd", "asgd", "saga", "asaga", "hb", "ahb", "ag", "aag", "apg", "aapg")
SYNC_METHODS = ("sgd", "saga", "hb", "ag", "apg")
MOMENTUM_METHODS = ("hb", "ahb", "ag", "aag", "apg", "aapg")
STEP_RULES = ("constant", "sqrt", "staleness")


class ConfigError(ValueError):
    """An option outside its allowed values (the message names the option)."""


def _positive_float(name: str, value: Any, *, allow_zero: bool = False) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = math.nan
    ok = math.isfinite(v) and (v >= 0 if allow_zero else v > 0)
    if isinstance(value, bool) or not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{name} must be a finite number {bound}, got {value!r}")
    return v


def _int_at_least(name: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(f"{name} must be an integer >= {lo}, got {value!r}")
    return value


@dataclass
class TrainConfig:
    """Everything ``async-spark train`` accepts (see ``async-spark train --help``)."""

    data: Any = "builtin:synthetic"
    format: str = "auto"
    num_features: int | None = None
    standardize: bool = False
    loss: str = "logistic"
    method: str = "asaga"
    l2: float = 1e-4
    l1: float = 0.0
    step: float | str = "auto"
    step_rule: str | None = None  # default: sqrt for sgd/asgd, constant for saga/asaga
    momentum: float | None = None  # beta for hb/ag/apg with an explicit --step
    momentum_damping: float = 0.0  # beta / (1 + c * staleness) for asynchronous momentum
    batch_fraction: float = 0.1
    partitions: int = 8
    beta: float | None = None
    tau: int | None = None
    ssp: int | None = None
    stragglers: str = "none"
    straggler_base: float | None = None  # seconds; None: measured in a warm-up
    seed: int = 0
    max_updates: int | None = None
    time_budget: float | None = None
    target_objective: float | None = None
    eval_every: float = 1.0
    out: str | None = None
    quiet: bool = False
    max_retries: int = 3
    checkpoint_every: int | None = None  # updates between checkpoints (needs out)
    checkpoint_seconds: float | None = None  # seconds between checkpoints (needs out)
    keep_checkpoints: int = 3
    publisher: str = "broadcast"
    extra: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> TrainConfig:
        """Check every option (one :class:`ConfigError` naming the first bad one)."""
        if self.method not in LINEAR_METHODS:
            raise ConfigError(
                f"--method must be one of {', '.join(LINEAR_METHODS)}, got {self.method!r}"
            )
        if self.loss not in ("logistic", "squares", "softmax"):
            raise ConfigError(
                f"--loss must be one of logistic, squares, softmax, got {self.loss!r}"
            )
        if self.format not in ("auto", "libsvm", "parquet"):
            raise ConfigError(f"--format must be one of auto, libsvm, parquet, got {self.format!r}")
        _positive_float("--l2", self.l2, allow_zero=True)
        _positive_float("--l1", self.l1, allow_zero=True)
        if self.step != "auto":
            self.step = _positive_float("--step", self.step)
        if self.step_rule is not None and self.step_rule not in STEP_RULES:
            raise ConfigError(
                f"--step-rule must be one of {', '.join(STEP_RULES)}, got {self.step_rule!r}"
            )
        if self.method in MOMENTUM_METHODS:
            if self.step != "auto" and self.momentum is None:
                raise ConfigError("--momentum is needed with an explicit --step for hb/ag/apg")
            if self.momentum is not None:
                m = _positive_float("--momentum", self.momentum, allow_zero=True)
                if m >= 1:
                    raise ConfigError(f"--momentum must be in [0, 1), got {self.momentum!r}")
            _positive_float("--momentum-damping", self.momentum_damping, allow_zero=True)
        elif self.momentum is not None:
            raise ConfigError(
                f"--momentum applies to hb, ag, apg and their asynchronous forms, not {self.method}"
            )
        b = _positive_float("--batch-fraction", self.batch_fraction)
        if b > 1:
            raise ConfigError(f"--batch-fraction must be in (0, 1], got {self.batch_fraction!r}")
        _int_at_least("--partitions", self.partitions, 1)
        if self.method in SYNC_METHODS:
            for name, value in (("--beta", self.beta), ("--tau", self.tau), ("--ssp", self.ssp)):
                if value is not None:
                    raise ConfigError(
                        f"{name} applies to the asynchronous methods (asgd, asaga, ahb, aag, aapg), "
                        f"not {self.method}"
                    )
        try:
            self.policy()
        except PolicyError as exc:
            raise ConfigError(f"--{str(exc).split()[0].replace('_', '-')}: {exc}") from None
        try:
            self.straggler_model()
        except ValueError as exc:
            raise ConfigError(f"--stragglers: {exc}") from None
        if self.straggler_base is not None:
            _positive_float("--straggler-base", self.straggler_base)
        if self.max_updates is not None:
            _int_at_least("--max-updates", self.max_updates, 1)
        if self.time_budget is not None:
            _positive_float("--time-budget", self.time_budget)
        if self.target_objective is not None:
            try:
                t = float(self.target_objective)
            except (TypeError, ValueError):
                t = math.nan
            if not math.isfinite(t):
                raise ConfigError(
                    f"--target-objective must be a finite number, got {self.target_objective!r}"
                )
        _positive_float("--eval-every", self.eval_every)
        _int_at_least("--max-retries", self.max_retries, 0)
        if self.checkpoint_every is not None:
            _int_at_least("--checkpoint-every", self.checkpoint_every, 1)
        if self.checkpoint_seconds is not None:
            _positive_float("--checkpoint-seconds", self.checkpoint_seconds)
        _int_at_least("--keep-checkpoints", self.keep_checkpoints, 1)
        if (self.checkpoint_every or self.checkpoint_seconds) and self.out is None:
            raise ConfigError("--checkpoint-every/--checkpoint-seconds need --out DIR")
        if self.publisher not in ("broadcast", "inline"):
            raise ConfigError(f"--publisher must be broadcast or inline, got {self.publisher!r}")
        if self.max_updates is None and self.time_budget is None and self.target_objective is None:
            self.time_budget = 20.0
        return self

    @property
    def synchronous(self) -> bool:
        return self.method in SYNC_METHODS

    @property
    def rule_name(self) -> str:
        """What the tasks compute: SAGA's corrected gradients, or plain gradients (SGD, momentum)."""
        return "saga" if self.method in ("saga", "asaga") else "sgd"

    def policy(self) -> Policy:
        """sgd/saga: the bulk-synchronous barrier; asgd/asaga: as --beta/--tau/--ssp say."""
        if self.synchronous:
            return Policy.sync()
        return Policy(
            barrier=None if self.beta is None else PartialBarrier(self.beta),
            staleness=None if self.tau is None else StalenessBound(self.tau),
            ssp=None if self.ssp is None else StaleSynchronous(self.ssp),
        )

    def open_data(self) -> tuple[Any, Any]:
        """The run's dataset as ``(BlockSource, DatasetDescriptor)`` (see ``open_dataset``)."""
        from async_spark.data.dataset import open_dataset

        return open_dataset(
            self.data,
            self.partitions,
            format=self.format,
            num_features=self.num_features,
            standardize=self.standardize,
            loss=self.loss,
        )

    def straggler_model(self) -> StragglerModel:
        return parse_stragglers(self.stragglers, seed=self.seed)

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if not isinstance(d["data"], str):
            d["data"] = "arrays"
        return d
