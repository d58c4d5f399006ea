"""``method="auto"``, the default: which method a run gets when the user names none.

Measured with every method's defaults on each dataset of the benchmark suite
(``benchmarks/RESULTS.md``, "Every method's defaults after the block weights ...", and
"dense-1e6 with one executor throttled"), L-BFGS on exact rounds of the resident tasks reached
1e-3 and 1e-4 first or within a few hundredths of a second of the first, with one executor
throttled to half speed too; with ``l2 = 1e-4`` on the built-in data the stochastic methods
end 7e-4 to 0.17 above the optimum after 20 s where L-BFGS converges in under a second ("The
convergence test"): their progress is set by the rows' condition number (``docs/steps.md``,
"When a run does not converge"), L-BFGS's by far less. Under the main job's cloud stragglers
(``async-spark train --method lbfgs,asaga --stragglers cloud``, the main job's data and
blocks; RESULTS.md, "The default method") L-BFGS still reached 1e-3 at 4.7 s against ASAGA's
8-11 s (three runs), though each of its rounds waits for the slowest block.

So the rule, first row that applies:

1. an option that only the stochastic methods take (``step``, ``step_rule``, a
   ``batch_fraction`` below 1, ``beta``, ``tau``, ``ssp``): ``asaga``, the method those options
   were written for;
2. otherwise ``lbfgs`` (OWL-QN with an ``l1`` penalty).

The run's summary says which row chose (``method_choice``). Naming a method always wins:
``asaga`` and the other asynchronous methods are there for what L-BFGS cannot do — updates
from partial, stale results when blocks come and go — and for the experiments of ASYNC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .validation import ConfigError

__all__ = ["AUTO", "MethodChoice", "choose_method"]

AUTO = "auto"

#: options only the stochastic methods take (their flags: the names with hyphens)
_STOCHASTIC_OPTIONS = ("step", "step_rule", "batch_fraction", "beta", "tau", "ssp")


@dataclass(frozen=True)
class MethodChoice:
    """The method ``auto`` resolved to, and the rule's row that chose it, in words."""

    method: str
    why: str


def _given(config: Any, name: str) -> bool:
    value = getattr(config, name)
    if name == "step":
        return value != "auto"
    if name == "batch_fraction":
        return value not in (None, 1, 1.0)
    return value is not None


def choose_method(config: Any) -> MethodChoice:
    """The method for a :class:`~.config.TrainConfig` whose ``method`` is ``auto`` (see the
    module docstring); a :class:`ConfigError` for an option no method ``auto`` picks takes."""
    if config.momentum is not None:
        raise ConfigError(
            "momentum",
            "applies to the momentum methods (hb, ag, apg, ahb, aag, aapg): name one with "
            "{method} (the default, auto, chooses lbfgs or asaga)",
        )
    for name in _STOCHASTIC_OPTIONS:
        if _given(config, name):
            flag = name.replace("_", "-")
            return MethodChoice("asaga", f"--{flag} is an option of the stochastic methods")
    return MethodChoice(
        "lbfgs",
        "no option of the stochastic methods: L-BFGS converged first on every dataset of the "
        "benchmark suite, under stragglers too",
    )
