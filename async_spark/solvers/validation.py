"""The checks of a run's options, written once, and the one error they raise.

A :class:`ConfigError` carries the option it is about (``field``, the name in
:class:`~async_spark.solvers.config.TrainConfig`) and the problem; each front end says it in its
own words: the CLI as ``--batch-fraction`` (:func:`flag_name`), the Estimators as
``batchFraction`` (their own table). Other options named in the problem are written
``{field}`` and renamed the same way. A misspelt name gets the closest choice ("did you mean
...?") from the error itself, whichever front end says it.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

from async_spark.engine.stragglers import (
    STRAGGLER_KINDS,
    StragglerModel,
    UnknownStragglerModel,
    parse_stragglers,
)

__all__ = [
    "ConfigError",
    "check_choice",
    "check_finite",
    "check_fraction",
    "check_int",
    "check_number",
    "check_stragglers",
    "did_you_mean",
    "flag_name",
    "escape",
    "quote",
]


def flag_name(field: str) -> str:
    """The command line's name of a field: ``batch_fraction`` -> ``--batch-fraction``."""
    return "--" + field.replace("_", "-")


class ConfigError(ValueError):
    """An option outside its allowed values.

    Parameters
    ----------
    field : str
        The option (a :class:`~async_spark.solvers.config.TrainConfig` field).
    problem : str
        What is wrong, e.g. ``"must be in (0, 1], got 2"``; ``{name}`` marks another option.
    value, choices : optional
        The name the user gave and the names accepted: the closest one, if any is close, ends
        the problem as ``"; did you mean 'asaga'?"``.
    """

    def __init__(
        self, field: str, problem: str, *, value: Any = None, choices: Sequence[str] = ()
    ) -> None:
        self.field = field
        self.problem = problem + escape(did_you_mean(value, choices))
        super().__init__(self.render(flag_name))

    def render(self, name: Callable[[str], str]) -> str:
        """The message with every option named by ``name`` (e.g. the Estimator's Params)."""
        problem = _OPTION.sub(
            lambda m: name(m.group(1)) if m.group(1) else m.group(0)[0], self.problem
        )
        return f"{name(self.field)} {problem}"


# {field} names an option in a problem's text; {{ and }} are literal braces (see escape).
_OPTION = re.compile(r"\{\{|\}\}|\{([a-z][a-z0-9_]*)\}")


def did_you_mean(value: Any, choices: Sequence[str]) -> str:
    """``"; did you mean 'CHOICE'?"`` for the choice closest to a misspelt ``value``, else ``""``."""
    if not isinstance(value, str) or not choices or value in choices:
        return ""
    close = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def escape(text: str) -> str:
    """A text safe inside a problem: its braces stay braces."""
    return text.replace("{", "{{").replace("}", "}}")


def quote(value: Any) -> str:
    """``repr(value)``, safe inside a problem."""
    return escape(repr(value))


def check_number(field: str, value: Any, *, low: float = 0.0, strict: bool = True) -> float:
    """A finite number above ``low`` (``>=`` when not ``strict``)."""
    try:
        v = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and (v > low if strict else v >= low)):
        bound = f"> {low:g}" if strict else f">= {low:g}"
        raise ConfigError(field, f"must be a finite number {bound}, got {quote(value)}")
    return v


def check_finite(field: str, value: Any) -> float:
    try:
        v = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v):
        raise ConfigError(field, f"must be a finite number, got {quote(value)}")
    return v


def check_fraction(field: str, value: Any) -> float:
    """A fraction in (0, 1]."""
    v = check_number(field, value)
    if v > 1:
        raise ConfigError(field, f"must be in (0, 1], got {quote(value)}")
    return v


def check_int(field: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(field, f"must be an integer >= {low}, got {quote(value)}")
    return value


def check_choice(field: str, value: Any, choices: Sequence[str]) -> str:
    """One of ``choices`` (a misspelt one: the closest is suggested)."""
    if value not in choices:
        raise ConfigError(
            field,
            f"must be one of {', '.join(choices)}, got {quote(value)}",
            value=value,
            choices=choices,
        )
    return str(value)


def check_stragglers(field: str, value: Any, seed: int = 0) -> StragglerModel:
    """The straggler model a text names (``none``, ``intensity:C``, ``cloud``,
    ``slow-executor:F``; :func:`~async_spark.engine.stragglers.parse_stragglers`), seeded by
    ``seed``: the one place such a text is parsed."""
    if value is not None and not isinstance(value, str):
        raise ConfigError(field, f"must be a text such as 'cloud', got {quote(value)}")
    try:
        return parse_stragglers(value, seed=seed)
    except UnknownStragglerModel as exc:
        raise ConfigError(
            field, f"is not valid: {escape(str(exc))}", value=exc.kind, choices=STRAGGLER_KINDS
        ) from None
    except ValueError as exc:
        raise ConfigError(field, f"is not valid: {escape(str(exc))}") from None
