"""brokertree at the SRDS'11 setup, lost pairs split by the δ guarantee.

``scenarios/brokertree_srds11.toml``: 500 brokers in the spec's random tree and 500 clients,
δ = 3, 17% of the brokers (85, at random) crash at 40 s, publications at 20/s from 30 s to
60 s; per seed, ``run.seed`` = ``topology_seed`` = the seed. Reliability is over every
(publication, matching subscriber) pair published after 30 s whose subscriber is alive at the
end (tests/support/btfigures.py ``measure``). Each expected pair is *within the guarantee* if every
2δ + 1 window of its publisher→subscriber tree path holds at most δ crashed brokers, *beyond*
it otherwise (``pubmesh.proto.brokertree.guarantee``; Kazemzadeh & Jacobsen, *Highly
Available Distributed Publish/Subscribe Systems* §5.2 Def. 2, §5.7.1). The reference is
SRDS'11's figure: at least 97% delivered with up to 17% of the brokers failed.

Run (one simulation at a time, ~1 CPU minute each)::

    .venv/bin/python bench/bench_brokertree_srds11.py --seeds 1,2,3,4,5
    .venv/bin/python bench/bench_brokertree_srds11.py --set 'stack.brokertree.past_stall="forward"'

Columns: overall reliability; within-guarantee reliability (pairs lost / expected); pairs
beyond the guarantee lost / expected; expected pairs cut off (δ + 1 adjacent crashed brokers
on the path: no copy can cross them, whatever the rule); duplicates, order violations and
safety-net drops (``late``) over the deliveries; sessions stalled (``brokertree.stalled``)
and copies given up or forwarded past ``stall_timeout``; sessions still stalled at the end;
copies a durably restarted node refused as delivered in its last life (``refused``).
With ``--restarts`` clients and brokers also crash and come back durably during the run; then a
pair counts only once its subscription is confirmed (a restarted client subscribes again and
waits for its confirmation), and the guarantee is judged with every broker that was ever down
(a recovered broker was down when it mattered).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from bench_brokertree import simulate  # noqa: E402  (bench/, the script's own folder)

from support.btfigures import guarantee, stuck_sessions  # noqa: E402

SCENARIO = "scenarios/brokertree_srds11.toml"
RESTARTS = "scenarios/brokertree_srds11_restarts.toml"


def run(seed: int, sets: list[str], scenario: str = SCENARIO) -> dict[str, float]:
    restarts = scenario == RESTARTS
    sim, figures, cpu = simulate(
        scenario,
        [*sets, f"run.seed={seed}", f"stack.brokertree.topology_seed={seed}"],
        confirmed=restarts,
    )
    report = guarantee(sim, figures, ever=restarts)
    return {
        "reliability": figures.reliability,
        "expected": figures.expected,
        "within": report.reliability_within,
        "within_lost": len(report.lost_within),
        "within_expected": report.expected_within,
        "beyond_lost": len(report.lost_beyond),
        "beyond_expected": report.expected_beyond,
        "cut": report.expected_cut,
        "duplicates": figures.duplicates,
        "order": figures.order_violations,
        "late": figures.events["brokertree.late"],
        "stalled": figures.events["brokertree.stalled"],
        "skipped": figures.events["brokertree.stall_skipped"],
        "forwarded": figures.events["brokertree.stall_forwarded"],
        "stuck": len(stuck_sessions(sim)),
        "across": sim.duplicates_across_lives,
        "unconfirmed": figures.unconfirmed,
        "cpu": cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument(
        "--restarts",
        action="store_true",
        help="scenarios/brokertree_srds11_restarts.toml: clients and brokers also restart "
        "durably (their state kept across the restart) during the run",
    )
    parser.add_argument(
        "--set", action="append", default=[], help="scenario override (KEY=VALUE), repeatable"
    )
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",") if s]
    scenario = RESTARTS if args.restarts else SCENARIO
    print(f"{scenario} {' '.join(args.set) or '(default parameters)'}", flush=True)
    header = (
        f"{'seed':>4} {'overall':>8} {'within':>8} {'lost/expected':>14} "
        f"{'beyond lost/expected':>21} {'cut off':>7} {'dup':>4} {'order':>5} {'late':>5} "
        f"{'stalled':>7} {'skipped':>7} {'fwd':>5} {'stuck':>5} {'refused':>7} {'unconf':>7} "
        f"{'CPU s':>6}"
    )
    print(header, flush=True)
    rows = []
    for seed in seeds:
        r = run(seed, args.set, scenario)
        rows.append(r)
        print(
            f"{seed:>4} {r['reliability']:>8.4f} {r['within']:>8.4f} "
            f"{r['within_lost']:>6}/{r['within_expected']:<7} "
            f"{r['beyond_lost']:>10}/{r['beyond_expected']:<10} {r['cut']:>7} "
            f"{r['duplicates']:>4} {r['order']:>5} {r['late']:>5} {r['stalled']:>7} "
            f"{r['skipped']:>7} {r['forwarded']:>5} {r['stuck']:>5} {r['across']:>7} "
            f"{r['unconfirmed']:>7} {r['cpu']:>6.0f}",
            flush=True,
        )
    expected = sum(r["expected"] for r in rows)
    delivered = sum(r["reliability"] * r["expected"] for r in rows)
    within = sum(r["within_expected"] for r in rows)
    within_lost = sum(r["within_lost"] for r in rows)
    print(
        f" all {delivered / expected:>8.4f} {1 - within_lost / within if within else 1:>8.4f} "
        f"{within_lost:>6}/{within:<7} "
        f"{sum(r['beyond_lost'] for r in rows):>10}/{sum(r['beyond_expected'] for r in rows):<10}"
        " (pooled over the seeds; SRDS'11: >= 0.97 delivered at 17% failed)"
    )


if __name__ == "__main__":
    main()
