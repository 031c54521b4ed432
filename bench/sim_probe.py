"""Single simulator measurements for side-by-side comparisons of two checkouts.

Run the same command in each checkout, one after the other, on an otherwise idle machine; the
figures are CPU seconds of this process, so they compare across checkouts of one session (not
across days or machines: there, compare the ratios of bench_sim.py).

    PYTHONPATH=src .venv/bin/python bench/sim_probe.py rate 3000     # events/CPU s, bare loop
                                   # timed before and after the run
    PYTHONPATH=src .venv/bin/python bench/sim_probe.py joins 20000   # joins + one broadcast
    PYTHONPATH=src .venv/bin/python bench/sim_probe.py warm 300000 [gossip|skipring]
                                   # build (plan + warm start), run, close (trace flush)
    PYTHONPATH=src .venv/bin/python bench/sim_probe.py warm 100000 skipring --window 0.5 2.0
                                   # the same in another window (publish at, run until)
    PYTHONPATH=src .venv/bin/python bench/sim_probe.py plan 400000   # the workload plan alone
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_sim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("rate", "joins", "warm", "plan"))
    parser.add_argument("nodes", type=int)
    parser.add_argument("stack", nargs="?", default="gossip", choices=("gossip", "skipring"))
    parser.add_argument(
        "--window",
        nargs=2,
        type=float,
        metavar=("PUBLISH", "UNTIL"),
        help="warm: publish at PUBLISH and run until UNTIL seconds (default: bench_sim's)",
    )
    args = parser.parse_args()
    if args.what == "rate":
        r = bench_sim.bracketed_rate(args.nodes)
        print(
            json.dumps(
                {
                    "events": r["events"],
                    "events_per_cpu_second": round(r["events_per_cpu_second"]),
                    "bare_before": round(r["bare_before"]),
                    "bare_after": round(r["bare_after"]),
                    "ratio": round(r["ratio"], 4),
                }
            )
        )
        return
    if args.what == "joins":
        started = time.process_time()
        bench_sim.child(args.nodes)
        print(json.dumps({"cpu_seconds": round(time.process_time() - started, 1)}))
        return
    from pubmesh.scenario.model import parse_scenario
    from pubmesh.scenario.workload import plan
    from pubmesh.sim.engine import Simulation

    publish_start, duration = args.window or bench_sim.WARM_TIMES[args.stack]
    text = bench_sim.WARM.format(
        stack=args.stack,
        nodes=args.nodes,
        duration=duration,
        publish_start=publish_start,
        publications=1,
        extra=bench_sim.GOSSIP_TREE if args.stack == "gossip" else "",
    )
    scenario = parse_scenario(text, source=f"probe-warm-{args.stack}-{args.nodes}")
    if args.what == "plan":
        started = time.process_time()
        planned = plan(scenario)
        cpu = time.process_time() - started
        print(json.dumps({"plan_cpu_seconds": round(cpu, 2), "events": len(planned.events)}))
        return
    started = time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulation(scenario, Path(tmp) / "run", keep_deliveries=False)
        built = time.process_time()
        sim.run()
        ran = time.process_time()
        sim.close()
        done = time.process_time()
    print(
        json.dumps(
            {
                "build_cpu_seconds": round(built - started, 1),
                "run_cpu_seconds": round(ran - built, 1),
                "close_cpu_seconds": round(done - ran, 1),
                "events": sim.events_processed,
                "deliveries": sim.delivery_count,
                "last_delivery": sim.last_delivery,
                "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            }
        )
    )


if __name__ == "__main__":
    main()
