"""Plots for the benchmarks' figures (matplotlib, a dev dependency): the reports draw with
Plotly, the benchmarks write PNG files beside their tables."""

from __future__ import annotations

import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def loglog(frame: Any, x: str, y: str, series: str, title: str) -> bytes:
    """PNG of ``frame``'s ``y`` against ``x`` on log-log axes (x in powers of two), one line
    per value of ``series``: convergence time against n."""
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    for name, part in frame.groupby(series):
        part = part.sort_values(x)
        ax.plot(part[x], part[y], marker="o", label=str(name))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()
