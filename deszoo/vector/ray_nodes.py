"""``ray`` with ``per_node=True``: one Ray actor per node, each running a ``shm`` pool.

The transport is :class:`~deszoo.vector.ray_backend.RayTransport` with other actors: the
parent's workers are the pools' ``shm`` worker processes, grouped into one node actor
(:class:`_NodeHost`) per Ray node in proportion to its CPUs, pinned to it. A step of a
whole node goes over the node's **step channel** (a TCP connection opened once, proven by
a token; actions down, one packed block of results up, no Ray code on either side); every
other command is one remote call per node. A worker's fault comes back as its reply; a lost
node actor is a death of each of its workers, and the first restart builds a new actor.
See ``docs/distributed.md`` ("Per-node pools").
"""

from __future__ import annotations

import logging
from typing import Any

from deszoo.errors import ConfigError
from deszoo.vector import _procs
from deszoo.vector.base import DeszooVecEnv, VecSpec
from deszoo.vector.pool import Transport, Worker
from deszoo.vector.ray_backend import (
    CHUNK,
    ActorHost,
    RayTransport,
    RayVecEnv,
    ensure_ray,
    import_ray,
)
from deszoo.vector.shm import ShmTransport

__all__ = ["RayNodeTransport", "RayNodeVecEnv", "alive_nodes", "share"]

log = logging.getLogger(__name__)

# Node actors reserve no CPU (their pools' workers use the node's cores, which Ray does not
# see). Each is pinned to its node (a hard node affinity: a soft one let Ray put two pools
# on one node when the other was slow to start a worker process); the replacement of a
# lost node's actor goes wherever Ray places it.
NODE_ACTOR_OPTIONS = {"max_restarts": 0, "max_task_retries": 0, "num_cpus": 0}


def alive_nodes() -> list[tuple[str, int]]:
    """``(Ray node id, CPUs)`` of every alive node that has at least one CPU."""
    ray = import_ray()
    out = []
    for n in ray.nodes():
        cpus = int(n.get("Resources", {}).get("CPU", 0))
        if n.get("Alive") and cpus >= 1:
            out.append((n["NodeID"], cpus))
    return out


def share(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` in proportion to ``weights`` (largest remainders get the rest)."""
    s = sum(weights)
    exact = [total * w / s for w in weights]
    out = [int(e) for e in exact]
    for k in sorted(range(len(weights)), key=lambda k: (out[k] - exact[k], k))[: total - sum(out)]:
        out[k] += 1
    return out


class _NodeHost(ActorHost):
    """Body of a node actor: its pool's workers are ``shm`` worker processes, started by
    the actor one by one, armed to die with it (a node actor killed by Ray cannot close its
    pool). Its process title (``ray::_NodeHost``) tells benchmarks/ray_nodes.py its role."""

    @staticmethod
    def transport(spec: VecSpec, workers: list[Worker], options: dict) -> Transport:
        return ShmTransport(spec, workers, options["spin_us"], options["start_method"],
                            options["timeout"], options["close_timeout"], arm_always=True)

    @staticmethod
    def worker_pid(w: Worker) -> int | None:
        return w.handle.proc.pid


class RayNodeTransport(RayTransport):
    """One Ray actor per node (:class:`_NodeHost`), each driving a ``shm`` pool of that
    node's workers; one remote call (or step-channel message) per node and command.

    Args:
        spec: what the pools build.
        workers: the vector env's workers (the pools' workers, in order).
        same_step: the vector env's autoreset mode is ``SameStep``.
        nodes: ``[(Ray node id, CPUs), ...]``: the workers are shared out over them in
            proportion to their CPUs.
        pool_options: options of each node's pool (``start_method``, ``spin_us``,
            ``timeout``, ``close_timeout``).
        actor_options: Ray options over :data:`NODE_ACTOR_OPTIONS` (given a
            ``scheduling_strategy``, the actors go where it says).
        close_timeout: seconds :meth:`close` waits for the actors.
        chunk_bytes: largest return value of a node actor's reply.
        channels: whole-node steps go through step channels.
    """

    body = _NodeHost
    defaults = NODE_ACTOR_OPTIONS
    actor_word = "node actor"
    lost_words = "its node actor was lost; "

    def __init__(self, spec: VecSpec, workers: list[Worker], same_step: bool,
                 nodes: list[tuple[str, int]], pool_options: dict, actor_options: dict | None,
                 close_timeout: float, chunk_bytes: int = CHUNK, channels: bool = True):
        groups = list(zip([t for t, _ in nodes], share(len(workers), [c for _, c in nodes]),
                          strict=True))
        super().__init__(spec, workers, same_step, actor_options, close_timeout, groups,
                         pool_options, chunk_bytes, channels)
        # A pool reports a hung worker after ``timeout``; its actor gets a little longer
        # (else a node whose reply is late counts as hung with all its workers). The grace
        # is on the whole wait: added to each poll slice instead, it gave a late node reply
        # only one slice (50 ms) more, and then the node's healthy workers were replaced too
        # (seen in the chaos run with a stopped worker on a busy machine).
        self.grace = min(pool_options["timeout"], 5.0)

    def _new_actor(self, node: Any) -> None:
        if node.generation and node.target is not None and node.target not in dict(
            alive_nodes()
        ):
            log.warning("Ray node %s is gone; node actor %d goes where Ray places it",
                        node.target, node.index)
            node.target = None
        super()._new_actor(node)

    def describe(self, w: Worker) -> str:
        node = self.nodes[self.node_of[w.index]]
        where = f"pid {node.pid} on {node.ip}" if node.pid is not None else "not started"
        slot = w.handle
        pid = f"pid {slot.pid}" if slot is not None and slot.pid is not None else "not running"
        j = w.index - node.workers[0]
        return (f"ray node actor {node.index} ({where}), its shm worker {j} ({pid}, envs "
                f"{w.first}..{w.first + w.count - 1})")


class RayNodeVecEnv(RayVecEnv):
    """Per-node ``shm`` pools driven by one Ray actor per node; see ``docs/distributed.md``.

    Built by ``make_vec(..., backend="ray", per_node=True)``. Its options are those of
    :class:`~deszoo.vector.ray_backend.RayVecEnv`: ``num_workers`` is the pools' worker
    processes in all, shared out over the nodes in proportion to their CPUs (default: the
    CPUs of the nodes, at most one per env); ``timeout`` is a pool's for its workers (the
    parent gives a node actor ``min(timeout, 5)`` seconds more); ``nodes`` the
    ``[(Ray node id, CPUs), ...]`` to use (default: every alive node with CPUs; a node id
    may repeat); ``start_method`` and ``spin_us`` (default 0: the next command comes
    through a Ray call, a millisecond later, so spinning would only burn the core) those of
    the pools.
    """

    per_node = True
    chunk_bytes = CHUNK  # largest return value of a node actor's reply

    @classmethod
    def build(cls, spec: VecSpec, seed: int | None, opts: dict[str, Any]) -> DeszooVecEnv:
        return cls(spec, seed, opts)

    def __init__(self, spec: VecSpec, seed: int | None, opts: dict[str, Any]):
        _procs.context(opts["start_method"])  # ConfigError before Ray starts
        self.started_ray = ensure_ray(opts["address"])
        nodes = opts["nodes"]  # checked with the option (ray_backend.RayVecEnv.options)
        if nodes is None:
            nodes = alive_nodes()
            if not nodes:
                raise ConfigError("per_node=True: Ray has no alive node with a CPU")
        self.nodes = [(nid, int(c)) for nid, c in nodes]
        workers = opts["num_workers"]  # at most num_sims: a rule of the option
        if workers is None:
            workers = min(sum(c for _, c in self.nodes), spec.num_sims)
        super().__init__(spec, seed, {**opts, "num_workers": workers})

    def _ray_transport(self, opts: dict[str, Any]) -> Transport:
        pool_options = dict(start_method=opts["start_method"], spin_us=opts["spin_us"] or 0.0,
                            timeout=self.timeout, close_timeout=opts["close_timeout"])
        return RayNodeTransport(self.sim_spec, self._workers, self._same_step, self.nodes,
                                pool_options, opts["actor_options"], opts["close_timeout"],
                                self.chunk_bytes, opts["step_channel"] is not False)

    def node_workers(self) -> list[list[int]]:
        """The workers of each node actor, by node."""
        return [list(node.workers) for node in self.transport.nodes]
