r"""The linear methods: one table, each row a family of update (what a worker computes, how the
driver makes a message and combines a round, the pure rule from :mod:`async_spark.optim`) and
whether it waits for whole rounds.

========  ==========  =========  ===============================================================
method    family      rounds     update
========  ==========  =========  ===============================================================
sgd       sgd         sync       mini-batch SGD, :math:`\gamma/\sqrt{k+1}` per round (ASYNC)
asgd      sgd         async      one update per result, :math:`\gamma/\sqrt{k/P+1}`
saga      saga        sync       SAGA with one scalar of history per sample
asaga     saga        async      ASYNC's ASAGA
hb, ahb   hb          both       heavy ball
ag, aag   ag          both       Nesterov's accelerated gradient
apg,aapg  apg         both       accelerated proximal gradient (prox of the L1 term)
dcasgd    dcasgd      async      delay-compensated ASGD (Zheng et al., ICML 2017)
lbfgs     lbfgs       sync       L-BFGS with a backtracking line search on exact rounds
========  ==========  =========  ===============================================================

Setup runs once, in scikit-learn's ``_sag.py`` order: the options were validated
(:class:`~async_spark.solvers.config.TrainConfig`), then :meth:`Family.choose_step` picks the step
from the data (or takes ``--step``), then :meth:`Family.build_rule` builds the rule. During the
run the loop (:mod:`.loop`) calls :meth:`Family.at_dispatch` when a task leaves and
:meth:`Family.message` when its result is accepted; nothing in the loop depends on the method's
name. A new method is a new :class:`Family` (or a new row of an existing one) — see
``docs/architecture.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

import numpy as np

from async_spark.data.blocks import BlockSource, DatasetDescriptor
from async_spark.engine.core import TaskTicket
from async_spark.engine.engine import TaskResult
from async_spark.engine.task import HeldRows
from async_spark.models.linear import LinearModel
from async_spark.optim.dcasgd import DCMessage, dcasgd
from async_spark.optim.lbfgs import LBFGSMessage, LBFGSState, combine_lbfgs_messages, lbfgs
from async_spark.optim.saga import SAGA, SAGAMessage, combine_saga_messages, saga
from async_spark.optim.sgd import SGDMessage, combine_sgd_messages, sgd
from async_spark.optim.steps import asynchronous_step, auto_step, make_step_rule

from .curvature import gram_max_eigenvalue
from .momentum import MOMENTUM_RULES, MomentumLinear, momentum_step, raised_momentum
from .recording import Exact
from .worker import LinearTask, TaskArgs

__all__ = [
    "METHODS",
    "Dispatch",
    "Family",
    "Method",
    "Problem",
    "Setup",
    "StepChoice",
    "method",
    "reads_curvature",
]


class Problem(NamedTuple):
    """What the data and the model are (read-only during a run)."""

    model: LinearModel
    source: BlockSource
    desc: DatasetDescriptor


class Setup(NamedTuple):
    """The validated options a family reads to choose its step and build its rule."""

    step: float | str  # a number, or "auto"
    step_rule: str | None  # None: the family's default
    momentum: float | None
    momentum_damping: float
    batch_fraction: float
    synchronous: bool
    max_delay: int = 0  # updates an asynchronous result can be late by (tasks in flight - 1)
    momentum_restart: bool = True  # where it applies (MomentumFamily.restarts)


class StepChoice(NamedTuple):
    """The step the run uses (``beta``: the momentum, for momentum rules) and how it was found."""

    gamma: float
    beta: float | None = None
    # how the step was found (momentum: L, mu, kappa, alpha, beta); read-only, so the default
    # that every StepChoice shares cannot be changed through one of them
    info: Mapping[str, float] = MappingProxyType({})


class Dispatch(NamedTuple):
    """What the driver knows when a task leaves."""

    ticket: TaskTicket
    args: TaskArgs  # without its extra argument yet
    task: LinearTask
    rule: Any
    state: Any  # the rule's state now
    model_of: Callable[[int], np.ndarray]  # a version's parameters, from the history store


class Rule(Protocol):
    def init(self, params: np.ndarray) -> Any: ...

    def update(self, message: Any, state: Any, params: np.ndarray) -> tuple[np.ndarray, Any]: ...


class Family(Protocol):
    """What a family of methods does at each seam of a run.

    ``computation`` names the worker computation (:data:`~.worker.COMPUTATIONS`). ``at_dispatch``
    runs on the driver when a task leaves: it returns the task's extra argument (numbers and arrays
    only) and a memo the driver keeps until the task's result comes back; ``message`` turns the
    accepted result and that memo into the rule's message; ``combine`` joins a synchronous round's
    messages (in block order); ``signal`` is the gradient-like part of a message whose growth means
    divergence; ``iterate`` is the point reported as the model.
    """

    computation: str
    #: whether the step safeguard may search upward from an automatic step (see .safeguard and
    #: linear.searches; a momentum family retunes its momentum with the raised step, see
    #: raised_momentum)
    step_search: bool
    #: whether a constant step leaves the method in a noise ball, so that the safeguard halves
    #: an automatic step on plateaus (not SAGA: its variance-reduced step converges)
    noise_ball: bool
    #: the fraction of its block a task samples unless ``batch_fraction`` is given (see
    #: :data:`DEFAULT_BATCH_FRACTION`)
    batch_fraction: float
    #: whether the family judges its own steps from the tasks' losses (a line search): its
    #: ``message`` then gets ``(payload, loss stats)`` and no step safeguard runs
    reads_losses: bool
    #: whether every update needs every block's rows (a line search's exact objective): a block
    #: given up then ends the run, where the other methods go on with the blocks left
    needs_every_block: bool
    #: whether an asynchronous result is weighted by the inverse of its block's share of the
    #: recent results (:class:`~.loop.BlockShares`) through :meth:`weighted`: the methods whose
    #: update is the block's gradient alone (SGD, momentum); not SAGA, whose table keeps every
    #: block's last gradient, nor DC-ASGD, whose compensation is kept as published
    weighs_blocks: bool
    #: whether ``choose_step`` reads the rows' curvature from the descriptor
    #: (``max_row_norm_sq``, ``gram_max``): a DataFrame's partitions measure it in one more job
    #: only for these (:func:`reads_curvature`)
    reads_curvature: bool
    #: whether :meth:`exact` gives the iterate's objective and gradient (the run then evaluates
    #: no snapshot of its own: see .recording.Recorder)
    exact_values: bool

    def choose_step(self, problem: Problem, setup: Setup) -> StepChoice: ...

    def build_rule(self, problem: Problem, setup: Setup, step: StepChoice) -> Rule: ...

    def at_dispatch(self, dispatch: Dispatch) -> tuple[Any, Any]: ...

    def message(self, result: TaskResult, memo: Any) -> Any: ...

    def combine(self, messages: Sequence[Any]) -> Any: ...

    def weighted(self, message: Any, weight: float) -> Any:
        """``message`` counted ``weight`` times (only called when ``weighs_blocks``)."""
        ...

    def signal(self, message: Any) -> np.ndarray: ...

    def iterate(self, params: np.ndarray, state: Any) -> np.ndarray: ...

    def after_rise(self, rule: Rule, params: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        """The parameters and rule state a run goes on from once the step safeguard has lowered
        the step for a rise of the objective (``rule``: the rebuilt one)."""
        ...

    def converged(self, state: Any) -> bool:
        """Whether the rule has nothing left to do (the run stops, ``stopped_by="converged"``)."""
        ...

    def exact(self, params: np.ndarray, state: Any) -> Exact | None:
        """The objective and the smooth part's gradient at ``iterate(params, state)`` when the
        rule computed them over every row (L-BFGS's rounds), else None."""
        ...


class _RunsToTheBudget:
    """Families without a stopping test of their own and with no line search."""

    reads_losses = False
    needs_every_block = False
    weighs_blocks = False
    reads_curvature = True
    exact_values = False

    def exact(self, params: np.ndarray, state: Any) -> Exact | None:
        return None  # sampled gradients: a snapshot's objective is evaluated apart

    def weighted(self, message: Any, weight: float) -> Any:
        raise TypeError(f"{type(self).__name__} does not weigh its blocks' results")

    def after_rise(self, rule: Rule, params: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        return params, state  # SAGA's table, SGD's nothing: carried over with the lowered step

    def converged(self, state: Any) -> bool:
        return False


#: The default sample of a block per task. SAGA's variance reduction makes small samples pay:
#: its error shrinks with the table, not with the batch, so a tenth of the block is cheap and
#: converges (0.1, the default before this table). A sampled gradient without variance reduction
#: leaves SGD and the momentum methods in a noise ball whose size falls only with the step, so
#: their default is the whole block (as MLlib's SGD, ``miniBatchFraction = 1.0``): with exact
#: block gradients the synchronous methods are gradient descent and Nesterov's method, linear at
#: rates 1/kappa and 1/sqrt(kappa) (Nesterov, "Introductory Lectures", Thm 2.1.15, 2.2.3), and
#: an asynchronous one's only noise is the spread between blocks. Measured with defaults
#: (``benchmarks/peers.py --quick --ours-only --grid 0``, RESULTS.md): at 0.1 SGD, ASGD and AAG
#: did not reach 1e-3 within 5 s on breast cancer, nor AG on digits; at 1.0 every method does.
DEFAULT_BATCH_FRACTION = {"saga": 0.1, "gradient": 1.0}


def _safe_step(kind: str, problem: Problem, setup: Setup) -> float:
    """``--step`` as given, or the data's safe step for ``kind`` ("sgd" or "saga")."""
    if setup.step != "auto":
        return float(setup.step)
    model, source, desc = problem
    if desc.max_row_norm_sq is None:  # a frame opened with measure_rows=False
        raise RuntimeError(
            f"the automatic {kind} step needs the rows' norms, which {desc.dataset_id} did not "
            "measure (open_frame(..., measure_rows=True))"
        )
    if setup.synchronous:
        # A synchronous update averages b N rows: the mini-batch step (larger, still safe).
        return auto_step(
            kind,
            model,
            float(desc.max_row_norm_sq),
            n=desc.n,
            batch=setup.batch_fraction * desc.n,
            gram_max=gram_max_eigenvalue(source, desc, intercept=model.fit_intercept),
        )
    # Asynchronous updates are stale: one task's mini-batch step, reduced for the updates in
    # flight (see asynchronous_step for the results it rests on).
    return asynchronous_step(
        kind,
        model,
        float(desc.max_row_norm_sq),
        n=desc.n,
        batch=setup.batch_fraction * desc.n / desc.num_blocks,
        gram_max=gram_max_eigenvalue(source, desc, intercept=model.fit_intercept),
        max_delay=setup.max_delay,
    )


def _step_rule(default: str, problem: Problem, setup: Setup, gamma: float) -> Any:
    # gamma / sqrt(k/P + 1) for one result per update; a synchronous update is a whole round,
    # so its rule is ASYNC's gamma / sqrt(k + 1).
    num_blocks = 1 if setup.synchronous else problem.desc.num_blocks
    return make_step_rule(setup.step_rule or default, gamma, num_blocks=num_blocks)


def _sgd_like(make: Callable[..., Rule], problem: Problem, setup: Setup, step: StepChoice) -> Rule:
    """An SGD-shaped rule (``sgd``, ``dcasgd``) with the ``sqrt`` step rule by default."""
    desc = problem.desc
    return make(
        problem.model,
        n=desc.n,
        num_blocks=desc.num_blocks,
        batch_fraction=setup.batch_fraction,
        step=_step_rule("sqrt", problem, setup, step.gamma),
    )


class _GradientMessages(_RunsToTheBudget):
    """Families whose task returns a gradient sum and whose message is an SGDMessage."""

    computation = "gradient"
    batch_fraction = DEFAULT_BATCH_FRACTION["gradient"]

    def at_dispatch(self, dispatch: Dispatch) -> tuple[np.ndarray | None, Any]:
        return None, None

    def message(self, result: TaskResult, memo: Any) -> SGDMessage:
        return SGDMessage(result.payload, result.staleness)

    def combine(self, messages: Sequence[SGDMessage]) -> SGDMessage:
        return combine_sgd_messages(messages)

    weighs_blocks = True

    def weighted(self, message: SGDMessage, weight: float) -> SGDMessage:
        return message._replace(grad_sum=np.asarray(message.grad_sum) * weight)

    def signal(self, message: SGDMessage) -> np.ndarray:
        return np.asarray(message.grad_sum)

    def iterate(self, params: np.ndarray, state: Any) -> np.ndarray:
        return params


class SGDFamily(_GradientMessages):
    """Mini-batch SGD (:mod:`async_spark.optim.sgd`)."""

    step_search = True
    noise_ball = True

    def choose_step(self, problem: Problem, setup: Setup) -> StepChoice:
        return StepChoice(_safe_step("sgd", problem, setup))

    def build_rule(self, problem: Problem, setup: Setup, step: StepChoice) -> Rule:
        return _sgd_like(sgd, problem, setup, step)


class _SAGAMemo(NamedTuple):
    rows: np.ndarray


class SAGAFamily(_RunsToTheBudget):
    """SAGA with the driver's table of one scalar per sample (:mod:`async_spark.optim.saga`)."""

    computation = "saga"
    step_search = True
    noise_ball = False
    batch_fraction = DEFAULT_BATCH_FRACTION["saga"]

    def choose_step(self, problem: Problem, setup: Setup) -> StepChoice:
        return StepChoice(_safe_step("saga", problem, setup))

    def build_rule(self, problem: Problem, setup: Setup, step: StepChoice) -> Rule:
        return saga(
            problem.model,
            block_rows=problem.desc.rows_per_block,
            batch_fraction=setup.batch_fraction,
            step=_step_rule("constant", problem, setup, step.gamma),
        )

    def at_dispatch(self, dispatch: Dispatch) -> tuple[Any, Any]:
        # The old scalars of the sample, as rows of the block's table: a transport that keeps the
        # tables on the workers sends only the table's label (see HeldRows), the others the rows.
        rule, block, state = dispatch.rule, dispatch.ticket.block, dispatch.state
        assert isinstance(rule, SAGA)
        rows = dispatch.task.sample(block, dispatch.args, rule.block_rows[block])
        origin = -1 if state.origins is None else int(state.origins[block])
        return HeldRows(origin, state.table[block], rows), _SAGAMemo(rows)

    def message(self, result: TaskResult, memo: _SAGAMemo) -> SAGAMessage:
        delta, new_scalars = result.payload
        return SAGAMessage(
            (result.block,),
            (memo.rows,),
            delta,
            (new_scalars,),
            result.staleness,
            block_tasks=(result.block_task,),
        )

    def combine(self, messages: Sequence[SAGAMessage]) -> SAGAMessage:
        return combine_saga_messages(messages)

    def signal(self, message: SAGAMessage) -> np.ndarray:
        return np.asarray(message.delta_sum)

    def iterate(self, params: np.ndarray, state: Any) -> np.ndarray:
        return params


@dataclass(frozen=True)
class MomentumFamily(_GradientMessages):
    """HB, AG and APG on gradient sums (:mod:`.momentum`)."""

    rule: str
    step_search = True
    noise_ball = True

    def choose_step(self, problem: Problem, setup: Setup) -> StepChoice:
        if setup.step == "auto":
            alpha, beta, info = momentum_step(
                self.rule, problem.model, problem.source, problem.desc
            )
        else:
            alpha, beta, info = float(setup.step), float(setup.momentum or 0.0), {}
        return StepChoice(alpha, beta, {**info, "alpha": alpha, "beta": beta})

    def build_rule(self, problem: Problem, setup: Setup, step: StepChoice) -> Rule:
        desc = problem.desc
        beta = float(step.beta or 0.0)
        if "L" in step.info and step.gamma > step.info["alpha"]:  # raised by the step search
            beta = raised_momentum(self.rule, step.info, step.gamma)
        return MomentumLinear(
            self.rule,
            problem.model,
            n=desc.n,
            num_blocks=desc.num_blocks,
            batch_fraction=setup.batch_fraction,
            alpha=step.gamma,
            beta=beta,
            momentum_damping=setup.momentum_damping,
            restart=self.restarts(setup),
        )

    def restarts(self, setup: Setup) -> bool:
        """The gradient restart (:func:`~async_spark.optim.momentum.nesterov`) for AG and APG
        with an automatic step, synchronously: the automatic beta is tuned for mu = l2 alone,
        which the data's curvature exceeds, and without the restart AG ripples around the
        minimizer (measured in process, dense 10^5 x 20, 2 blocks: 1e-3 in 12 updates against
        152 without it, whose ripples the safeguard's rise test took for rises; docs/steps.md).
        Asynchronously a stale block's gradient would decide it: not restarted. An explicit
        ``--step``/``--momentum`` is the plain method the user asked for, and
        ``--no-momentum-restart`` turns it off."""
        automatic = setup.synchronous and setup.step == "auto" and setup.momentum_restart
        return MOMENTUM_RULES[self.rule][3] and automatic

    def iterate(self, params: np.ndarray, state: Any) -> np.ndarray:
        return MomentumLinear.iterate(params, state)

    def after_rise(self, rule: Rule, params: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        """A rise restarts the momentum: the method starts afresh from the parameters the
        pending gradients were computed at (the look-ahead point, for AG and APG), as the
        function-value scheme of O'Donoghue & Candès ("Adaptive restart for accelerated gradient
        schemes", Found. Comput. Math. 15, 2015) does, with the safeguard's rise test, which
        noise does not fool, as its test. A lowered step alone leaves the momentum that overshot
        carrying the iterate on: asynchronous AG on rcv1-like-2e4 (``benchmarks/peers.py
        --quick``) rose at ten windows in a row while its step was halved ten times."""
        return params, rule.init(params)


class DCASGDFamily(_RunsToTheBudget):
    """Delay-compensated ASGD (:mod:`async_spark.optim.dcasgd`): the message carries the version
    the task read, taken from the engine's history store when the task leaves."""

    computation = "gradient"
    step_search = True
    noise_ball = True
    batch_fraction = DEFAULT_BATCH_FRACTION["gradient"]

    def choose_step(self, problem: Problem, setup: Setup) -> StepChoice:
        return StepChoice(_safe_step("sgd", problem, setup))

    def build_rule(self, problem: Problem, setup: Setup, step: StepChoice) -> Rule:
        return _sgd_like(dcasgd, problem, setup, step)

    def at_dispatch(self, dispatch: Dispatch) -> tuple[np.ndarray | None, Any]:
        return None, dispatch.model_of(dispatch.ticket.version)

    def message(self, result: TaskResult, memo: np.ndarray) -> DCMessage:
        return DCMessage(result.payload, memo, result.staleness)

    def combine(self, messages: Sequence[Any]) -> Any:
        raise ValueError("DC-ASGD has no synchronous form (a fresh round needs no compensation)")

    def signal(self, message: DCMessage) -> np.ndarray:
        return np.asarray(message.grad_sum)

    def iterate(self, params: np.ndarray, state: Any) -> np.ndarray:
        return params


class LBFGSFamily:
    """L-BFGS over synchronous rounds of whole blocks (:mod:`async_spark.optim.lbfgs`): a task
    returns its block's gradient sum as for SGD, and the loss sum it reports anyway is the line
    search's objective. The published point is the trial point; the model reported is the last
    accepted one."""

    computation = "gradient"
    step_search = False
    noise_ball = False
    batch_fraction = 1.0  # the line search needs the exact objective
    reads_losses = True
    needs_every_block = True  # a round without a block is evaluated again: with one given up,
    # every round would be, until the budget
    weighs_blocks = False  # synchronous rounds only
    reads_curvature = False  # its steps come from the line search
    exact_values = True

    def exact(self, params: np.ndarray, state: LBFGSState) -> Exact | None:
        # F and its gradient at the accepted point, from the round that evaluated it
        return Exact(float(state.f), state.g) if state.evaluations else None

    def weighted(self, message: LBFGSMessage, weight: float) -> LBFGSMessage:
        raise TypeError("L-BFGS runs synchronous rounds: no block is weighted")

    def choose_step(self, problem: Problem, setup: Setup) -> StepChoice:
        return StepChoice(1.0)  # the unit quasi-Newton step, shortened by the line search

    def build_rule(self, problem: Problem, setup: Setup, step: StepChoice) -> Rule:
        return lbfgs(problem.model, n=problem.desc.n)

    def at_dispatch(self, dispatch: Dispatch) -> tuple[None, None]:
        return None, None

    def message(self, result: TaskResult, memo: Any) -> LBFGSMessage:
        grad_sum, losses = result.payload
        return LBFGSMessage(grad_sum, float(losses[0]), int(losses[2]), result.staleness)

    def combine(self, messages: Sequence[LBFGSMessage]) -> LBFGSMessage:
        return combine_lbfgs_messages(messages)

    def signal(self, message: LBFGSMessage) -> np.ndarray:
        return np.asarray(message.grad_sum)

    def iterate(self, params: np.ndarray, state: LBFGSState) -> np.ndarray:
        return state.x

    def after_rise(self, rule: Rule, params: np.ndarray, state: Any) -> tuple[np.ndarray, Any]:
        return params, state  # never called: its line search judges its steps, no safeguard

    def converged(self, state: LBFGSState) -> bool:
        return bool(state.converged)


@dataclass(frozen=True)
class Method:
    """A row of the table: a family and whether the method waits for whole rounds."""

    name: str
    family: Family = field(compare=False)
    synchronous: bool
    momentum: bool = False  # takes --momentum / --momentum-damping
    # the momentum damping c (beta / (1 + c * staleness)) of an automatic step: ASYNC_DAMPING
    damping: float = 0.0

    @property
    def computation(self) -> str:
        return self.family.computation


#: The default momentum damping of an asynchronous momentum method with an automatic step. Heavy
#: ball's tuning (alpha = 4 / (sqrt L + sqrt mu)^2, at the edge of its stability) oscillates with
#: stale gradients: asynchrony adds momentum of its own, about 1 - 1/P with P workers (Mitliagkas,
#: Zhang, Hadjis & Re, "Asynchrony begets momentum", Allerton 2016), so the explicit momentum is
#: lowered to beta / (1 + tau), about beta / P at the mean staleness P - 1: for beta near 1 that
#: is their beta - (1 - 1/P). AG's step 1/L leaves room, and damping did not help aag (docs/steps.md).
ASYNC_DAMPING: dict[str, float] = {"hb": 1.0}


def _rows() -> dict[str, Method]:
    rows = [
        Method("sgd", SGDFamily(), True),
        Method("asgd", SGDFamily(), False),
        Method("saga", SAGAFamily(), True),
        Method("asaga", SAGAFamily(), False),
    ]
    for rule in MOMENTUM_RULES:
        rows.append(Method(rule, MomentumFamily(rule), True, momentum=True))
        damping = ASYNC_DAMPING.get(rule, 0.0)
        rows.append(Method("a" + rule, MomentumFamily(rule), False, momentum=True, damping=damping))
    rows.append(Method("dcasgd", DCASGDFamily(), False))
    rows.append(Method("lbfgs", LBFGSFamily(), True))
    return {m.name: m for m in rows}


#: Every linear method by name.
METHODS: dict[str, Method] = _rows()


def reads_curvature(name: str) -> bool:
    """Whether method ``name`` (``auto`` resolved) may need the rows' curvature
    (:attr:`Family.reads_curvature`)."""
    return method(name).family.reads_curvature


def method(name: str) -> Method:
    """The row of ``name`` (a ValueError naming the choices otherwise)."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {name!r}") from None
