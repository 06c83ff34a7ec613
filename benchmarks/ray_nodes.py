"""Side by side on a Ray cluster: ``shm``, ``ray`` (one actor per env group) and ``ray`` with
``per_node=True`` (one actor per node, each running a ``shm`` pool), its steps through the
step channels (the default) and through Ray calls (``step_channel=False``).

Run it on a cluster you started (``--address auto``), or let it start a local one of
``--nodes`` nodes on this machine (``ray.cluster_utils.Cluster``, stopped at the end)::

    PYTHONPATH=. RAY_AUTH_MODE=disabled python benchmarks/ray_nodes.py --nodes 2 --cpus 1

Every vector env of a row is open at once and they run in alternating short slices, so the
load of other processes spreads evenly over them: compare ratios within one run. Prints
env-steps/s and the parent's CPU time per env step. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

SCENARIOS = {"jobshop_v0": {}, "ridehail_v0": {}, "traffic_v0": {"preset": "large"}}


def start_cluster(nodes: int, cpus: int):
    """A local cluster of ``nodes`` nodes with ``cpus`` CPUs each, and its address."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, connect=False,
                      head_node_args={"num_cpus": cpus, "include_dashboard": False})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=cpus)
    cluster.wait_for_nodes()
    return cluster, cluster.address


def backends(cpus: int, shm_workers: int) -> list[tuple[str, dict]]:
    """The labelled make_vec options compared in each row."""
    return [
        (f"shm ({shm_workers} workers)", dict(backend="shm", num_workers=shm_workers)),
        (f"ray per group ({cpus} actors)", dict(backend="ray", num_workers=cpus)),
        ("ray per_node, Ray calls", dict(backend="ray", per_node=True, step_channel=False)),
        ("ray per_node", dict(backend="ray", per_node=True)),
    ]


def measure(scenario: str, num_envs: int, seconds: float, slice_s: float, cpus: int,
            shm_workers: int) -> list[str]:
    from deszoo.bench.sidebyside import VecRunner
    from deszoo.vector import make_vec

    kwargs = SCENARIOS[scenario]
    runners = []
    try:
        for label, opts in backends(cpus, shm_workers):
            vec = make_vec(scenario, num_envs, **opts, **kwargs)
            runners.append(VecRunner(label, vec))
        for _ in range(max(1, round(seconds / slice_s))):
            for r in runners:
                r.run(slice_s)
        lines = []
        rates = {}
        for r in runners:
            rates[r.label] = rate = r.steps / r.wall
            where = ""
            if getattr(r.vec, "per_node", False):
                where = f", on {len({nid for _, nid in r.vec.worker_nodes()})} nodes"
            lines.append(f"  {r.label:24s} {rate:9.0f} env-steps/s, parent "
                         f"{1e6 * r.parent_cpu / r.steps:6.1f} us CPU per env step{where}")
        shm, group, calls, node = (rates[label] for label, _ in backends(cpus, shm_workers))
        lines.append(f"  per_node / shm {node / shm:.2f}x (with Ray calls {calls / shm:.2f}x), "
                     f"per_node / per group {node / group:.2f}x, per group / shm "
                     f"{group / shm:.2f}x")
        return lines
    finally:
        for r in runners:
            r.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", help="join this cluster instead of starting one")
    parser.add_argument("--nodes", type=int, default=2, help="nodes of the local cluster")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs of each local node")
    parser.add_argument("--shm-workers", type=int, default=2)
    parser.add_argument("--scenarios", nargs="+", default=["jobshop_v0", "ridehail_v0"],
                        choices=sorted(SCENARIOS))
    parser.add_argument("--envs", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--seconds", type=float, default=8.0, help="per backend and row")
    parser.add_argument("--slice", type=float, default=0.25, help="seconds per turn")
    args = parser.parse_args(argv)

    import ray

    from deszoo.bench.machine import free_cores

    cluster = None
    address = args.address
    if address is None:
        cluster, address = start_cluster(args.nodes, args.cpus)
    # The actors import deszoo from where this script does.
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), os.getcwd()) if p)
    ray.init(address=address, runtime_env={"env_vars": {"PYTHONPATH": path}},
             log_to_driver=False)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 0))
        nodes = [n for n in ray.nodes() if n["Alive"]]
        out = [f"cluster: {len(nodes)} nodes, {cpus} CPUs; load average "
               f"{os.getloadavg()[0]:.2f}; free cores {free_cores(1.0)}"]
        print(out[0], flush=True)
        for scenario in args.scenarios:
            for num_envs in args.envs:
                head = (f"== {scenario} {SCENARIOS[scenario]}, {num_envs} envs, "
                        f"{args.seconds:g} s each in {args.slice:g} s slices")
                print(head, flush=True)
                start = time.monotonic()
                for line in measure(scenario, num_envs, args.seconds, args.slice, cpus,
                                    args.shm_workers):
                    print(line, flush=True)
                print(f"  ({time.monotonic() - start:.0f} s)", flush=True)
        print(f"after: load average {os.getloadavg()[0]:.2f}; free cores {free_cores(1.0)}",
              flush=True)
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
