"""A long chaos run of the vector backends (see ``devkit/chaos_harness.py``).

Injects faults (SIGKILL, SIGSTOP of workers, SIGINT in the parent at declared fault points
or sent to the process by another thread at random moments, exceptions and exits inside
envs) at random steps, checks every result row against an undisturbed replay, and prints,
per backend, the faults by kind, hangs, divergent rows, errors, and the processes and
/dev/shm entries (shared memory, ``sem.*`` semaphores) left behind. Exit status 1 if
anything went wrong.

    python benchmarks/chaos.py --backend shm,supersuit --faults 400 --steps 2000
    python benchmarks/chaos.py --backend ray --workers 2 --faults 50 --timeout 5
    python benchmarks/chaos.py --backend shm,supersuit --envs 6 --batch-size 3   # async
    python benchmarks/chaos.py --env jobshop_v0 --preset small --state   # infos["state"] too
    python benchmarks/chaos.py --backend raynode --timeout 5      # Ray, per_node=True
    python benchmarks/chaos.py --backend raynode --timeout 5 --pools 2 --batch-size 3
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections import Counter

from devkit.chaos_harness import (
    HARNESS_KINDS,
    POINTS,
    ChaosConfig,
    ChaosReport,
    run_chaos,
)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="shm,supersuit,roundrobin",
                   help="comma-separated backends: shm, supersuit, roundrobin, ray; "
                        "supersuit0 is SuperSuit in the parent, raynode Ray with "
                        "per_node=True (default: %(default)s)")
    p.add_argument("--envs", type=int, default=6, help="envs per vector env")
    p.add_argument("--workers", type=int, default=2, help="worker processes (or Ray actors)")
    p.add_argument("--steps", type=int, default=2000, help="vector steps per backend")
    p.add_argument("--faults", type=int, default=300,
                   help="faults the harness injects per backend (the envs add their own)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="async mode (recv/send) with this many envs per recv; harness "
                        "faults sigkill, sigstop and sigint_thread")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", default=",".join(HARNESS_KINDS),
                   help="harness faults to draw from (default: %(default)s)")
    p.add_argument("--points", default=",".join(POINTS),
                   help="where SIGINT lands in a step (default: %(default)s)")
    p.add_argument("--on-error", default="both", choices=("restart", "raise", "both"))
    p.add_argument("--autoreset", default="both", choices=("NextStep", "SameStep", "both"),
                   help="autoreset mode of the vector envs (both: in turn)")
    p.add_argument("--timeout", type=float, default=1.0,
                   help="the vector env's worker timeout in seconds (each SIGSTOP costs it)")
    p.add_argument("--watchdog", type=float, default=120.0,
                   help="seconds a call may take before it counts as a hang")
    p.add_argument("--segment-steps", type=int, default=250,
                   help="steps per vector env before it is closed and checked for leaks")
    p.add_argument("--raise-rate", type=float, default=0.004,
                   help="env exceptions per env step")
    p.add_argument("--exit-rate", type=float, default=0.001,
                   help="env os._exit per env step (process backends)")
    p.add_argument("--env", default=None,
                   help="a registered scenario (default: the toy env of devkit.toyenv)")
    p.add_argument("--preset", default=None, help="the scenario's preset")
    p.add_argument("--state", action="store_true",
                   help="make_vec(state=True): infos['state'] checked too (--env with state())")
    p.add_argument("--start-method", default=None, help="fork, spawn or forkserver")
    p.add_argument("--pools", type=int, default=None,
                   help="raynode: split Ray's first node into this many node actors (one pool "
                        "each), as a cluster of that many nodes would have")
    p.add_argument("--json", default=None, help="write the reports to this file")
    p.add_argument("-v", "--verbose", action="store_true", help="a line per vector env")
    return p.parse_args(argv)


def config(args: argparse.Namespace, backend: str) -> ChaosConfig:
    workers = args.workers
    options = {}
    if backend == "supersuit0":
        backend, workers = "supersuit", 0
    elif backend == "raynode":  # one Ray actor per node, driving a shm pool of the workers
        backend, options["per_node"] = "ray", True
    if args.start_method and backend in ("shm", "supersuit") and workers > 1:
        options["start_method"] = args.start_method
    env_kwargs = {"preset": args.preset} if args.preset else {}
    return ChaosConfig(
        backend=backend, num_envs=args.envs, num_workers=workers, steps=args.steps,
        faults=args.faults, seed=args.seed, kinds=tuple(args.kinds.split(",")),
        points=tuple(args.points.split(",")),
        on_error=args.on_error, autoreset_mode=args.autoreset,
        segment_steps=args.segment_steps, env=args.env,
        env_kwargs=env_kwargs, raise_rate=args.raise_rate, exit_rate=args.exit_rate,
        timeout=args.timeout, watchdog=args.watchdog, options=options,
        batch_size=args.batch_size, state=args.state,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.ERROR)  # a restart logs a warning each
    reports: list[ChaosReport] = []
    for backend in args.backend.split(","):
        cfg = config(args, backend)
        if cfg.backend == "ray":
            import ray

            if not ray.is_initialized():
                ray.init(address="local", include_dashboard=False, log_to_driver=False)
            if args.pools and cfg.options.get("per_node"):
                node = ray.get_runtime_context().get_node_id()
                cfg.options["nodes"] = [(node, 1)] * args.pools
        rep = run_chaos(cfg, echo=print if args.verbose else None)
        if backend in ("supersuit0", "raynode"):
            rep.backend = backend
        reports.append(rep)
        print(rep.summary(), flush=True)
        if rep.details():
            print("   ", rep.details().replace("\n", "\n    "), flush=True)
        for note in rep.notes[:10]:
            print("   ", note.splitlines()[0][:300], flush=True)
    total = Counter()
    for rep in reports:
        total.update(rep.faults)
    bad = [r for r in reports if not r.ok]
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(total.items()))
    print(
        f"total: {sum(total.values())} faults ({kinds}); "
        f"hangs {sum(r.hangs for r in reports)}, divergent rows "
        f"{sum(r.divergent_rows for r in reports)}, errors {sum(r.errors for r in reports)}, "
        f"leaked processes {sum(r.leaked_processes for r in reports)}, leaked shm/sem "
        f"{sum(len(r.leaked_shm) for r in reports)}; "
        + ("OK" if not bad else f"FAILED: {', '.join(r.backend for r in bad)}")
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{
                "backend": r.backend, "steps": r.steps, "segments": r.segments,
                "faults": dict(r.faults), "hangs": r.hangs, "divergent_rows": r.divergent_rows,
                "errors": r.errors, "leaked_processes": r.leaked_processes,
                "leaked_shm": r.leaked_shm, "notes": r.notes, "seconds": r.seconds,
                "sigints_sent": r.sigints_sent, "cut_calls": dict(r.cut_calls),
                "raised_at": dict(r.raised_at), "found": r.found,
            } for r in reports], f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
