"""Progress of an analysis on the terminal: a bar over its steps, Spark's stages beside it.

An analysis is a fixed list of steps (:data:`pubmesh.analysis.job.STEPS`: each metric table
computed, the tables written, the plots' data, the report), so the bar knows its end from the
start. Within a step Spark runs a few stages; the line shows the running stage's tasks and how
many stages are done, read from Spark itself: the status tracker of an embedded session
(polled from a thread), or the progress messages a Spark Connect server streams with every
result (``SparkSession.registerProgressHandler``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pubmesh.analysis.spark import is_connect


class StageCounter:
    """Spark stages seen done, and the running one's tasks, from either source."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: set[int] = set()
        self.running: tuple[int, int, int] | None = None  # stage id, tasks done, tasks

    def seen(self, stage: int, completed: int, tasks: int, finished: bool) -> None:
        with self.lock:
            if finished:
                self.done.add(stage)
                if self.running is not None and self.running[0] == stage:
                    self.running = None
            else:
                self.running = (stage, completed, tasks)

    def text(self) -> str:
        with self.lock:
            line = f"{len(self.done)} Spark stages done"
            if self.running is not None:
                stage, completed, tasks = self.running
                line += f", stage {stage}: {completed}/{tasks} tasks"
            return line


class ConnectHandler:
    """A Spark Connect progress handler feeding a :class:`StageCounter`."""

    def __init__(self, counter: StageCounter) -> None:
        self.counter = counter

    def __call__(
        self, stages: Iterable[Any] | None, inflight_tasks: int, operation_id: str | None,
        done: bool,
    ) -> None:  # fmt: skip
        for stage in stages or ():
            self.counter.seen(
                int(stage.stage_id), int(stage.num_completed_tasks), int(stage.num_tasks),
                bool(stage.done) or done,
            )  # fmt: skip


class AnalysisProgress:
    """``with AnalysisProgress(spark, console, steps) as progress: ... progress.step(name)``."""

    def __init__(self, spark: Any, console: Console, steps: Sequence[str]) -> None:
        self.spark = spark
        self.counter = StageCounter()
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[spark]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        self.steps = list(steps)
        self.task = self.bar.add_task("analysing", total=len(steps), spark="")
        self.stopping = threading.Event()
        self.handler: ConnectHandler | None = None
        self.poller: threading.Thread | None = None

    def step(self, name: str) -> None:
        """The analysis starts ``name`` (the bar counts the steps before it done)."""
        self.bar.update(
            self.task, description=name, completed=self.steps.index(name),
            spark=self.counter.text(),
        )  # fmt: skip

    def _poll(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        active: set[int] = set()
        while not self.stopping.wait(0.2):
            now = set(tracker.getActiveStageIds())
            for stage in active - now:
                self.counter.seen(stage, 0, 0, True)
            for stage in now:
                info = tracker.getStageInfo(stage)
                if info is not None:
                    self.counter.seen(stage, info.numCompletedTasks, info.numTasks, False)
            active = now
            self.bar.update(self.task, spark=self.counter.text())

    def __enter__(self) -> AnalysisProgress:
        self.bar.start()
        register = getattr(self.spark, "registerProgressHandler", None)
        if register is not None and is_connect(self.spark):
            self.handler = ConnectHandler(self.counter)
            register(self.handler)
        else:
            self.poller = threading.Thread(target=self._poll, name="spark-progress", daemon=True)
            self.poller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        if self.poller is not None:
            self.poller.join()
        if self.handler is not None:
            self.spark.removeProgressHandler(self.handler)
        self.bar.stop()
