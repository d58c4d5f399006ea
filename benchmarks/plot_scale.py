"""Speedup vs emulated workers P from the JSON files of ``benchmarks/scale.py --json``.

Usage: python benchmarks/plot_scale.py OUT.png RESULTS.json [RESULTS.json ...]
"""

from __future__ import annotations

import json
import sys

from matplotlib.figure import Figure


def main(argv: list[str]) -> None:
    out, *paths = argv
    rows = [r for p in paths for r in json.load(open(p))]
    fig = Figure(figsize=(7, 4.2), constrained_layout=True)
    ax = fig.subplots()
    for pair in ("asaga/saga", "asgd/sgd"):
        for stragglers, style in (("cloud", "-o"), ("intensity:1.0", "--s")):
            pts = sorted(
                (r["P"], r["speedup"])
                for r in rows
                if r["pair"] == pair and r["stragglers"] == stragglers and r.get("speedup")
            )
            if pts:
                ax.plot(
                    [p for p, _ in pts], [s for _, s in pts], style, label=f"{pair}, {stragglers}"
                )
    ax.axhline(4.0, color="gray", lw=0.8, ls=":", label="ASYNC's 4x (32 nodes)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("emulated workers P")
    ax.set_ylabel("speedup to the common objective")
    ax.set_title("Emulated ASYNC experiment (rcv1 shape, cloud / intensity 1 stragglers)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1:])
