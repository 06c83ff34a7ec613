"""Side by side on a Ray cluster: ``shm``, ``ray`` (one actor per env group) and ``ray`` with
``per_node=True`` (one actor per node, each running a ``shm`` pool), its steps through the
step channels (the default) and through Ray calls (``step_channel=False``).

Run it on a cluster you started (``--address auto``), or let it start a local one of
``--nodes`` nodes on this machine (``ray.cluster_utils.Cluster``, stopped at the end)::

    PYTHONPATH=. RAY_AUTH_MODE=disabled python benchmarks/ray_nodes.py --nodes 2 --cpus 1

Every vector env of a row is open at once and they run in alternating short slices, so the
load of other processes spreads evenly over them: compare ratios within one run. Prints
env-steps/s and the parent's CPU time per env step; the last row is ``per_node`` in async
mode with one node's envs per ``recv`` (a node steps again while the driver takes the other
node's results). With ``--processes`` it then runs ``shm`` and ``per_node`` (sync) alone and
reads every process's CPU time from ``/proc`` (Linux): CPU per vector step of the driver, the
env workers, the node actors and Ray's own processes, against the cores' time, which shows
where a step's time goes when it is not in the envs. A measurement, not a test.
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


class AsyncRunner:
    """Steps a vector env in async mode (``recv``/``send``), in resumable slices, as
    ``sidebyside.VecRunner`` does in sync mode; ``steps`` counts env steps."""

    def __init__(self, label: str, vec, warmup: int = 40):
        from deszoo.rollouts import legal_last

        self.label, self.vec, self._policy = label, vec, legal_last
        self._rows_per_env = vec.num_envs // vec.num_sims
        vec.async_reset(seed=0)
        self.run_calls(warmup)
        self.rows, self.parent_cpu, self.wall = 0, 0.0, 0.0

    def run_calls(self, n: int) -> None:
        for _ in range(n):
            *_, infos = self.vec.recv()
            self.vec.send(self._policy(infos["action_mask"]), infos["env_id"])

    def run(self, seconds: float) -> None:
        vec, policy = self.vec, self._policy
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            c0 = time.process_time()
            *_, infos = vec.recv()
            c1 = time.process_time()
            ids, acts = infos["env_id"], policy(infos["action_mask"])
            c2 = time.process_time()
            vec.send(acts, ids)
            self.parent_cpu += time.process_time() - c2 + (c1 - c0)  # the policy left out
            self.rows += len(ids)
        self.wall += time.perf_counter() - start

    @property
    def steps(self) -> int:
        return self.rows // self._rows_per_env

    def close(self) -> None:
        self.vec.close()


def measure(scenario: str, num_envs: int, seconds: float, slice_s: float, cpus: int,
            shm_workers: int) -> list[str]:
    from deszoo.vector import make_vec
    from sidebyside import VecRunner

    kwargs = SCENARIOS[scenario]
    runners = []
    try:
        for label, opts in backends(cpus, shm_workers):
            vec = make_vec(scenario, num_envs, **opts, **kwargs)
            runners.append(VecRunner(label, vec))
        batch = num_envs // cpus  # one worker's envs (a node's, with one CPU per node)
        vec = make_vec(scenario, num_envs, backend="ray", per_node=True, batch_size=batch,
                       **kwargs)
        runners.append(AsyncRunner(f"ray per_node, async {batch}", vec))
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
        lines.append(f"  per_node / shm {node / shm:.2f}x (with Ray calls {calls / shm:.2f}x, "
                     f"async {rates[runners[-1].label] / shm:.2f}x), per_node / per group "
                     f"{node / group:.2f}x, per group / shm {group / shm:.2f}x")
        return lines
    finally:
        for r in runners:
            r.close()


def _processes() -> dict[int, tuple[int, float, str]]:
    """Every process: (parent pid, CPU seconds so far, command line)."""
    from deszoo.bench.machine import _cmdline

    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(d)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick,
                       _cmdline(int(d)))
    return out


def _role(pid: int, procs: dict, me: int) -> str:
    ppid, _, cmd = procs[pid]
    if pid == me:
        return "driver"
    parent = procs.get(ppid, (0, 0.0, ""))[2]
    # A pool's workers are forked from its node actor and keep its process title.
    if parent.startswith("ray::_NodeHost") or (ppid == me and cmd == procs[me][2]):
        return "env workers"
    if cmd.startswith("ray::_NodeHost"):
        return "node actors"
    if "ray" in cmd:
        return "Ray's own processes"
    return "other"


def processes(scenario: str, num_envs: int, seconds: float, shm_workers: int) -> list[str]:
    """CPU per vector step by process role, ``shm`` then ``per_node``, each run alone."""
    from deszoo.vector import make_vec
    from sidebyside import VecRunner

    roles = ("driver", "env workers", "node actors", "Ray's own processes", "other")
    lines = [f"  CPU ms per vector step ({num_envs} envs), each run alone for {seconds:g} s: "
             + ", ".join(roles) + ", all; wall ms per vector step; cores busy"]
    me = os.getpid()
    for label, opts in (("shm", dict(backend="shm", num_workers=shm_workers)),
                        ("per_node", dict(backend="ray", per_node=True))):
        runner = VecRunner(label, make_vec(scenario, num_envs, **opts, **SCENARIOS[scenario]))
        try:
            before = _processes()
            runner.run(seconds)
            after = _processes()
        finally:
            runner.close()
        cpu = dict.fromkeys(roles, 0.0)
        for pid, (_, c1, _) in after.items():
            cpu[_role(pid, after, me)] += c1 - before.get(pid, (0, 0.0, ""))[1]
        n = runner.vsteps
        total = sum(cpu.values())
        cores = len(os.sched_getaffinity(0))
        lines.append(f"  {label:9s} " + " ".join(f"{1e3 * cpu[r] / n:6.3f}" for r in roles)
                     + f"  all {1e3 * total / n:6.3f}; wall {1e3 * runner.wall / n:6.3f};"
                     f" busy {total / (cores * runner.wall):.0%} of {cores} cores")
    return lines


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
    parser.add_argument("--processes", action="store_true",
                        help="then CPU per vector step by process (Linux /proc)")
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
                if args.processes:
                    for line in processes(scenario, num_envs, args.seconds, args.shm_workers):
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
