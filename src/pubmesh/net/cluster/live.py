"""What a person watching ``pubmesh cluster`` sees: the live table, then the summary.

While the run lasts (on a terminal, without ``--quiet``) a :mod:`rich` table, redrawn four
times a second, shows every node: its index, address, role and state, its topics, its
overlay neighbours (as node indexes, the first eight), its deliveries and its frame counters —
all from the node's latest ``stats`` line; a legend under the table (:data:`LEGEND`) says what
the less obvious columns count (``dropped``, ``refused``). At the end a summary table gives the
headline figures of the gathered run (:func:`.gather.summarize`) and the next command.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pubmesh.net.address import format_id
from pubmesh.net.cluster.gather import summarize

if TYPE_CHECKING:
    from rich.table import Table

    from pubmesh.net.cluster.controller import Cluster

COLUMNS = (
    "node",
    "address",
    "role",
    "state",
    "topics",
    "neighbours",
    "deliveries",
    "frames out",
    "frames in",
    "dropped",
    "refused",
)
LEFT_ALIGNED = ("address", "role", "state")
#: what the less obvious columns count, said under the table
LEGEND = (
    "dropped: messages this node's transport gave up sending (the queue to a peer full, the "
    "peer unreachable or banned, a message too large); refused: connections and frames it "
    "refused (a wrong key or certificate, bad frames, a silent or slow peer); neighbours: "
    "node indexes"
)
#: neighbours shown per node
SHOWN_NEIGHBOURS = 8


def start_live_table(cluster: Cluster) -> asyncio.Task[None]:
    """Redraw :func:`render_table` until the task is cancelled."""
    return asyncio.ensure_future(_live_table(cluster))


async def _live_table(cluster: Cluster) -> None:
    from rich.live import Live

    with Live(render_table(cluster), refresh_per_second=4, transient=False) as live:
        while True:
            await asyncio.sleep(0.25)
            live.update(render_table(cluster))


def render_table(cluster: Cluster) -> Table:
    """The table as it stands now."""
    from rich.table import Table

    run = cluster.scenario.run
    shown = min(cluster.now(), run.duration + cluster.publish_shift) if cluster.loop else 0.0
    title = (
        f"pubmesh cluster: {run.stack}, {run.nodes} nodes, t = {shown:5.1f} / "
        f"{run.duration:.0f} s, {cluster.publications_done} publications"
    )
    table = Table(title=title, caption=LEGEND, caption_justify="left")
    for column in COLUMNS:
        table.add_column(column, justify="left" if column in LEFT_ALIGNED else "right")
    id_map = cluster.id_map
    for child in cluster.children:
        stats = child.stats
        neighbours = (
            {n for ids in stats.neighbors.values() for n in ids} if stats is not None else set()
        )
        ordered = sorted(neighbours, key=lambda n: id_map.get(n, 1 << 60))
        table.add_row(
            str(child.index),
            format_id(child.node_id) if child.node_id else "-",
            child.role,
            child.state.label,
            str(len(stats.subscriptions) if stats is not None else 0),
            " ".join(str(id_map.get(n, "?")) for n in ordered[:SHOWN_NEIGHBOURS])
            + (" ..." if len(neighbours) > SHOWN_NEIGHBOURS else ""),
            str(stats.deliveries if stats is not None else 0),
            str(stats.frames_sent if stats is not None else 0),
            str(stats.frames_received if stats is not None else 0),
            str(stats.dropped if stats is not None else 0),
            str(stats.rejected if stats is not None else 0),
        )
    return table


def print_summary(out: Path, stats: dict[str, Any]) -> None:
    """The summary of a gathered run (``stats`` as in its ``run.json``)."""
    from rich.console import Console
    from rich.table import Table

    figures = summarize(out)
    table = Table(title=f"pubmesh cluster: {stats['stack']}, {stats['nodes']} nodes")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("publications", f"{stats['publications']:,}")
    table.add_row("deliveries", f"{stats['deliveries']:,}")
    table.add_row("reliability (expected pairs delivered)", f"{figures['reliability']:.4f}")
    table.add_row(
        "latency p50 / p99 (ms)",
        f"{figures['latency_p50'] * 1000:.1f} / {figures['latency_p99'] * 1000:.1f}",
    )
    table.add_row("messages", f"{stats['messages']:,}")
    table.add_row("nodes killed", str(len(stats["killed"])))
    up = stats["overlay_up_at"]
    table.add_row("overlay up after (s)", "never" if up is None else f"{up:.2f}")
    if stats.get("overlay_not_ready"):
        table.add_row("not ready at the first publication", str(stats["overlay_not_ready"]))
    if stats["publish_shift"]:
        table.add_row("schedule shifted by (s, --wait-overlay)", f"{stats['publish_shift']:.2f}")
    console = Console()
    console.print(table)
    if stats["unexpected_exits"]:
        console.print(f"[red]nodes that exited on their own: {stats['unexpected_exits']}[/]")
    for index, error in sorted(stats.get("trace_errors", {}).items()):
        console.print(f"[red]node {index}'s trace is incomplete: {error}[/]")
    console.print(f"trace: [bold]{out}[/]; next: pubmesh analyze {out}")
