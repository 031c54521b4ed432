"""PNG plots for the reports (matplotlib, Agg backend, no display needed).

Every function takes small pandas frames that Spark has already aggregated (a CDF sampled at
101 points, buckets, histograms), never the raw trace, and returns PNG bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

MAX_LEGEND = 10


def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    return buffer.getvalue()


def _legend(ax: Any, labels: int) -> None:
    if 0 < labels <= MAX_LEGEND:
        ax.legend(fontsize=7, loc="best")


def latency_cdf(cdf: Any) -> bytes:
    """cdf: run_id, q (0..1), latency (seconds)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    runs = sorted(cdf["run_id"].unique())
    for run_id in runs:
        part = cdf[cdf["run_id"] == run_id].sort_values("q")
        ax.plot(part["latency"] * 1000, part["q"], label=run_id, linewidth=1.2)
    ax.set_xlabel("publish → first delivery (ms)")
    ax.set_ylabel("fraction of deliveries")
    ax.set_title("Latency CDF")
    ax.grid(alpha=0.3)
    _legend(ax, len(runs))
    return _png(fig)


def reliability_over_time(buckets: Any, faults: Any, bucket_seconds: float) -> bytes:
    """buckets: run_id, bucket_t, reliability; faults: run_id, t, kind."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    runs = sorted(buckets["run_id"].unique())
    for run_id in runs:
        part = buckets[buckets["run_id"] == run_id].sort_values("bucket_t")
        ax.step(part["bucket_t"], part["reliability"], where="post", label=run_id, linewidth=1.2)
    marked: set[str] = set()
    for _, row in faults.sort_values("t").iterrows():
        label = None if row["kind"] in marked else f"fault: {row['kind']}"
        marked.add(row["kind"])
        ax.axvline(row["t"], color="crimson", linestyle="--", linewidth=0.9, label=label)
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel(f"publish time (s, buckets of {bucket_seconds:g} s)")
    ax.set_ylabel("reliability")
    ax.set_title("Reliability of publications by publish time (faults dashed)")
    ax.grid(alpha=0.3)
    _legend(ax, len(runs) + len(marked))
    return _png(fig)


def histogram(
    frame: Any, value: str, weight: str, title: str, xlabel: str, *, log: bool = False
) -> bytes:
    """frame: run_id, <value>, <weight> (a histogram already counted by Spark)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    runs = sorted(frame["run_id"].unique())
    width = 0.8 / max(1, len(runs)) if len(runs) <= MAX_LEGEND else 0.8
    for i, run_id in enumerate(runs):
        part = frame[frame["run_id"] == run_id].sort_values(value)
        offset = (i - (len(runs) - 1) / 2) * width if len(runs) <= MAX_LEGEND else 0
        ax.bar(part[value] + offset, part[weight], width=width, label=run_id, alpha=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("nodes")
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    _legend(ax, len(runs))
    return _png(fig)


def messages_per_second(frame: Any) -> bytes:
    """frame: second, type, sent (summed over the runs analysed)."""
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    types = sorted(frame["type"].unique())
    for name in types:
        part = frame[frame["type"] == name].sort_values("second")
        ax.plot(part["second"], part["sent"], label=name, linewidth=1.0)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("messages sent per second")
    ax.set_title("Messages per second by type")
    ax.grid(alpha=0.3)
    if types:
        ax.legend(fontsize=6, loc="upper right", ncol=2)
    return _png(fig)


def metric_against(
    frame: Any, parameter: str, metric: str, series: Sequence[str], categorical: bool
) -> bytes:
    """frame: <parameter>, <metric>_mean, <metric>_std and the ``series`` columns (one line
    per combination of the other swept parameters)."""
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    groups = frame.groupby(list(series)) if series else [((), frame)]
    count = 0
    for key, part in groups:
        part = part.sort_values(parameter)
        keys = key if isinstance(key, tuple) else (key,)
        label = ", ".join(f"{s}={k}" for s, k in zip(series, keys, strict=False)) or metric
        x = part[parameter].astype(str) if categorical else part[parameter]
        ax.errorbar(
            x, part[f"{metric}_mean"], yerr=part[f"{metric}_std"].fillna(0),
            marker="o", capsize=3, linewidth=1.2, label=label,
        )  # fmt: skip
        count += 1
    values = frame[parameter]
    if not categorical and len(values) and values.min() > 0 and values.max() >= 50 * values.min():
        ax.set_xscale("log")  # sizes 100 … 10,000: equal steps for equal ratios
    ax.set_xlabel(parameter)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} against {parameter} (mean ± sd over seeds)")
    ax.grid(alpha=0.3)
    _legend(ax, count)
    return _png(fig)


def loglog(frame: Any, x: str, y: str, series: str, title: str) -> bytes:
    """frame: <x>, <y>, <series>: log-log lines (convergence time against n)."""
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
    return _png(fig)
