"""specs/relay.md §9's claims for the ``clique`` stack (papers/002 §9.2, Build-Clique), measured
on simulated runs of ``scenarios/clique_corrupted.toml`` (latency U(2, 20) ms, non-FIFO, timer
jitter 0.1, T = 0.25 s; a round is one T).

* C1: from every corruption kind of spec §6 with n junk messages, the group is a legitimate
  clique within 6·n ln n + 50 rounds and at every later snapshot (every 5T), and the relay-graph
  oracle (tests/relayoracle.py) holds at every snapshot from the corruption on: each topic's
  relay graph, explicit and in-transit edges, weakly connected, and no holder count below the
  truth. Run for n ∈ {8, 16, 32} over ``SEEDS``; the fitted constant of rounds = a·n ln n is
  printed per kind (BENCHMARKS.md has the larger n).
* C7: once legitimate, every publication reaches every member in one hop with n − 1 Pub
  messages.

A failure names the seed and the command that replays the run.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from figures import publication_figures, replay
from pubmesh.proto.clique.corruption import KINDS
from pubmesh.proto.clique.legitimacy import is_legitimate
from pubmesh.sim.engine import Simulation
from pubmesh.sim.scenario import load_scenario
from relayoracle import check_sim

ROOT = Path(__file__).resolve().parent.parent
CORRUPTED = "scenarios/clique_corrupted.toml"
T = 0.25
SNAPSHOT = 5 * T
SEEDS = range(1, 11)


def bound(n: int) -> float:
    """Spec §9 C1: legitimate within 6·n ln n + 50 rounds."""
    return 6 * n * math.log(n) + 50


@dataclass
class Run:
    kind: str
    n: int
    seed: int
    sets: tuple[str, ...]
    #: rounds from the corruption to the first legitimate snapshot (None: not by the bound)
    rounds: float | None = None
    #: oracle complaints and legitimacy lapses after convergence, with their times
    problems: list[str] = field(default_factory=list)

    def replay(self) -> str:
        return replay(CORRUPTED, self.seed, *self.sets)


def converge(
    kind: str,
    n: int,
    seed: int,
    *,
    after: int = 20,
    run_dir: Path | None = None,
    extra: tuple[str, ...] = (),
) -> tuple[Run, Simulation]:
    """Run C1's scenario at ``n`` members from ``kind``, checking the oracle and legitimacy at
    every snapshot; stop ``after`` snapshots past convergence (or at the bound, or, with
    ``after = 0``, at the scenario's end)."""
    sets = (f"run.nodes={n}", f"init.corruption={kind}", f"init.junk_messages={n}", *extra)
    run = Run(kind, n, seed, sets)
    scenario = load_scenario(ROOT / CORRUPTED, [*sets, f"run.seed={seed}"])
    sim = Simulation(scenario, run_dir, keep_deliveries=run_dir is not None)
    corrupted_at = max(sim.plan.starts.values()) + scenario.workload.subscribe_at
    later = 0
    t = 0.0
    while t + SNAPSHOT <= scenario.run.duration + 1e-9:
        t += SNAPSHOT
        sim.run(until=t)
        if t < corrupted_at:
            continue
        run.problems += [f"t={t:.2f}: {p}" for p in check_sim(sim)[:3]]
        legitimate = is_legitimate(sim.nodes)
        if run.rounds is None:
            if legitimate:
                run.rounds = (t - corrupted_at) / T
            elif (t - corrupted_at) / T > bound(n):
                break
            continue
        if not legitimate:
            run.problems.append(f"t={t:.2f}: not legitimate after converging")
        later += 1
        if after and later >= after:
            break
    if run_dir is not None:
        sim.run()
        sim.close()
    return run, sim


@pytest.mark.parametrize("n", [8, 16, 32])
@pytest.mark.parametrize("kind", KINDS)
def test_c1_convergence_from_every_corruption(kind: str, n: int) -> None:
    """C1: legitimate by 6·n ln n + 50 rounds and at every later snapshot, the oracle holding
    at every snapshot, for every seed."""
    runs = [converge(kind, n, seed)[0] for seed in SEEDS]
    for run in runs:
        assert run.rounds is not None, (
            f"{kind} n={n} seed {run.seed}: no clique within {bound(n):.0f} rounds; {run.replay()}"
        )
        assert not run.problems, f"{kind} n={n} seed {run.seed}: {run.problems[:3]}; {run.replay()}"
    rounds = [run.rounds for run in runs if run.rounds is not None]
    a = statistics.mean(rounds) / (n * math.log(n))
    print(
        f"C1 {kind} n={n}: rounds mean {statistics.mean(rounds):.0f} max {max(rounds):.0f} "
        f"(bound {bound(n):.0f}); fit a = {a:.2f} (rounds = a·n ln n)"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_c7_one_hop_flooding_once_legitimate(kind: str, tmp_path: Path) -> None:
    """C7: after C1's convergence (n = 32), the scenario's 100 publications at t = 185..195 s
    reach every member (reliability 1.0), each in one hop with n − 1 Pub messages and no
    duplicate."""
    n, seed = 32, 1
    run, sim = converge(kind, n, seed, run_dir=tmp_path, extra=("trace.messages=full",))
    assert run.rounds is not None and not run.problems, f"{run.problems[:3]}; {run.replay()}"
    figures = publication_figures(sim, tmp_path)
    assert len(figures) == 100, run.replay()
    for pub in figures:
        where = f"{kind} publication {pub.pub_id}; {run.replay()} --set trace.messages=full"
        assert pub.expected == n - 1, where  # the contact is a member but delivers nothing
        assert pub.reliability == 1.0 and pub.duplicates == 0, where
        assert pub.ldh == 1, where
        assert pub.payload_messages == n - 1, where
