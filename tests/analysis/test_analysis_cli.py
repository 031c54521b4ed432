"""Bad input to `pubmesh analyze` and `pubmesh sweep`: one line naming the file, exit 2.

Each case starts from a real simulated run directory and breaks one thing, then runs the real
CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pubmesh.analysis.warm import is_server
from support.browser import assert_renders

ROOT = Path(__file__).resolve().parents[2]


def pubmesh(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubmesh", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


# one worker runs this module, so its expensive fixture is built once (make test runs
# --dist loadgroup)
pytestmark = pytest.mark.xdist_group("analysis_cli")


# session scope, not module: a module fixture is torn down whenever the worker runs another
# module's test in between, and under xdist that rebuilt it (~220 s) within one run
@pytest.fixture(scope="session")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("good") / "run"
    done = pubmesh(
        "sim", str(ROOT / "scenarios" / "paper004.toml"), "--quiet", "--out", str(out),
        "--set", "workload.publications=20", "--set", "run.duration=60",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def _drop_table(run: Path) -> Path:
    shutil.rmtree(run / "deliveries")
    return run / "deliveries"


def _corrupt(run: Path) -> Path:
    path = run / "publications" / "part-00000.parquet"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated: no footer
    return path


def _newer_version(run: Path) -> Path:
    path = run / "runs" / "part-00000.parquet"
    table = pq.read_table(path)
    index = table.schema.get_field_index("schema_version")
    table = table.set_column(index, "schema_version", pa.array([99], type=pa.int32()))
    pq.write_table(table, path)
    return run / "runs"


def _empty(run: Path) -> Path:
    path = run / "runs" / "part-00000.parquet"
    pq.write_table(pq.read_table(path).slice(0, 0), path)
    return run / "runs"


def _wrong_type(run: Path) -> Path:
    path = run / "deliveries" / "part-00000.parquet"
    table = pq.read_table(path)
    index = table.schema.get_field_index("hops")
    table = table.set_column(index, "hops", table.column("hops").cast(pa.string()))
    pq.write_table(table, path)
    return path


def _not_a_run(run: Path) -> Path:
    for child in run.iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    return run


BREAKS: dict[str, tuple[Callable[[Path], Path], str]] = {
    "missing table": (_drop_table, "missing table"),
    "corrupt parquet": (_corrupt, "not a readable Parquet file"),
    "newer schema version": (_newer_version, "schema_version 99 is newer"),
    "empty run": (_empty, "empty run"),
    "wrong column type": (_wrong_type, "column 'hops'"),
    "not a run directory": (_not_a_run, "not a trace v1 run directory"),
}


@pytest.mark.parametrize("case", sorted(BREAKS))
def test_analyze_refuses_a_broken_trace_in_one_line(
    case: str, good_run: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    breaker, words = BREAKS[case]
    named = breaker(run)
    done = pubmesh("analyze", str(run), "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(named) in lines[0] and words in lines[0], lines[0]
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_analyze_refuses_a_directory_that_does_not_exist(tmp_path: Path) -> None:
    done = pubmesh("analyze", str(tmp_path / "nope"))
    assert done.returncode == 2
    assert done.stderr.strip() == f"pubmesh: error: {tmp_path / 'nope'}: no such run directory"


GRIDS = {
    "unknown key": ('base = "x.toml"\nseedz = 3\n', "unknown key 'seedz'"),
    "not toml": ("base = \n", "not valid TOML"),
    "empty values": (
        f'base = "{ROOT / "scenarios" / "paper004.toml"}"\n[grid]\n"run.nodes" = []\n',
        "[grid] run.nodes must be a non-empty array",
    ),
    "bad value at a point": (
        f'base = "{ROOT / "scenarios" / "paper004_fail50.toml"}"\n'
        '[grid]\n"faults.0.fraction" = [0.5, 1.5]\n',
        "grid point faults.0.fraction=1.5",
    ),
    "missing base": ('base = "nowhere.toml"\n', "nowhere.toml: no such scenario file"),
}


@pytest.mark.parametrize("case", sorted(GRIDS))
def test_sweep_refuses_a_broken_grid_in_one_line(case: str, tmp_path: Path) -> None:
    text, words = GRIDS[case]
    grid = tmp_path / "grid.toml"
    grid.write_text(text)
    done = pubmesh("sweep", str(grid), "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(grid) in lines[0] and words in lines[0], done.stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="session")
def embedded(
    good_run: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``pubmesh analyze`` of the good run on Spark embedded in the command: its output
    directory and the finished process. The warm Spark's state directory is one others can
    enter (as if planted by another user): the command must not trust it, say so, and
    analyse on its own Spark."""
    base = tmp_path_factory.mktemp("embedded")
    planted = base / "state"
    planted.mkdir()
    planted.chmod(0o777)
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", "analyze", str(good_run), "--out", str(base / "a")],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "PUBMESH_SPARK_STATE": str(planted)},
    )  # fmt: skip
    return base / "a", done


def test_analyze_cli_writes_report_and_prints_the_run_table(
    embedded: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    out, done = embedded
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    [row] = summary["runs"]
    assert row["stack"] == "gossip" and row["publications"] == 20
    assert row["reliability"] == 1.0  # no faults in paper004
    assert "reliability" in done.stdout and row["run_id"] in done.stdout
    assert (out / "report.html").stat().st_size > 10_000
    # quiet: the JVM's start-up lines go to its log, not the terminal; the report's address,
    # one a terminal can open, comes last
    assert "WARNING" not in done.stderr and "log level" not in done.stderr, done.stderr
    # the planted state directory (see the fixture) is named, and the analysis ran anyway
    [warning] = done.stderr.strip().splitlines()
    assert warning.startswith("warning: not using a warm Spark: ") and "open to others" in warning
    assert "local[*])" in done.stdout, done.stdout  # "(… s on local[*])": embedded
    last = done.stdout.strip().splitlines()[-1]
    assert last == f"report: {(out / 'report.html').resolve().as_uri()}", last
    # opened in headless Chromium: every plot drew, no JavaScript error, nothing fetched
    shown = assert_renders(out / "report.html", tmp_path / "analyze.png", min_charts=5)
    assert row["run_id"] in shown.text and "latency" in shown.text.lower()
    # the report opens with the sentence that answers it, in the run's own figures
    nodes, p50 = row["nodes"], round(row["latency_p50"] * 1000)
    headline = f"{nodes:,} gossip nodes: 100.00% of the expected deliveries made, latency p50 "
    assert headline + f"{p50:,} ms" in " ".join(shown.text.split()), shown.text[:400]
    # legends name the run without its id's hash; each heading says what it measures
    report = (out / "report.html").read_text()
    label = row["run_id"].rsplit("-", 1)[0]
    assert f'"name":"{label}"' in report and f'"name":"{row["run_id"]}"' not in report
    assert "title='delivered ÷ expected (subscriber, publication) pairs" in report


def test_a_java_older_than_17_is_named_in_one_line(good_run: Path, tmp_path: Path) -> None:
    fake = tmp_path / "jdk" / "bin"
    fake.mkdir(parents=True)
    java = fake / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    java.chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", "analyze", str(good_run), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "JAVA_HOME": str(fake.parent)},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"pubmesh: error: {java} is Java 11; Spark 4 needs Java 17 or newer "
        "(install openjdk-17 and set JAVA_HOME)"
    ]


def test_missing_java_is_named_in_one_line(good_run: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", "analyze", str(good_run), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(tmp_path)},  # no java anywhere, no JAVA_HOME
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("pubmesh: error: Spark needs Java 17 or newer and none was found")


@pytest.mark.parametrize("command", ["analyze", "sweep", "demo"])
def test_static_without_chromium_is_named_in_one_line(
    command: str, good_run: Path, tmp_path: Path
) -> None:
    """--static draws PNGs in headless Chromium: without one, one line before any work."""
    target = {
        "analyze": [str(good_run)],
        "sweep": [str(ROOT / "scenarios" / "grids" / "paper004_failures.toml")],
        "demo": [],
    }[command]
    done = subprocess.run(
        [sys.executable, "-m", "pubmesh", command, *target, "--static",
         "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(tmp_path)},  # no browser on PATH, no BROWSER_PATH
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("pubmesh: error: --static draws the charts as PNG in headless Chromium")
    assert "apt-get install chromium" in line
    assert not (tmp_path / "o").exists()


def _spark(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubmesh", *args], capture_output=True, text=True, timeout=600,
        cwd=ROOT, env={**os.environ, "PUBMESH_SPARK_STATE": str(state)},
    )  # fmt: skip


def _warm_record(state: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((state / "warm.json").read_text())
    return record


def test_a_warm_spark_serves_later_analyses_with_the_same_results(
    good_run: Path, embedded: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    """`pubmesh spark start` keeps one Spark Connect server that every later analyze uses:
    the same metrics as Spark embedded in the command, the same server process
    for the second call, 127.0.0.1 and a token kept private, and `stop` ends it."""
    state = tmp_path / "state"
    assert _spark(state, "spark", "status").returncode == 1
    started = _spark(state, "spark", "start", "--idle", "10")
    try:
        assert started.returncode == 0, started.stderr
        assert "warm Spark runs at sc://localhost:" in started.stdout, started.stdout
        record = _warm_record(state)
        pid, token = record["pid"], record["token"]
        # only this user can read the token; it is on no command line
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        assert stat.S_IMODE((state / "warm.json").stat().st_mode) == 0o600
        assert len(token) >= 40 and token not in Path(f"/proc/{pid}/cmdline").read_text()
        port = f":{record['port']:04X}"
        bound = [
            line.split()[1]
            for table in ("/proc/net/tcp", "/proc/net/tcp6")
            for line in Path(table).read_text().splitlines()[1:]
            if line.split()[1].endswith(port) and line.split()[3] == "0A"  # listening
        ]
        # 127.0.0.1 only (Netty's socket may be IPv6 holding it as ::ffff:127.0.0.1)
        loopback = {f"0100007F{port}", f"0000000000000000FFFF00000100007F{port}"}
        assert bound and set(bound) <= loopback, bound
        reference = json.loads((embedded[0] / "summary.json").read_text())["runs"]
        out = tmp_path / "a"
        done = _spark(state, "analyze", str(good_run), "--out", str(out))
        assert done.returncode == 0, done.stderr
        assert "on Spark Connect" in done.stdout, done.stdout  # no JVM of its own
        assert json.loads((out / "summary.json").read_text())["runs"] == reference
        assert (out / "report.html").stat().st_size > 10_000
        assert _warm_record(state)["pid"] == pid and is_server(pid)  # the same, still up
        # it warmed itself up with an analysis of its own (the first call above may have
        # come before the end of it: wait for it here)
        deadline = time.monotonic() + 120
        while "warmed up in" not in (state / "spark.log").read_text():
            assert time.monotonic() < deadline, (state / "spark.log").read_text()[-2000:]
            time.sleep(0.5)
        status = _spark(state, "spark", "status")
        assert status.returncode == 0 and f"pid {pid}" in status.stdout, status.stdout
        assert "PySpark 4.3.0, warm)" in " ".join(status.stdout.split()), status.stdout
        # a client without the token is refused
        refused = subprocess.run(
            [sys.executable, "-c",
             "from pyspark.sql import SparkSession\n"
             f"s = SparkSession.builder.remote('sc://localhost:{record['port']}/;token=x')"
             ".getOrCreate()\nprint(s.range(2).count())"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stderr, refused.stderr
    finally:
        stopped = _spark(state, "spark", "stop")
    assert stopped.returncode == 0 and stopped.stdout.strip() == "warm Spark stopped"
    assert not is_server(pid) and not (state / "warm.json").exists()
    assert _spark(state, "spark", "status").returncode == 1


def test_a_warm_spark_stops_itself_when_idle(tmp_path: Path) -> None:
    state = tmp_path / "state"
    started = _spark(state, "spark", "start", "--idle", "0.05", "--no-warm-up")  # 3 s
    try:
        assert started.returncode == 0, started.stderr
        pid = _warm_record(state)["pid"]
        deadline = time.monotonic() + 60
        while is_server(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not is_server(pid), "the idle server still runs after 60 s"
        assert not (state / "warm.json").exists()
        assert "idle for 0.05 min: stopping" in (state / "spark.log").read_text()
    finally:
        _spark(state, "spark", "stop")


def test_a_warm_spark_refuses_a_state_directory_others_can_enter(tmp_path: Path) -> None:
    state = tmp_path / "open"
    state.mkdir(mode=0o777)
    state.chmod(0o777)
    done = _spark(state, "spark", "start")
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"pubmesh: error: {state}: owned by another user or open to others")
    assert not (state / "warm.json").exists()


def test_the_jvm_logs_are_kept_to_the_newest_few_in_a_private_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every embedded analysis logs its JVM's output to a file of its own; the per-user log
    directory keeps the newest KEPT_LOGS of them, and a directory others may write into is not
    used at all (a name in it could be a link to one of our files)."""
    import tempfile

    from pubmesh.analysis import spark

    monkeypatch.delenv("PUBMESH_SPARK_LOG", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    logs = tmp_path / f"pubmesh-spark-logs-{os.getuid()}"
    logs.mkdir(mode=0o700)
    for age in range(30):  # older and older
        old = logs / f"spark-{100 + age}.log"
        old.write_text("a JVM warning\n")
        os.utime(old, (1_000_000 - age, 1_000_000 - age))
    path = spark.jvm_log()
    assert path.parent == logs and path.name == f"spark-{os.getpid()}.log"
    kept = sorted(p.name for p in logs.glob("spark-*.log"))
    assert kept == sorted(f"spark-{100 + age}.log" for age in range(spark.KEPT_LOGS - 1)), kept
    assert stat.S_IMODE(logs.stat().st_mode) == 0o700

    logs.chmod(0o777)
    elsewhere = spark.jvm_log()
    assert elsewhere.parent != logs and elsewhere.exists(), elsewhere
    assert len(list(logs.glob("spark-*.log"))) == spark.KEPT_LOGS - 1, (
        "an open directory is left alone"
    )


def test_a_chromium_that_never_answers_costs_a_deadline_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kaleido has no deadline for starting the browser: a Chromium that never answered once
    hung a --static report until the test suite's timeout. The drawing runs in a child
    process of its own session, killed with the browser it started at the deadline, tried
    once more, then one error; nothing it started is left running."""
    import plotly.graph_objects as go

    from pubmesh.analysis import draw

    hung = tmp_path / "chromium"
    marker = tmp_path / "started"
    hung.write_text(f"#!/bin/sh\necho $$ >> {marker}\nexec sleep 600\n")
    hung.chmod(0o755)
    # long enough for the drawing process to start Python, Plotly and Kaleido and launch the
    # "browser" on a loaded machine (each attempt must reach it), short for a test
    monkeypatch.setattr(draw, "DEADLINE", 10.0)
    figure = go.Figure(go.Scatter(x=[1, 2], y=[3, 4])).to_json()
    started = time.monotonic()
    with pytest.raises(draw.DrawError, match="Chromium did not finish within 10 s"):
        draw.draw([figure], [tmp_path / "a.png"], 100, 1, str(hung))
    assert time.monotonic() - started < draw.DEADLINE * draw.ATTEMPTS + 10
    pids = [int(p) for p in marker.read_text().split()]
    assert len(pids) == draw.ATTEMPTS, "each attempt started the browser"
    assert not [pid for pid in pids if _running(pid)], "a browser was left running"
    assert not (tmp_path / "a.png").exists()


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet does not)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"
