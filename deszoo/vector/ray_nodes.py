"""``ray`` with ``per_node=True``: one Ray actor per node, each running a ``shm`` pool.

The parent's workers are the pools' ``shm`` worker processes, grouped into one node actor
(:class:`_NodeHost`) per Ray node in proportion to its CPUs. A node actor drives a
:class:`~deszoo.vector.pool.WorkerPool` over a :class:`~deszoo.vector.shm.ShmTransport`
through its public API. A step of a whole node goes over the node's **step channel** (a TCP
connection opened once, proven by a token; actions down, one packed block of results up,
no Ray code on either side); every other command is one remote call per node. A worker's
fault comes back as its reply; a lost node actor is a death of each of its workers, and the
first restart builds a new actor. See ``docs/distributed.md`` ("Per-node pools").
"""


from __future__ import annotations

import dataclasses
import hmac
import logging
import os
import pickle
import select
import socket
import struct
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deszoo.errors import ConfigError
from deszoo.vector import _procs
from deszoo.vector._host import Call
from deszoo.vector.base import DeszooVecEnv, VecSpec
from deszoo.vector.pool import (
    Reply,
    Transport,
    Worker,
    WorkerPool,
    WorkerState,
    sigint_deferred,
    split,
)
from deszoo.vector.ray_backend import (
    SIM_FIELDS,
    RayTransport,
    RayVecEnv,
    ensure_ray,
    ignore_sigint,
    import_ray,
    kill_actors,
    reply_fields,
)
from deszoo.vector.shm import ShmTransport

__all__ = ["RayNodeVecEnv", "alive_nodes", "share"]

log = logging.getLogger(__name__)

# Node actors reserve no CPU (their pools' workers use the node's cores, which Ray does not
# see). Each is pinned to its node (a hard node affinity: a soft one let Ray put two pools
# on one node when the other was slow to start a worker process); the replacement of a
# lost node's actor goes wherever Ray places it.
NODE_ACTOR_OPTIONS = {"max_restarts": 0, "max_task_retries": 0, "num_cpus": 0}
DATA_COMMANDS = ("step", "reset", "rebuild")  # commands whose reply carries the rows
# Ray sends a return value of up to 100 KiB inline with the call's answer and a larger one
# through its object store, which costs milliseconds more per call (measured: ridehail_v0,
# 16 envs per node, 390 KB). So a larger reply comes back in chunks of this size, each its
# own return value.
CHUNK = 96 * 1024
# The step channel (see the module docstring): the driver sends STEP_HEAD (same-step flag,
# bytes of actions) and the node's actions; the node answers REPLY_HEAD (bytes of the
# block, bytes of the pickled notes), its block and its notes (None: every worker "ok").
STEP_HEAD = struct.Struct("<II")
REPLY_HEAD = struct.Struct("<QQ")
TOKEN_BYTES = 16


def _recv_into(sock: socket.socket, view: memoryview) -> bool:
    """Fill ``view`` from ``sock``; ``False`` at EOF before the first byte."""
    got = 0
    while got < len(view):
        k = sock.recv_into(view[got:])
        if k == 0:
            if got == 0:
                return False
            raise ConnectionError("connection closed in the middle of a message")
        got += k
    return True


def _recv_bytes(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    if n and not _recv_into(sock, memoryview(buf)):
        raise ConnectionError("connection closed")
    return bytes(buf)


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


# ---- inside a node actor -----------------------------------------------------------------
def _node_pool(spec: VecSpec, num_workers: int, start_method: str | None, spin_us: float,
               timeout: float, close_timeout: float) -> WorkerPool:
    """A node's pool of ``shm`` workers over its envs, not started (the node actor starts
    each worker on its own, armed to die with the actor: a node actor killed by Ray cannot
    close its pool)."""
    workers = [Worker(i, first, count, len(spec.agents))
               for i, (first, count) in enumerate(split(spec.num_sims, num_workers))]
    transport = ShmTransport(spec, workers, spin_us, start_method, timeout, close_timeout,
                             arm_always=True)
    return WorkerPool(transport, workers, timeout)


class _NodeHost:
    """Body of a node actor: a ``shm`` pool over envs ``first .. first + spec.num_sims - 1``.

    Worker ``j`` of the pool is worker ``node.workers[j]`` of the parent. Env indices in
    messages are batch-wide; the pool numbers its envs from 0.
    """

    def __init__(
        self,
        spec: VecSpec,
        first: int,
        num_workers: int,
        events: np.ndarray,
        same_step: bool,
        pool_options: dict,
        chunk: int = CHUNK,
        channel: bool = True,
    ):
        import ray

        ignore_sigint()
        self.first = first
        self.info = (os.getpid(), ray.util.get_node_ip_address(),
                     ray.get_runtime_context().get_node_id())
        self.error: str | None = None
        try:
            self.pool = _node_pool(spec, num_workers, **pool_options)
            bufs = self.pool.bufs
            bufs.events[:] = events  # event counts survive the actor's replacement
            names = reply_fields(spec.layout, same_step)
            self.parts = [getattr(bufs, n).reshape(-1).view(np.uint8) for n in names]
            sizes = [p.nbytes for p in self.parts]
            self.offsets = dict(zip(names, np.cumsum([0, *sizes[:-1]]).tolist(), strict=True))
            self.block = np.empty(sum(sizes), dtype=np.uint8)
            self.chunks = [self.block[a : a + chunk] for a in range(0, len(self.block), chunk)]
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        self.channel: tuple | None = None
        if channel and self.error is None:
            try:
                self._listen()
            except OSError as exc:  # the driver steps this node through Ray calls then
                log.warning("node actor %s: no step channel (%s)", first, exc)

    def _listen(self) -> None:
        """Open the step channel: a TCP port on this node's address that takes one
        connection, from the driver, which proves itself with a token first."""
        ip = self.info[1]
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind((ip, 0))
        listener.listen(1)
        token = os.urandom(TOKEN_BYTES)
        self.channel = (ip, listener.getsockname()[1], token)
        threading.Thread(target=self._serve, args=(listener, token), daemon=True,
                         name="deszoo-node-channel").start()

    def _serve(self, listener: socket.socket, token: bytes) -> None:
        """The step channel's thread: accept the driver, then step the pool for it until
        it hangs up. Steps come one at a time and never while a Ray call of this actor
        runs (the driver waits for each), so the pool is never used by two threads at once."""
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                conn.settimeout(10.0)
                if hmac.compare_digest(_recv_bytes(conn, TOKEN_BYTES), token):
                    break
            except OSError:
                pass
            conn.close()
        listener.close()
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        act = memoryview(self.pool.bufs.act.reshape(-1).view(np.uint8))
        head = bytearray(STEP_HEAD.size)
        try:
            while _recv_into(conn, memoryview(head)):
                same_step, nbytes = STEP_HEAD.unpack(head)
                if nbytes != len(act):
                    raise ConnectionError(f"step of {nbytes} bytes of actions; expected {len(act)}")
                _recv_into(conn, act)
                _, notes = self._run("step", None, bool(same_step))
                data = pickle.dumps(notes) if notes is not None else b""
                conn.sendall(REPLY_HEAD.pack(self.block.nbytes, len(data)))
                conn.sendall(memoryview(self.block))
                if data:
                    conn.sendall(data)
        except OSError as exc:  # the driver is gone (it notices a lost actor by itself)
            log.debug("step channel closed: %s", exc)
        finally:
            conn.close()

    def launch(self, seeds: dict[int, list | None]) -> tuple:
        """(Re)start pool workers ``j`` whose envs start with ``seeds[j]``; wait for them.

        Returns ``(actor info, (offsets, chunks per reply), {j: (kind, pid, detail)})``;
        the info ends with the step channel ``(ip, port, token)``, or ``None``.
        """
        info = (*self.info, self.channel)
        if self.error is not None:
            return info, None, {j: ("boot_failed", None, self.error) for j in seeds}
        pool = self.pool
        ws = [pool.workers[j] for j in seeds]
        replies = pool.boot(ws, seeds)
        out = {}
        for w in ws:
            r = replies[w.index]
            pid = w.handle.proc.pid if w.handle is not None else None
            out[w.index] = (r.kind, pid, r.detail)
        return info, (self.offsets, len(self.chunks)), out

    def run(self, command: str, workers: list[int] | None, payload: Any,
            actions: np.ndarray | None) -> tuple:
        """Run ``command`` on pool workers ``workers`` (``None``: all).

        Returns ``(block, replies)``: ``block`` packs the node's rows (step, reset,
        rebuild), ``replies`` is ``None`` when every worker answered ``ok`` with nothing
        to report, else ``[(j, kind, failures, value, detail), ...]``. With more than one
        chunk: ``(replies, chunk 0, chunk 1, ...)``, one return value each (``None``
        chunks when there is no block).
        """
        if actions is not None:
            self.pool.bufs.act[:] = actions
        data, reply = self._run(command, workers, payload)
        if len(self.chunks) == 1:
            return (self.block if data else None), reply
        return (reply, *(self.chunks if data else [None] * len(self.chunks)))

    def _run(self, command: str, workers: list[int] | None, payload: Any) -> tuple:
        """Run ``command`` (actions already in place); ``(whether the block was packed,
        notes)``."""
        pool = self.pool
        ws = pool.workers if workers is None else [pool.workers[j] for j in workers]
        notes = []
        live = []
        for w in ws:
            if w.handle is None:
                notes.append((w.index, "died", [], None, " (not running); its envs were lost"))
            else:
                live.append(w)
        if command != "step":
            payload = {j: self._local(command, p) for j, p in payload.items()}
            replies = pool.exchange(live, command, payload) if live else {}
        elif len(live) == len(pool.workers):  # shm's fast path: None when all are "ok"
            replies = pool.step(bool(payload)) or {}
        else:
            replies = pool.exchange(live, command, payload) if live else {}
        data = command in DATA_COMMANDS
        if data:
            np.concatenate(self.parts, out=self.block)
        if notes or not all(r.kind == "ok" and not r.failures and r.value is None
                            for r in replies.values()):
            for j, r in replies.items():
                for f in r.failures:
                    f.env_index += self.first
                notes.append((j, r.kind, r.failures, r.value, r.detail))
        return data, (notes or None)

    def _local(self, command: str, payload: Any) -> Any:
        """A command's arguments with batch-wide env indices made the pool's."""
        first = self.first
        if command == "call":
            c: Call = payload
            return Call(c.kind, c.name, tuple(s - first for s in c.sims), c.args, c.kwargs,
                        c.values)
        if command == "rebuild":
            seeds, reset_now = payload
            return {s - first: v for s, v in seeds.items()}, reset_now
        return payload

    def close(self) -> None:
        if self.error is None:
            self.pool.close()


# ---- in the parent -----------------------------------------------------------------------
@dataclass
class _Node:
    """The parent's record of one node actor and the workers (consecutive) it hosts."""

    index: int
    target: str | None  # the Ray node id it is placed on (None: where Ray places it)
    workers: list[int]
    first: int
    count: int
    handle: Any = None
    generation: int = 0
    lost: bool = False  # its actor died; the next restart replaces it
    pid: int | None = None
    ip: str | None = None
    node_id: str | None = None
    inflight: dict = field(default_factory=dict)  # first ref -> (kind, [workers], refs)
    command: str | None = None  # the command being gathered for one call
    pending: dict = field(default_factory=dict)  # pool worker j -> payload
    launches: dict = field(default_factory=dict)  # pool worker j -> reset seeds
    copies: list | None = None  # whole-node copy plan
    run: Any = None  # the actor's ``run`` method, with as many returns as its reply has
    sock: socket.socket | None = None  # the step channel to its actor, if it has one
    sock_ws: list[int] | None = None  # the workers of the step in flight on it
    rbuf: np.ndarray | None = None  # where its step replies are read to


@dataclass
class _Slot:
    """Where a worker runs: pool worker ``j`` of node ``node``, started in the actor of
    generation ``generation``."""

    node: int
    j: int
    generation: int
    pid: int | None = None


class RayNodeTransport(RayTransport):
    """One Ray actor per node (:class:`_NodeHost`), each driving a ``shm`` pool of that
    node's workers; one remote call per node and command.

    Args:
        spec: what the pools build.
        workers: the vector env's workers (the pools' workers, in order).
        same_step: the vector env's autoreset mode is ``SameStep``.
        nodes: ``[(Ray node id, CPUs), ...]``: the workers are shared out over them in
            proportion to their CPUs.
        pool_options: options of each node's :class:`_Pool`.
        actor_options: Ray options over :data:`NODE_ACTOR_OPTIONS` (given a
            ``scheduling_strategy``, the actors go where it says).
        close_timeout: seconds :meth:`close` waits for the actors.
        chunk_bytes: largest return value of a node actor's reply.
    """

    body = _NodeHost
    defaults = NODE_ACTOR_OPTIONS

    def __init__(self, spec: VecSpec, workers: list[Worker], same_step: bool,
                 nodes: list[tuple[str, int]], pool_options: dict, actor_options: dict | None,
                 close_timeout: float, chunk_bytes: int = CHUNK, channels: bool = True):
        super().__init__(spec, workers, same_step, actor_options, close_timeout)
        self.pool_options = pool_options
        self.chunk_bytes = chunk_bytes
        self.channels = channels
        self.placement = "scheduling_strategy" not in (actor_options or {})
        self.early: list[Reply] = []  # replies known without asking (a lost node actor)
        # A pool reports a hung worker after ``timeout``; its actor gets a little longer
        # (else a node whose reply is late counts as hung with all its workers). The grace
        # is on the whole wait: added to each poll slice instead, it gave a late node reply
        # only one slice (50 ms) more, and then the node's healthy workers were replaced too
        # (seen in the chaos run with a stopped worker on a busy machine).
        self.grace = min(pool_options["timeout"], 5.0)
        self.nodes: list[_Node] = []
        self.node_of = [0] * len(workers)
        k = 0
        for (target, _), n in zip(nodes, share(len(workers), [c for _, c in nodes]),
                                  strict=True):
            if n == 0:
                continue
            ws = workers[k : k + n]
            k += n
            node = _Node(len(self.nodes), target, [w.index for w in ws], ws[0].first,
                         sum(w.count for w in ws))
            for w in ws:
                self.node_of[w.index] = node.index
            self.nodes.append(node)

    def _new_actor(self, node: _Node) -> None:
        opts = {}
        if node.generation and node.target is not None and node.target not in dict(
            alive_nodes()
        ):
            log.warning("Ray node %s is gone; node actor %d goes where Ray places it",
                        node.target, node.index)
            node.target = None
        if self.placement and node.target is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node.target, soft=False)
        spec = dataclasses.replace(self.spec, num_sims=node.count)
        events = self.bufs.events[node.first : node.first + node.count].copy()
        node.handle = self.actor_cls.options(**opts).remote(
            spec, node.first, len(node.workers), events, self.same_step, self.pool_options,
            self.chunk_bytes, self.channels)
        self.handles.append(node.handle)
        node.generation += 1
        node.lost = False
        node.pid = node.ip = node.node_id = None

    # ---- the contract ---------------------------------------------------------------
    def start(self, w: Worker, reset_seeds: list | None) -> None:
        node = self.nodes[self.node_of[w.index]]
        if node.handle is None:
            self._new_actor(node)
        j = w.index - node.workers[0]
        w.handle = _Slot(node.index, j, node.generation)
        w.to(WorkerState.BOOT)
        node.launches[j] = reset_seeds

    def post(self, ws: Sequence[Worker], command: str, payloads: Any) -> None:
        """Gather the commands per node, then send each node one call."""
        per = isinstance(payloads, dict)
        for w in ws:
            w.to(WorkerState(command))
            slot: _Slot | None = w.handle
            node = self.nodes[self.node_of[w.index]]
            if (slot is None or node.handle is None or node.lost
                    or slot.generation != node.generation):
                self.early.append(Reply(w.index, "died",
                                        detail=" (its node actor was lost); its envs were lost"))
                continue
            if node.command not in (None, command):
                self._send(node)
            node.command = command
            node.pending[slot.j] = payloads[w.index] if per else payloads
        self._flush()

    def _flush(self) -> None:
        """Send every node its gathered launches and command, one remote call each."""
        hook = self.hook
        for node in self.nodes:
            sent = self._send(node)
            if sent and hook is not None:
                hook("handout")
                hook = None

    def _send(self, node: _Node) -> bool:
        sent = False
        if (node.pending and node.command == "step" and node.sock is not None
                and len(node.pending) == len(node.workers) and not node.launches):
            self._send_step(node)
            return True
        if node.launches:
            ref = node.handle.launch.remote(node.launches)
            node.inflight[ref] = ("boot", [node.workers[j] for j in node.launches], [ref])
            node.launches = {}
            sent = True
        if node.pending:
            command, pending = node.command, node.pending
            every = len(pending) == len(node.workers)
            n = self.n
            actions = (self.bufs.act[node.first * n : (node.first + node.count) * n]
                       if command == "step" else None)
            payload = next(iter(pending.values())) if command == "step" else pending
            refs = node.run.remote(command, None if every else sorted(pending), payload, actions)
            if not isinstance(refs, list):
                refs = [refs]
            node.inflight[refs[0]] = (command, [node.workers[j] for j in sorted(pending)], refs)
            node.command, node.pending = None, {}
            sent = True
        return sent

    def _send_step(self, node: _Node) -> None:
        """A whole node's step through its step channel: its actions, no Ray call."""
        n = self.n
        acts = self.bufs.act[node.first * n : (node.first + node.count) * n]
        same_step = bool(next(iter(node.pending.values())))
        ws = [node.workers[j] for j in sorted(node.pending)]
        node.command, node.pending = None, {}
        try:
            node.sock.sendall(STEP_HEAD.pack(int(same_step), acts.nbytes))
            node.sock.sendall(memoryview(acts.reshape(-1).view(np.uint8)))
        except OSError as exc:  # its actor is gone
            self.early += self._lost_channel(node, ws, exc)
            return
        node.sock_ws = ws

    def _connect(self, node: _Node, channel: tuple | None) -> None:
        """Open the node's step channel (if its actor has one); else it steps through Ray."""
        if channel is None or node.copies is None:
            return
        ip, port, token = channel
        try:
            sock = socket.create_connection((ip, port), timeout=10.0)
            sock.sendall(token)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            log.warning("node actor %d: no step channel to %s:%s (%s); steps go through Ray",
                        node.index, ip, port, exc)
            return
        sock.settimeout(None)
        node.sock = sock
        node.rbuf = np.empty(sum(nbytes for _, _, nbytes, _, _ in node.copies), np.uint8)

    def _lost_channel(self, node: _Node, ws: list[int], exc: BaseException) -> list[Reply]:
        """Its step channel broke: the actor is gone (or going); its workers died."""
        if node.sock is not None:
            node.sock.close()
        node.sock, node.sock_ws = None, None
        node.lost = True
        detail = (f" (its node actor was lost; step channel: {type(exc).__name__}: {exc}); "
                  "its envs were lost")
        return [Reply(i, "died", detail=detail) for i in ws]

    def _receive_step(self, node: _Node) -> list[Reply]:
        """A node's step reply from its channel (it is readable)."""
        ws, sock = node.sock_ws, node.sock
        try:
            # The reply follows its first byte at once; an actor stopped in the middle of
            # one counts as lost after the timeout (never a wait for ever).
            sock.settimeout(self.pool_options["timeout"])
            head = _recv_bytes(sock, REPLY_HEAD.size)
            nblock, nnotes = REPLY_HEAD.unpack(head)
            if nblock != len(node.rbuf):
                raise ConnectionError(f"a block of {nblock} bytes; expected {len(node.rbuf)}")
            _recv_into(sock, memoryview(node.rbuf))
            notes = pickle.loads(_recv_bytes(sock, nnotes)) if nnotes else None
            sock.settimeout(None)
        except (OSError, ConnectionError, pickle.UnpicklingError) as exc:
            return self._lost_channel(node, ws, exc)
        node.sock_ws = None
        return self._node_replies(node, "step", ws, (node.rbuf, notes))

    def poll(self, deadline: float, want: int) -> list[Reply]:
        if self.early:
            out, self.early = self.early, []
            return out
        with sigint_deferred():  # launches gathered by start() go out here
            self._flush()
        owner = {ref: node for node in self.nodes for ref in node.inflight}
        socks = {node.sock: node for node in self.nodes if node.sock_ws}
        if not owner and not socks:
            return []
        remaining = max(0.0, deadline - time.monotonic())
        out: list[Reply] = []
        if socks:
            # Ray's calls in flight too (rare: a node without a channel, a repair): look
            # at the channels briefly, then at Ray.
            ready_socks, _, _ = select.select(list(socks), [], [],
                                              min(remaining, 0.002) if owner else remaining)
            for sock in ready_socks:
                out += self._receive_step(socks[sock])
            if not owner:
                return out
        busy = sum(len(ws) for node in self.nodes for _, ws, _ in node.inflight.values())
        ray = self.ray
        ready, _ = ray.wait(list(owner), num_returns=len(owner) if want >= busy else 1,
                            timeout=0.0 if socks else remaining)
        calls = [(owner[ref], *owner[ref].inflight.pop(ref)) for ref in ready]
        try:  # one get for every answer (a call's return values come together)
            values = ray.get([r for *_, refs in calls for r in refs])
        except self.errors:
            values = None
        at = 0
        for node, kind, ws, refs in calls:
            try:
                got = values[at : at + len(refs)] if values is not None else ray.get(refs)
                at += len(refs)
                if len(refs) == 1:
                    value = got[0]
                else:  # (replies, chunks...) -> (block, replies)
                    value = (None if got[1] is None else np.concatenate(got[1:]), got[0])
            except self.errors as exc:
                node.lost = True
                reason = _reason(exc)
                detail = (f" (its node actor was lost; ray: {type(exc).__name__}: {reason}); "
                          "its envs were lost")
                out += [Reply(i, "died", detail=detail) for i in ws]
                continue
            out += self._node_replies(node, kind, ws, value)
        return out

    def _node_replies(self, node: _Node, kind: str, ws: list[int], value: Any) -> list[Reply]:
        out = []
        if kind == "boot":
            info, offsets, results = value
            node.pid, node.ip, node.node_id, channel = info
            if offsets is not None:
                offsets, chunks = offsets
                if node.copies is None:
                    node.copies = self._node_plan(node, offsets)
                node.run = (node.handle.run if chunks == 1
                            else node.handle.run.options(num_returns=chunks + 1))
                if node.sock is None and self.channels:
                    self._connect(node, channel)
            for j, (k, pid, detail) in results.items():
                i = node.workers[j]
                if self.workers[i].handle is not None:
                    self.workers[i].handle.pid = pid
                out.append(Reply(i, "booted" if k == "booted" else "boot_failed",
                                 detail=detail or k))
            return out
        block, notes = value
        if notes is None:
            if block is not None:
                if len(ws) == len(node.workers):
                    for dst, off, nbytes, dtype, shape in node.copies:
                        dst[...] = block[off : off + nbytes].view(dtype).reshape(shape)
                else:
                    for i in ws:
                        self._copy_worker(node, block, self.workers[i])
            return [Reply(i, "ok") for i in ws]
        for j, k, failures, result, detail in notes:
            i = node.workers[j]
            if k == "ok" and block is not None:
                self._copy_worker(node, block, self.workers[i])
            out.append(Reply(i, k, failures, result, detail))
        return out

    def _node_plan(self, node: _Node, offsets: dict[str, int]) -> list:
        """``(destination, offset, nbytes, dtype, shape)`` per field, for the whole node."""
        plan = []
        n = self.n
        for name in self.fields:
            whole = getattr(self.bufs, name)
            unit = 1 if name in SIM_FIELDS else n
            dst = whole[node.first * unit : (node.first + node.count) * unit]
            plan.append((dst, offsets[name], dst.nbytes, dst.dtype, dst.shape))
        return plan

    def _copy_worker(self, node: _Node, block: np.ndarray, w: Worker) -> None:
        """Copy worker ``w``'s rows (only) out of its node's reply."""
        lo = w.first - node.first
        for dst, off, nbytes, dtype, shape in node.copies:
            unit = shape[0] // node.count
            src = block[off : off + nbytes].view(dtype).reshape(shape)
            dst[lo * unit : (lo + w.count) * unit] = src[lo * unit : (lo + w.count) * unit]

    def stop(self, w: Worker) -> None:
        slot: _Slot | None = w.handle
        if slot is None:
            return
        node = self.nodes[slot.node]
        waiting = (any(w.index in ws for _, ws, _ in node.inflight.values())
                   or w.index in (node.sock_ws or ()))
        if node.handle is not None and slot.generation == node.generation and (
            node.lost or waiting
        ):
            self._kill_actor(node)  # dead, or silent with the worker's call in flight
        w.handle = None

    def _kill_actor(self, node: _Node) -> None:
        kill_actors(self.ray, [node.handle])
        self.handles[:] = [h for h in self.handles if h is not node.handle]
        lost = [ws for _, ws, _ in node.inflight.values()] + [node.sock_ws or []]
        for ws in lost:  # calls that will never answer
            self.early += [Reply(i, "died", detail=" (its node actor was killed)")
                           for i in ws if self.workers[i].busy]
        if node.sock is not None:
            node.sock.close()
        node.sock, node.sock_ws = None, None
        node.handle = None
        node.inflight.clear()
        node.command, node.pending, node.launches = None, {}, {}

    def close(self) -> None:
        for node in self.nodes:
            if node.sock is not None:
                node.sock.close()
                node.sock = None
        super().close()

    def describe(self, w: Worker) -> str:
        node = self.nodes[self.node_of[w.index]]
        where = f"pid {node.pid} on {node.ip}" if node.pid is not None else "not started"
        slot: _Slot | None = w.handle
        pid = f"pid {slot.pid}" if slot is not None and slot.pid is not None else "not running"
        j = w.index - node.workers[0]
        return (f"ray node actor {node.index} ({where}), its shm worker {j} ({pid}, envs "
                f"{w.first}..{w.first + w.count - 1})")

    def pids(self) -> list[int]:
        return [w.handle.pid for w in self.workers
                if w.handle is not None and w.handle.pid is not None]

    def actor_pids(self) -> list[int]:
        return [node.pid for node in self.nodes if node.handle is not None and node.pid]

    def worker_nodes(self) -> list[tuple[str, str]]:
        out = []
        for w in self.workers:
            node = self.nodes[self.node_of[w.index]]
            if w.handle is not None and node.ip is not None:
                out.append((node.ip, node.node_id))
        return out


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

    def _transport(self, opts: dict[str, Any]) -> Transport:
        if opts["boot_timeout"] is not None:
            self.boot_timeout = float(opts["boot_timeout"])
        else:
            self.boot_timeout = max(self.timeout, 60.0)
        pool_options = dict(start_method=opts["start_method"], spin_us=opts["spin_us"] or 0.0,
                            timeout=self.timeout, close_timeout=opts["close_timeout"])
        return RayNodeTransport(self.sim_spec, self._workers, self._same_step, self.nodes,
                                pool_options, opts["actor_options"], opts["close_timeout"],
                                self.chunk_bytes, opts["step_channel"] is not False)

    def node_workers(self) -> list[list[int]]:
        """The workers of each node actor, by node."""
        return [list(node.workers) for node in self.transport.nodes]


def _reason(exc: BaseException) -> str:
    """A Ray error in a line or two: its first line and, for an actor whose creation task
    raised, the exception that task raised (the last line of its traceback)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    if len(lines) > 1 and "creation task" in lines[0]:
        return f"{lines[0]} ... {lines[-1]}"
    return lines[0]
