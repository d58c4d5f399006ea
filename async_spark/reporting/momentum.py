r"""Figures of the stochastic momentum reproduction (``async-spark momentum --out DIR``).

:func:`async_spark.theory.reproduce.run_reproduction` measures; this module draws what it
measured, read from its figures dictionary alone (the same one written to ``figures.json``):

- ``w2_contraction.png``: :math:`W_2(\nu_k, \pi)` against k for each κ at σ = 0.1, measured
  and :math:`\rho^k` from the theory;
- ``stationary_spread.png``: :math:`E\|x - x^*\|^2` against κ at σ = 1, measured and theory;
- ``logistic_spread.png``: AG's spread on the logistic regression against α·L for each σ > 0,
  measured and the Lyapunov solution for the Hessian at :math:`w^*`;
- ``weakly_convex.png``: :math:`E f(x_k) - f^*` against k, unconstrained and on the ball.

Matplotlib draws on bare ``Figure`` objects (no pyplot, no backend chosen).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["plot_reproduction"]


def _distinct(values: Any) -> list[Any]:
    """The values in the order they first appear."""
    return list(dict.fromkeys(values))


def plot_reproduction(fig: dict[str, Any], out_dir: str | os.PathLike[str]) -> list[str]:
    """Draw the four figures of ``fig`` (what ``run_reproduction`` returns) into ``out_dir``.

    Returns
    -------
    list of str
        The PNG files written; empty when matplotlib is not installed (said on stdout).
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        print("matplotlib is not installed: no PNG plots (pip install matplotlib)")
        return []
    out = str(out_dir)
    quad = fig["quadratic"]
    kappas = _distinct(r["kappa"] for r in quad)
    methods = _distinct(r["method"] for r in quad)
    written = []

    def save(figure: Any, name: str) -> None:
        path = os.path.join(out, name)
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        written.append(path)

    # (a) W2 decay for each kappa at sigma = 0.1
    fig_a = Figure(figsize=(5 * len(kappas), 4))
    axes = fig_a.subplots(1, len(kappas))
    for ax, kappa in zip(np.atleast_1d(axes), kappas, strict=False):
        for r in quad:
            if r["kappa"] == kappa and r["sigma"] == 0.1:
                ks = np.arange(len(r["w2_curve"])) * r["w2_curve_every"]
                ax.semilogy(ks, r["w2_curve"], label=f"{r['method']} measured")
                ax.semilogy(
                    ks,
                    r["w2_curve"][0] * r["rate_theory"] ** ks,
                    "--",
                    label=f"{r['method']} rho^k theory",
                )
        ax.set_title(f"W2(nu_k, pi), kappa={kappa}, sigma=0.1")
        ax.set_xlabel("k")
        ax.legend(fontsize=7)
    save(fig_a, "w2_contraction.png")
    # (c) spread vs kappa
    fig_c = Figure(figsize=(6, 4))
    ax = fig_c.subplots()
    for m in methods:
        rows = [r for r in quad if r["method"] == m and r["sigma"] == 1.0]
        ax.loglog(
            [r["kappa"] for r in rows], [r["spread_measured"] for r in rows], "o", label=f"{m} meas"
        )
        ax.loglog([r["kappa"] for r in rows], [r["spread_theory"] for r in rows], "-", label=m)
    ax.set_xlabel("kappa")
    ax.set_ylabel("E||x - x*||^2 (sigma = 1)")
    ax.legend(fontsize=7)
    save(fig_c, "stationary_spread.png")
    # (d) logistic spread vs alpha per sigma
    logistic = fig["logistic"]["rows"]
    fig_d = Figure(figsize=(6, 4))
    ax = fig_d.subplots()
    for sigma in [s for s in _distinct(r["sigma"] for r in logistic) if s > 0]:
        rows = [r for r in logistic if r["sigma"] == sigma]
        ax.loglog(
            [r["alpha_times_L"] for r in rows],
            [r["spread_measured"] for r in rows],
            "o",
            label=f"sigma={sigma} measured",
        )
        ax.loglog(
            [r["alpha_times_L"] for r in rows],
            [r["spread_theory_linearized"] for r in rows],
            "-",
            label=f"sigma={sigma} Lyapunov (Hessian at w*)",
        )
    ax.set_xlabel("alpha * L")
    ax.set_ylabel("E||x - w*||^2")
    ax.set_title("AG on logistic regression (breast_cancer)")
    ax.legend(fontsize=7)
    save(fig_d, "logistic_spread.png")
    # (e) weakly convex curves
    wk = fig["weakly_convex"]
    fig_e = Figure(figsize=(11, 4))
    axes = fig_e.subplots(1, 2)
    for ax, part in zip(axes, ("unconstrained", "ball"), strict=False):
        for sigma_key, runs in wk[part].items():
            if not isinstance(runs, dict):
                continue
            for m, r in runs.items():
                g = np.asarray(r["gap_curve"])
                ks = np.arange(g.size) * wk["curve_every"]
                ax.loglog(ks[1:], g[1:], label=f"{m} sigma={sigma_key}")
        ax.set_title(f"E f(x_k) - f*, {part}")
        ax.set_xlabel("k")
        ax.legend(fontsize=6)
    save(fig_e, "weakly_convex.png")
    return written
