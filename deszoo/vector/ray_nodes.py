"""``ray`` with ``per_node=True``: one Ray actor per node, each running a ``shm`` pool; see
``docs/distributed.md`` ("Per-node pools")."""

from __future__ import annotations

from typing import Any

from deszoo.errors import ConfigError
from deszoo.vector import _procs
from deszoo.vector.base import VecSpec
from deszoo.vector.pool import Transport, Worker
from deszoo.vector.ray_backend import ActorHost, RayTransport, RayVecEnv, alive_nodes, ensure_ray
from deszoo.vector.shm import ShmTransport

__all__ = ["RayNodeTransport", "RayNodeVecEnv", "alive_nodes", "share"]

# No CPU reserved (the pools' workers use the node's cores, which Ray does not see); pinned
# by a hard node affinity (a soft one let Ray put two pools on a node slow to start one).
NODE_ACTOR_OPTIONS = {"max_restarts": 0, "max_task_retries": 0, "num_cpus": 0}


def share(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` in proportion to ``weights`` (largest remainders get the rest)."""
    exact = [total * w / sum(weights) for w in weights]
    out = [int(e) for e in exact]
    for k in sorted(range(len(weights)), key=lambda k: (out[k] - exact[k], k))[: total - sum(out)]:
        out[k] += 1
    return out


class _NodeHost(ActorHost):
    """Body of a node actor: ``shm`` workers armed to die with it (a killed actor cannot
    close its pool). Its process title, ``ray::_NodeHost``, tells benchmarks its role."""

    @staticmethod
    def transport(spec: VecSpec, workers: list[Worker], options: dict) -> Transport:
        return ShmTransport(spec, workers, options["spin_us"], options["start_method"],
                            options["timeout"], options["close_timeout"], arm_always=True)

    @staticmethod
    def worker_pid(w: Worker) -> int | None:
        return w.handle.proc.pid


class RayNodeTransport(RayTransport):
    """One Ray actor per node (:class:`_NodeHost`), each driving a ``shm`` pool of that
    node's workers (``pool_options``: ``start_method``, ``spin_us``, ``close_timeout``)."""

    body = _NodeHost
    defaults = NODE_ACTOR_OPTIONS
    actor_word = "node actor"
    lost_words = "its node actor was lost; "

    def describe(self, w: Worker) -> str:
        node, where = self.where(w)
        slot = w.handle
        pid = f"pid {slot.pid}" if slot is not None and slot.pid is not None else "not running"
        return (f"ray node actor {node.index} ({where}), its shm worker "
                f"{w.index - node.workers[0]} ({pid}, envs {w.first}..{w.first + w.count - 1})")


class RayNodeVecEnv(RayVecEnv):
    """Per-node ``shm`` pools driven by one Ray actor per node: ``make_vec(...,
    backend="ray", per_node=True)``, with the options of :class:`RayVecEnv`."""

    per_node = True

    def __init__(self, spec: VecSpec, seed: int | None, opts: dict[str, Any]):
        _procs.context(opts["start_method"])  # ConfigError before Ray starts
        self.started_ray = ensure_ray(opts["address"])
        self.nodes = [(nid, int(c)) for nid, c in opts["nodes"] or alive_nodes()]
        if not self.nodes:
            raise ConfigError("per_node=True: Ray has no alive node with a CPU")
        workers = opts["num_workers"] or min(sum(c for _, c in self.nodes), spec.num_sims)
        super().__init__(spec, seed, {**opts, "num_workers": workers})

    def _ray_transport(self, opts: dict[str, Any]) -> Transport:
        pool_options = dict(start_method=opts["start_method"], spin_us=opts["spin_us"] or 0.0,
                            timeout=self.timeout, boot_timeout=self.boot_timeout,
                            close_timeout=opts["close_timeout"])
        ids, cpus = zip(*self.nodes, strict=True)
        groups = list(zip(ids, share(self.num_workers, list(cpus)), strict=True))
        transport = RayNodeTransport(self.sim_spec, self.workers, self._same_step,
                                     opts["actor_options"], opts["close_timeout"],
                                     pool_options, groups, self.chunk_bytes,
                                     opts["step_channel"] is not False)
        # A pool reports a hung worker after ``timeout``: a node actor gets a little longer
        # (else a late reply counts as a hang of all its workers, on a busy machine).
        transport.grace = min(self.timeout, 5.0)
        return transport

    def node_workers(self) -> list[list[int]]:
        """The workers of each node actor, by node."""
        return [list(node.workers) for node in self.transport.nodes]
