"""async_spark.theory: what the stochastic momentum paper proves, as numpy/scipy code.

Can, Gürbüzbalaban & Zhu, "Accelerated Linear Convergence of Stochastic Momentum Methods in
Wasserstein Distances" (ICML 2019, arXiv:1901.07445): rates of GD/HB/AG on quadratics
(:func:`momentum_rate`), the stationary covariance of the iterates under additive noise
(:func:`stationary_covariance`), Wasserstein distances and the AG noise bound / ball radius
(:mod:`async_spark.theory.wasserstein`), and the reproduction of the paper's claims
(:func:`run_reproduction`, imported lazily from :mod:`async_spark.theory.reproduce`).
"""

from typing import Any

from async_spark.theory.covariance import iterate_law, noise_covariance, stationary_covariance
from async_spark.theory.rates import characteristic_roots, iteration_matrix, momentum_rate
from async_spark.theory.wasserstein import (
    ag_invariant_radius,
    ag_iterations,
    ag_lyapunov_bound,
    ag_lyapunov_matrix,
    ag_lyapunov_value,
    ag_noise_bound,
    sqrtm_psd,
    w1_empirical,
    w2_empirical,
    w2_gaussian,
    wasserstein_empirical,
)

__all__ = [
    "momentum_rate",
    "characteristic_roots",
    "iteration_matrix",
    "stationary_covariance",
    "noise_covariance",
    "iterate_law",
    "w2_gaussian",
    "wasserstein_empirical",
    "w1_empirical",
    "w2_empirical",
    "sqrtm_psd",
    "ag_lyapunov_matrix",
    "ag_lyapunov_value",
    "ag_lyapunov_bound",
    "ag_invariant_radius",
    "ag_noise_bound",
    "ag_iterations",
    "run_reproduction",
]


def run_reproduction(
    out_dir: Any = None, quick: bool = False, seed: int = 0, plot: Any = None
) -> dict:
    """Run the reproduction of the paper's claims; see :func:`async_spark.theory.reproduce.run_reproduction`."""
    from async_spark.theory.reproduce import run_reproduction as _run

    return _run(out_dir=out_dir, quick=quick, seed=seed, plot=plot)
