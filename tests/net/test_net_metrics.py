"""Live metrics, scraped by a real Prometheus.

A running node was observable only through its shell, its JSON lines and the trace after the
fact. ``pubmesh node --metrics HOST:PORT`` now serves OpenMetrics (:mod:`pubmesh.net.metrics`),
and ``pubmesh cluster --metrics`` writes the scrape configuration for all its nodes.

The cluster test runs Debian's ``prometheus`` (started by the fixture on a free loopback port
with its own storage, and always stopped) on the configuration the cluster wrote, lets it
scrape the run, and checks what Prometheus stored against the run's trace: every node's
deliveries and publications, exactly. A second test scrapes one node by hand: both
exposition formats, ``/healthz``, a stranger's junk and a silent socket.
"""

from __future__ import annotations

import collections
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from support.netnode import NodeProcess, node_env, real_stacks

STACK = "gossip" if "gossip" in real_stacks() else real_stacks()[0]
NODES = 6
WORKLOAD = """
[run]
duration = 14.0
[workload]
topics = 1
subscriptions_per_node = 1
publications = 60
publish_start = 2.0
publish_rate = 20.0
payload_size = 100
"""

pytestmark = pytest.mark.xdist_group("net_metrics")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


class Prometheus:
    """A real prometheus server on a scrape configuration, with storage in ``directory``."""

    def __init__(self, config: Path, directory: Path) -> None:
        binary = shutil.which("prometheus")
        assert binary, "prometheus is not installed (make test installs Debian's package)"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = directory / "prometheus.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={directory / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                if _get(f"{self.url}/-/ready")[0] == 200:
                    break
            except OSError:
                pass
            assert self.process.poll() is None, self.log.read_text()[-2000:]
            assert time.monotonic() < deadline, "prometheus did not become ready"
            time.sleep(0.2)

    def query(self, expression: str) -> dict[str, float]:
        """An instant query: node index -> value."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
        status, _, body = _get(url)
        answer = json.loads(body)
        assert status == 200 and answer["status"] == "success", answer
        return {r["metric"]["index"]: float(r["value"][1]) for r in answer["data"]["result"]}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[Any]:
    started: list[Prometheus] = []

    def start(config: Path) -> Prometheus:
        server = Prometheus(config, tmp_path)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_prometheus_scrapes_a_cluster_and_its_counters_equal_the_trace(
    tmp_path: Path, prometheus_for: Any
) -> None:
    workload = tmp_path / "workload.toml"
    workload.write_text(WORKLOAD)
    out = tmp_path / "run"
    command = [sys.executable, "-m", "pubmesh", "cluster", "--stack", STACK, "--nodes",
               str(NODES), "--workload", str(workload), "--metrics", "--out", str(out)]  # fmt: skip
    cluster = subprocess.Popen(
        command, env=node_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        config = out / "prometheus.yml"
        deadline = time.monotonic() + 60
        while not config.exists():
            assert cluster.poll() is None, cluster.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the cluster wrote no scrape configuration"
            time.sleep(0.1)
        time.sleep(0.2)  # written whole before the message that names it
        prometheus = prometheus_for(config)
        stdout, stderr = cluster.communicate(timeout=120)
    finally:
        if cluster.poll() is None:
            cluster.kill()
            cluster.communicate()
    assert cluster.returncode == 0, f"{stderr[-2000:]}\nreplay: {' '.join(command)}"
    assert "scrape_configs:" in stdout and "job_name: pubmesh" in stdout, stdout
    assert f"--config.file {config}" in stderr, stderr

    deliveries = collections.Counter(
        r["node"] for r in pq.read_table(out / "deliveries").to_pylist()
    )
    publications = collections.Counter(
        r["publisher"] for r in pq.read_table(out / "publications").to_pylist()
    )
    assert sum(publications.values()) == 60
    # what the scrapes stored, each node's largest value of the run
    scraped = prometheus.query("max_over_time(pubmesh_deliveries_total[5m])")
    assert scraped == {str(n): float(deliveries[n]) for n in range(NODES)}, (scraped, deliveries)
    published = prometheus.query("max_over_time(pubmesh_publications_total[5m])")
    assert published == {str(n): float(publications[n]) for n in range(NODES)}
    topics = prometheus.query("max_over_time(pubmesh_topic_deliveries_total[5m])")
    assert topics == scraped
    peers = prometheus.query("max_over_time(pubmesh_peers[5m])")
    assert set(peers) == {str(n) for n in range(NODES)} and min(peers.values()) >= 1, peers
    up = prometheus.query("min_over_time(up[5m])")
    assert len(up) == NODES, up
    print(f"prometheus stored {int(sum(scraped.values()))} deliveries, the trace holds as many")


def test_one_node_serves_both_formats_health_and_refuses_junk(tmp_path: Path) -> None:
    node = NodeProcess(
        ["--stack", STACK, "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
         "--subscribe", "m"],
        log=tmp_path / "node.log",
    )  # fmt: skip
    try:
        ready = node.wait_event(lambda r: r.get("event") == "ready", 10, "ready")
        base = f"http://{ready['metrics']}"
        assert node.command({"op": "publish", "topic": "m", "payload": "x"})["ok"]
        status, kind, text = _get(f"{base}/metrics")
        assert status == 200 and kind.startswith("text/plain"), kind
        assert "pubmesh_deliveries_total 1.0" in text and "pubmesh_publications_total 1.0" in text
        assert 'pubmesh_topic_deliveries_total{topic="m"} 1.0' in text
        assert "process_resident_memory_bytes" in text
        status, kind, text = _get(
            f"{base}/metrics", {"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert status == 200 and kind.startswith("application/openmetrics-text"), kind
        assert text.endswith("# EOF\n")
        assert _get(f"{base}/healthz")[:1] == (200,)
        assert _get(f"{base}/nothing")[0] == 404

        host, port = ready["metrics"].split(":")
        with socket.create_connection((host, int(port)), timeout=5) as junk:
            junk.sendall(b"\x16\x03\x01 not http at all\r\n\r\n")
            assert junk.recv(100).startswith(b"HTTP/1.1 400")
        with socket.create_connection((host, int(port)), timeout=10) as silent:
            started = time.monotonic()
            assert silent.recv(100) == b"", "a silent socket is closed"
            assert 0.9 <= time.monotonic() - started <= 4.0, "within REQUEST_TIMEOUT (1 s)"
        _flood_then_probe(host, int(port))
        # the node kept serving throughout
        assert node.command({"op": "publish", "topic": "m", "payload": "y"})["ok"]
        assert "pubmesh_deliveries_total 2.0" in _get(f"{base}/metrics")[2]
    finally:
        node.stop()


def _probe(host: str, port: int) -> bytes:
    """``GET /healthz`` on a raw socket: the whole answer (empty if the port closed it)."""
    answer = b""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=3) as probe:
        probe.sendall(b"GET /healthz HTTP/1.1\r\nHost: node\r\n\r\n")
        while chunk := probe.recv(4096):
            answer += chunk
    return answer


def _flood_then_probe(host: str, port: int) -> None:
    """A stranger's silent sockets cannot keep a liveness probe out: 40
    from one address and 40 from twenty others, the flood topped up before every probe;
    every one of 40 probes answered 200. Before the fix, 16 silent sockets took the port
    for 5 s: 39 of 40 probes failed."""
    silent: list[socket.socket] = []

    def more(count: int) -> None:
        for i in range(count):
            sock = socket.socket()
            sock.settimeout(3)
            source = "127.0.0.1" if i % 2 else f"127.0.0.{2 + i % 20}"
            sock.bind((source, 0))
            sock.connect((host, port))
            silent.append(sock)

    try:
        more(80)
        answers = []
        for _ in range(40):
            more(4)
            answers.append(_probe(host, port))
        ok = sum(a.startswith(b"HTTP/1.1 200") and a.endswith(b"ok\n") for a in answers)
        assert ok == 40, f"{40 - ok} of 40 probes failed under a flood of silent sockets"
    finally:
        for sock in silent:
            sock.close()
