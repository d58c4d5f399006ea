r"""L-BFGS with a backtracking line search, as a pure rule over exact rounds of block gradients.

A synchronous round of whole blocks gives the objective and its gradient at the point every task
read,

.. math:: F(\theta) = \frac1N \sum_i f_i(\theta) + \frac{\lambda_2}{2}\|W/s\|^2, \qquad
          \nabla F(\theta) = \frac1N \sum_i \nabla f_i(\theta) + \lambda_2 W / s^2,

from the tasks' loss and gradient sums (the penalty is the driver's). The rule keeps the last
accepted point :math:`x_k` (the model reported) and publishes trial points
:math:`x_k + t\,p_k` along the quasi-Newton direction :math:`p_k = -H_k \nabla F(x_k)`, where
:math:`H_k` is the two-loop recursion over the last ``memory`` pairs
:math:`(s_i, y_i) = (x_{i+1} - x_i, \nabla F(x_{i+1}) - \nabla F(x_i))` with the initial scaling
:math:`H^0 = s^T y / y^T y` of the newest pair (Nocedal & Wright, *Numerical Optimization*,
2nd ed., Algorithm 7.4 and eq. 7.20). A trial point is accepted when it satisfies Armijo's
condition :math:`F(x + t p) \le F(x) + c_1 t \nabla F(x)^T p` (:math:`c_1 = 10^{-4}`); otherwise
the step shrinks to the minimizer of the quadratic through :math:`F(x)`,
:math:`\nabla F(x)^T p` and :math:`F(x + t p)`, clamped to :math:`[0.1 t, 0.5 t]` (Algorithm
3.1 with interpolation, Nocedal & Wright §3.5). Each trial costs one round; most accepted steps
are the first trial, :math:`t = 1`. The first direction is steepest descent with
:math:`t = 1/\|\nabla F\|` (as Breeze's L-BFGS, which pyspark.ml runs).

A pair with :math:`s^T y \le 10^{-10}\, y^T y` is not stored, so :math:`H_k` stays positive
definite without Wolfe's curvature condition (for a convex objective :math:`s^T y \ge 0`
always). A direction that is not one of descent, or a step that shrinks below ``1e-20``, drops
the pairs and restarts from steepest descent; a steepest-descent step that still fails means no
further decrease is representable, and the rule says it has converged, as it does when
:math:`\|\nabla F\|_\infty \le` ``gtol`` :math:`\cdot \max(1, |F|)` or when the decrease a unit
step predicts, :math:`-\nabla F^T p`, is below the rounding of :math:`F`
(:math:`10\,\epsilon_{\text{mach}} |F|`), where the line search could only chase noise.

With an :math:`\ell_1` term :math:`\sum_j \lambda_j |x_j|` (:math:`\lambda_j = \lambda_1 / s_j` on
the weights, 0 on the intercepts) the rule is OWL-QN (Andrew & Gao, "Scalable training of
L1-regularized log-linear models", ICML 2007), which pyspark.ml runs with L1: the gradient is
replaced by the pseudo-gradient :math:`\diamond F` (the subgradient of least norm,
:func:`pseudo_gradient`), the pairs still hold the smooth part's gradients, the direction's
weights whose sign disagrees with :math:`-\diamond F` are set to 0, every trial point is projected
onto the orthant of :math:`x_k` (:math:`\operatorname{sign} x_k`, or
:math:`-\operatorname{sign} \diamond F` where :math:`x_{k,j} = 0`: a weight that would cross zero
stops at zero), and Armijo's condition reads
:math:`F(x') \le F(x) + c_1 \diamond F(x)^T (x' - x)` at the projected point :math:`x'`. Without
:math:`\ell_1` every one of these is the plain L-BFGS step above. The convergence tests read
:math:`\diamond F` for :math:`\nabla F`.

A round that misses rows (a lost block not yet retried) is not used: the same point is evaluated
again. A block given up for good ends the run (``Family.needs_every_block``, in the run loop).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from async_spark.models.linear import LinearModel, penalty_gradient, regularizer
from async_spark.optim._validate import _is_int, check_positive, check_problem_size

__all__ = [
    "LBFGS",
    "LBFGSMessage",
    "LBFGSState",
    "combine_lbfgs_messages",
    "lbfgs",
    "pseudo_gradient",
    "two_loop_direction",
]

ARMIJO = 1e-4  # c1, the sufficient decrease (Nocedal & Wright, §3.1)
MIN_STEP = 1e-20  # a trial step below this: restart from steepest descent
CURVATURE_FLOOR = 1e-10  # keep a pair only when s.y > this * y.y
ROUNDING = 10 * float(np.finfo(np.float64).eps)  # relative changes of F below this are noise


class LBFGSMessage(NamedTuple):
    """A round's sums at the trial point: the data gradient, the loss and the rows counted."""

    grad_sum: np.ndarray
    loss_sum: float
    rows: int
    staleness: int = 0


def combine_lbfgs_messages(messages: Sequence[LBFGSMessage]) -> LBFGSMessage:
    """The sums of a synchronous round (in block order)."""
    if not messages:
        raise ValueError("messages must not be empty")
    return LBFGSMessage(
        np.sum([m.grad_sum for m in messages], axis=0),
        float(sum(m.loss_sum for m in messages)),
        int(sum(m.rows for m in messages)),
        max(m.staleness for m in messages),
    )


class LBFGSState(NamedTuple):
    """The accepted point and what the line search and the quasi-Newton matrix need.

    ``f`` is the whole objective (with the :math:`\\ell_1` term), ``g`` the smooth part's gradient
    (what the pairs difference). ``evaluations == 0``: nothing evaluated yet (the published point
    is the start). ``s``, ``y`` are rings of ``memory`` rows; ``pairs`` of them hold pairs, the
    newest at ``head - 1``."""

    x: np.ndarray
    f: float
    g: np.ndarray
    direction: np.ndarray
    t: float
    s: np.ndarray
    y: np.ndarray
    pairs: int
    head: int
    evaluations: int
    accepted: int
    converged: bool


def two_loop_direction(
    g: np.ndarray, s: np.ndarray, y: np.ndarray, pairs: int, head: int
) -> np.ndarray:
    r""":math:`-H g` by the two-loop recursion over the ring's ``pairs`` newest pairs (none:
    :math:`-g`)."""
    memory = s.shape[0]
    order = [(head - 1 - i) % memory for i in range(pairs)]  # newest first
    q = np.array(g, dtype=np.float64)
    alphas = []
    for j in order:
        rho = 1.0 / float(y[j] @ s[j])
        a = rho * float(s[j] @ q)
        q -= a * y[j]
        alphas.append((j, rho, a))
    if pairs:
        newest = order[0]
        q *= float(s[newest] @ y[newest]) / float(y[newest] @ y[newest])
    for j, rho, a in reversed(alphas):
        b = rho * float(y[j] @ q)
        q += (a - b) * s[j]
    return -q


def pseudo_gradient(x: np.ndarray, g: np.ndarray, weights: np.ndarray | None) -> np.ndarray:
    r"""The subgradient of least norm of :math:`F_s + \sum_j w_j |x_j|` at ``x``, where ``g`` is
    :math:`\nabla F_s` (Andrew & Gao's pseudo-gradient): :math:`g_j + w_j\operatorname{sign} x_j`
    off zero; at :math:`x_j = 0`, :math:`g_j + w_j` if that is negative, :math:`g_j - w_j` if that
    is positive, else 0. ``weights`` None: ``g`` itself (a smooth objective)."""
    if weights is None:
        return g
    right, left = g + weights, g - weights
    at_zero = np.where(right < 0.0, right, np.where(left > 0.0, left, 0.0))
    return np.where(x > 0.0, right, np.where(x < 0.0, left, at_zero))


@dataclass(frozen=True)
class LBFGS:
    """The rule (picklable; ``init``/``update`` as in DESIGN)."""

    model: LinearModel
    n: int
    memory: int = 10
    gtol: float = 1e-10

    def init(self, params: np.ndarray) -> LBFGSState:
        p = self.model.num_params
        if np.shape(params) != (p,):
            raise ValueError(f"params must have shape ({p},), got {np.shape(params)}")
        x = np.array(params, dtype=np.float64)
        zeros = np.zeros((self.memory, p))
        return LBFGSState(
            x, 0.0, np.zeros(p), np.zeros(p), 0.0, zeros, zeros.copy(), 0, 0, 0, 0, False
        )

    @functools.cached_property
    def l1_weights(self) -> np.ndarray | None:
        """:math:`\\lambda_1 / s_j` per weight and 0 per intercept; None without :math:`\\ell_1`."""
        model = self.model
        if model.l1 == 0.0:
            return None
        inverse = model._inverse_scale
        per_column = np.ones(model.num_features) if inverse is None else inverse
        weights = np.zeros(model.num_params)
        penalized = model.outputs * model.num_features
        weights[:penalized] = model.l1 * np.tile(per_column, model.outputs)
        return weights

    def pseudo(self, state: LBFGSState) -> np.ndarray:
        """:math:`\\diamond F` at the accepted point (:math:`\\nabla F` without :math:`\\ell_1`)."""
        return pseudo_gradient(state.x, state.g, self.l1_weights)

    def objective(self, message: LBFGSMessage, params: np.ndarray) -> tuple[float, np.ndarray]:
        """:math:`F` (with the :math:`\\ell_1` term) and the smooth part's gradient at ``params``
        from a whole round's sums."""
        f = message.loss_sum / self.n + regularizer(self.model, params)
        g = np.asarray(message.grad_sum, dtype=np.float64) / self.n
        return f, g + penalty_gradient(self.model, params)

    def update(
        self, message: LBFGSMessage, state: LBFGSState, params: np.ndarray
    ) -> tuple[np.ndarray, LBFGSState]:
        """Judge the trial point ``params`` (where ``message`` was computed); return the next
        point to evaluate and the new state (inputs untouched)."""
        if message.rows != self.n or state.converged:
            return np.array(params), state  # a partial round, or nothing left to do: again
        f, g = self.objective(message, params)
        evaluations = state.evaluations + 1
        if state.evaluations == 0:
            return self._step_from(params, f, g, state, evaluations, accepted=0, first=True)
        slope = float(self.pseudo(state) @ state.direction)
        if np.isfinite(f) and f <= state.f + ARMIJO * self._decrease(state, params, slope):
            return self._accept(params, f, g, state, evaluations)
        t = _backtrack(state.t, state.f, slope, f)
        if t >= MIN_STEP:
            nxt = state._replace(t=t, evaluations=evaluations)
            return self._trial(nxt), nxt
        if state.pairs == 0:  # steepest descent cannot decrease F any more: done
            return np.array(state.x), state._replace(evaluations=evaluations, converged=True)
        reset = state._replace(pairs=0, head=0, evaluations=evaluations)
        return self._direction_from(reset, first=True)

    def _decrease(self, state: LBFGSState, params: np.ndarray, slope: float) -> float:
        """Armijo's first-order decrease to the trial point: :math:`t\\,\\nabla F^T p`, or
        :math:`\\diamond F^T (x' - x)` at OWL-QN's projected point :math:`x'`."""
        if self.l1_weights is None:
            return state.t * slope
        return float(self.pseudo(state) @ (params - state.x))

    def _trial(self, state: LBFGSState) -> np.ndarray:
        """:math:`x + t p`, projected onto the orthant of :math:`x` with :math:`\\ell_1`."""
        point = state.x + state.t * state.direction
        weights = self.l1_weights
        if weights is None:
            return point
        orthant = np.where(state.x != 0.0, np.sign(state.x), -np.sign(self.pseudo(state)))
        point[(weights > 0.0) & (np.sign(point) != orthant)] = 0.0
        return point

    def _accept(
        self, x: np.ndarray, f: float, g: np.ndarray, state: LBFGSState, evaluations: int
    ) -> tuple[np.ndarray, LBFGSState]:
        s_new, y_new = x - state.x, g - state.g
        s, y, pairs, head = state.s, state.y, state.pairs, state.head
        if float(s_new @ y_new) > CURVATURE_FLOOR * float(y_new @ y_new):
            s, y = s.copy(), y.copy()
            s[head], y[head] = s_new, y_new
            head, pairs = (head + 1) % self.memory, min(pairs + 1, self.memory)
        nxt = state._replace(s=s, y=y, pairs=pairs, head=head)
        return self._step_from(x, f, g, nxt, evaluations, accepted=state.accepted + 1, first=False)

    def _step_from(
        self,
        x: np.ndarray,
        f: float,
        g: np.ndarray,
        state: LBFGSState,
        evaluations: int,
        *,
        accepted: int,
        first: bool,
    ) -> tuple[np.ndarray, LBFGSState]:
        at = state._replace(
            x=np.array(x, dtype=np.float64),
            f=float(f),
            g=g,
            evaluations=evaluations,
            accepted=accepted,
        )
        if not np.all(np.isfinite(g)) or not np.isfinite(f):
            raise FloatingPointError("L-BFGS: the objective or its gradient is not finite")
        if float(np.max(np.abs(self.pseudo(at)), initial=0.0)) <= self.gtol * max(1.0, abs(f)):
            return np.array(at.x), at._replace(converged=True)
        return self._direction_from(at, first=first)

    def _direction_from(self, state: LBFGSState, *, first: bool) -> tuple[np.ndarray, LBFGSState]:
        pg = self.pseudo(state)
        p = self._constrained(two_loop_direction(pg, state.s, state.y, state.pairs, state.head), pg)
        if not float(pg @ p) < 0.0:  # lost descent (rounding): restart without the pairs
            state = state._replace(pairs=0, head=0)
            p = -pg
        if -float(pg @ p) <= ROUNDING * max(abs(state.f), 1e-300):
            # a unit step's predicted decrease is below F's rounding: no trial can be judged
            return np.array(state.x), state._replace(direction=p, t=0.0, converged=True)
        t = 1.0
        if state.pairs == 0 and first:  # steepest descent: a unit-length first step (Breeze)
            t = 1.0 / max(float(np.linalg.norm(p)), 1e-300)
        nxt = state._replace(direction=p, t=t)
        return self._trial(nxt), nxt

    def _constrained(self, p: np.ndarray, pg: np.ndarray) -> np.ndarray:
        """OWL-QN's direction: weights whose sign disagrees with :math:`-\\diamond F` set to 0."""
        weights = self.l1_weights
        if weights is None:
            return p
        p[(weights > 0.0) & (p * pg >= 0.0)] = 0.0
        return p


def _backtrack(t: float, f0: float, slope: float, f_t: float) -> float:
    """The next, shorter trial step: the quadratic's minimizer, clamped to [0.1 t, 0.5 t]."""
    if not np.isfinite(f_t):
        return 0.1 * t
    curvature = f_t - f0 - slope * t
    guess = -slope * t * t / (2.0 * curvature) if curvature > 0 else 0.5 * t
    return float(min(max(guess, 0.1 * t), 0.5 * t))


def lbfgs(model: LinearModel, *, n: int, memory: int = 10, gtol: float = 1e-10) -> LBFGS:
    """Validate and build the rule (``memory`` pairs, as pyspark.ml's default ``m = 10``; OWL-QN
    when the model has an :math:`\\ell_1` term)."""
    if not isinstance(model, LinearModel):
        raise ValueError(f"model must be a LinearModel, got {type(model).__name__}")
    n, _ = check_problem_size(n, 1)
    if not _is_int(memory) or memory < 1:
        raise ValueError(f"memory must be an integer >= 1, got {memory!r}")
    return LBFGS(model, n, int(memory), check_positive("gtol", gtol))
