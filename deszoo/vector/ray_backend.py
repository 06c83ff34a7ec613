"""``ray``: Ray actors, each running a worker pool over a block of envs (one in-process
worker each here; a ``shm`` pool per node in :mod:`deszoo.vector.ray_nodes`). The design,
the step channel, the faults and how Ray is started: ``docs/distributed.md``."""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import logging
import os
import pickle
import select
import signal
import socket
import struct
import threading
import time
import traceback
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deszoo.core.params import flag, integer, named_check, optional, real
from deszoo.errors import ConfigError
from deszoo.vector import _procs
from deszoo.vector._host import Buffers, Layout
from deszoo.vector.base import DeszooVecEnv, VecSpec
from deszoo.vector.options import MAX_SPIN_US, SECONDS, instance, option, rule
from deszoo.vector.pool import Reply, Transport, Worker, WorkerPool, WorkerState, split
from deszoo.vector.roundrobin import InProcess

__all__ = ["ActorHost", "RayTransport", "RayVecEnv", "import_ray", "reply_fields"]

log = logging.getLogger(__name__)

# Ray's default resources for actors (one CPU to be placed, none held while running, so
# several vector envs fit on a small cluster), spread over the nodes.
ACTOR_OPTIONS = {"max_restarts": 0, "max_task_retries": 0, "scheduling_strategy": "SPREAD"}
# A larger reply comes back in chunks of this size, each its own return value: Ray sends one
# of up to 100 KiB inline, a larger one through its object store, milliseconds slower.
CHUNK = 96 * 1024
# The step channel: STEP_HEAD (same-step flag, bytes of actions) and the actions down;
# REPLY_HEAD (bytes of the block, of the pickled notes), the block and the notes up.
STEP_HEAD = struct.Struct("<II")
REPLY_HEAD = struct.Struct("<QQ")
TOKEN_BYTES = 16
# Longest wait for ray.kill, seen to block for ever (late in a long test session).
KILL_WAIT = 10.0


def reply_fields(layout: Layout, same_step: bool) -> tuple[str, ...]:
    """The buffers a reply packs: all but actions and empty ones, finals in SameStep only."""
    return tuple(name for name, shape, _ in layout.fields() if name != "act" and 0 not in shape
                 and (same_step or not name.startswith("final")))


def import_ray():
    """``import ray``, or an ``ImportError`` that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("backend='ray' needs Ray: pip install 'deszoo[ray]'") from exc
    return ray


def ensure_ray(address: str | None) -> bool:
    """Connect to Ray unless already connected; ``True`` if this call initialised it."""
    ray = import_ray()
    if ray.is_initialized():
        if address is not None:
            warnings.warn(f"Ray is already initialised; make_vec(address={address!r}) is "
                          "ignored and the current connection is used", stacklevel=4)
        return False
    log.info("starting Ray: ray.init(address=%r)", address)
    ray.init(address=address)
    return True


def alive_nodes() -> list[tuple[str, int]]:
    """``(Ray node id, CPUs)`` of every alive node that has at least one CPU."""
    nodes = [(n["NodeID"], int(n.get("Resources", {}).get("CPU", 0)))
             for n in import_ray().nodes() if n.get("Alive")]
    return [(node, cpus) for node, cpus in nodes if cpus >= 1]


def _recv(sock: socket.socket, buf: Any, eof_ok: bool = False) -> bool:
    """Fill ``buf`` from ``sock``; ``False`` at EOF before the first byte if ``eof_ok``."""
    view, got = memoryview(buf), 0
    while got < len(view):
        k = sock.recv_into(view[got:])
        if k == 0:
            if got == 0 and eof_ok:
                return False
            where = " in the middle of a message" if got else ""
            raise ConnectionError(f"connection closed{where}")
        got += k
    return True


def _died(ws: list[int], why: str) -> list[Reply]:
    return [Reply(i, "died", detail=f" ({why}); its envs were lost") for i in ws]


# ---- inside an actor ---------------------------------------------------------------------
class ActorHost:
    """Body of an actor: a pool of ``num_workers`` workers (:meth:`transport`, numbered
    ``j``) over envs ``first ..`` (batch-wide in messages); ``channel``: a step channel."""

    def __init__(self, spec: VecSpec, first: int, num_workers: int, events: np.ndarray,
                 same_step: bool, pool_options: dict, chunk: int = CHUNK, channel: bool = False):
        ray = import_ray()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's
        self.first = first
        self.info = (os.getpid(), ray.util.get_node_ip_address(),
                     ray.get_runtime_context().get_node_id())
        self.error: str | None = None
        self.channel: tuple | None = None  # (ip, port, token) of the step channel
        try:
            workers = [Worker(j, f, c, len(spec.agents))
                       for j, (f, c) in enumerate(split(spec.num_sims, num_workers))]
            self.pool = WorkerPool(self.transport(spec, workers, pool_options), workers,
                                   pool_options["timeout"], pool_options["boot_timeout"])
            bufs = self.pool.bufs
            bufs.events[:] = events  # event counts survive the actor's replacement
            self.parts = [getattr(bufs, name).reshape(-1).view(np.uint8)
                          for name in reply_fields(spec.layout, same_step)]
            self.block = np.empty(sum(p.nbytes for p in self.parts), dtype=np.uint8)
            self.chunks = [self.block[a : a + chunk] for a in range(0, len(self.block), chunk)]
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"
        if channel and self.error is None:
            try:  # one connection, from the driver, which proves itself with the token
                listener = socket.create_server((self.info[1], 0), backlog=1)
                token = os.urandom(TOKEN_BYTES)
                self.channel = (self.info[1], listener.getsockname()[1], token)
                threading.Thread(target=self._serve, args=(listener, token), daemon=True,
                                 name="deszoo-node-channel").start()
            except OSError as exc:  # the driver steps this actor through Ray calls then
                log.warning("actor %s: no step channel (%s)", first, exc)

    @staticmethod
    def transport(spec: VecSpec, workers: list[Worker], options: dict) -> Transport:
        """The pool's transport: in this process."""
        return InProcess(spec.factory, spec.layout)

    @staticmethod
    def worker_pid(w: Worker) -> int | None:
        return os.getpid()

    def _serve(self, listener: socket.socket, token: bytes) -> None:
        """The step channel's thread: accept the driver, then step the pool for it until it
        hangs up (never during a Ray call of this actor: the driver waits for each)."""
        got = bytearray(TOKEN_BYTES)
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with contextlib.suppress(OSError):
                conn.settimeout(10.0)
                if _recv(conn, got) and hmac.compare_digest(got, token):
                    break
            conn.close()
        listener.close()
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        act = self.pool.bufs.act.reshape(-1).view(np.uint8)
        head = bytearray(STEP_HEAD.size)
        try:
            while _recv(conn, head, eof_ok=True):
                same_step, nbytes = STEP_HEAD.unpack(head)
                if nbytes != len(act):
                    raise ConnectionError(f"step of {nbytes} bytes of actions; expected {len(act)}")
                _recv(conn, act)
                _, notes = self._run("step", None, bool(same_step))
                data = pickle.dumps(notes) if notes is not None else b""
                conn.sendall(REPLY_HEAD.pack(self.block.nbytes, len(data)))
                conn.sendall(memoryview(self.block))
                conn.sendall(data)
        except OSError as exc:  # the driver is gone (it notices a lost actor by itself)
            log.debug("step channel closed: %s", exc)
        finally:
            conn.close()

    def launch(self, seeds: dict[int, list | None]) -> tuple:
        """(Re)start pool workers ``j`` whose envs start with ``seeds[j]``; wait for them.
        Returns ``((pid, ip, node id, step channel or None), {j: (kind, pid, detail)})``."""
        info = (*self.info, self.channel)
        if self.error is not None:
            return info, {j: ("boot_failed", None, self.error) for j in seeds}
        replies = self.pool.boot([self.pool.workers[j] for j in seeds], seeds)
        pids = {w.index: self.worker_pid(w) for w in self.pool.workers if w.handle is not None}
        return info, {j: (r.kind, pids.get(j), r.detail) for j, r in replies.items()}

    def run(self, command: str, workers: list[int] | None, payload: Any,
            actions: np.ndarray | None) -> tuple:
        """Run ``command`` on pool workers ``workers`` (``None``: all): ``(block, notes)``
        (:meth:`_run`), or ``(notes, chunk 0, ...)``, one return value each."""
        if actions is not None:
            self.pool.bufs.act[:] = actions
        data, notes = self._run(command, workers, payload)
        if len(self.chunks) == 1:
            return (self.block if data else None), notes
        return (notes, *(self.chunks if data else [None] * len(self.chunks)))

    def _run(self, command: str, workers: list[int] | None, payload: Any) -> tuple:
        """Run ``command``: whether the block was packed, and ``None`` when every worker
        answered ``ok`` with nothing to report, else every worker's :class:`Reply`."""
        pool, first = self.pool, self.first
        ws = pool.workers if workers is None else [pool.workers[j] for j in workers]
        live = [w for w in ws if w.handle is not None]
        notes = _died([w.index for w in ws if w.handle is None], "not running")
        if command == "step" and len(live) == len(pool.workers):
            replies = pool.step(bool(payload)) or {}  # the pool's fast path: None if all ok
        else:  # batch-wide env indices made the pool's
            if command == "call":
                payload = {j: dataclasses.replace(c, sims=tuple(s - first for s in c.sims))
                           for j, c in payload.items()}
            elif command == "rebuild":
                payload = {j: ({s - first: v for s, v in seeds.items()}, now)
                           for j, (seeds, now) in payload.items()}
            replies = pool.exchange(live, command, payload) if live else {}
        data = command in ("step", "reset", "rebuild")
        if data:
            np.concatenate(self.parts, out=self.block)
        if notes or not all(r.kind == "ok" and not r.failures and r.value is None
                            for r in replies.values()):
            for r in replies.values():
                for f in r.failures:
                    f.env_index += first
            notes += replies.values()
        return data, (notes or None)

    def close(self) -> None:
        if self.error is None:
            self.pool.close()


# ---- in the parent -----------------------------------------------------------------------
def kill_actors(ray: Any, handles: list) -> None:
    """``ray.kill`` each actor (no restart); a kill blocked past KILL_WAIT s is left behind."""

    def kill() -> None:
        for h in handles:
            with contextlib.suppress(Exception):  # already gone, or Ray is shutting down
                ray.kill(h, no_restart=True)

    thread = threading.Thread(target=kill, daemon=True, name="deszoo-ray-kill")
    thread.start()
    thread.join(KILL_WAIT)
    if thread.is_alive():
        log.warning("ray.kill of %d actor(s) did not return within %g s; left running in "
                    "the background", len(handles), KILL_WAIT)


def _shutdown(handles: list, close_timeout: list[float]) -> None:
    """Ask every actor to close its envs, wait ``close_timeout[0]`` s, kill them all."""
    if not handles:
        return
    live = list(handles)
    handles.clear()
    try:
        ray = import_ray()
        if not ray.is_initialized():
            return
        refs = []
        for h in live:
            with contextlib.suppress(Exception):  # the actor is already gone
                refs.append(h.close.remote())
        if refs and close_timeout[0] > 0:
            ray.wait(refs, num_returns=len(refs), timeout=close_timeout[0])
        kill_actors(ray, live)
    except Exception:  # never raise from a finalizer (e.g. at interpreter exit)
        log.debug("ray vector env shutdown", exc_info=True)


# Actor classes by body and options, made once per process: exporting a new one to the
# cluster was seen to block for ever on a busy machine (Ray re-exports a cached one).
_ACTOR_CLASSES: dict[tuple, Any] = {}


def _reason(exc: BaseException) -> str:
    """A Ray error's first line (and last, for an actor whose creation task raised)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [""]
    return (f"{lines[0]} ... {lines[-1]}" if len(lines) > 1 and "creation task" in lines[0]
            else lines[0])


@dataclass
class _Node:
    """The parent's record of one actor and the workers (consecutive) it hosts."""

    index: int
    target: str | None  # the Ray node id it is pinned to (None: where Ray places it)
    workers: list[int]
    first: int
    count: int
    acts: np.ndarray  # its rows of the batch's actions
    copies: list  # (batch rows, offset, nbytes, dtype, shape) per field of its replies
    nbytes: int  # of its replies' block
    handle: Any = None
    run: Any = None  # the actor's ``run`` method, with as many returns as its reply has
    generation: int = 0  # actors killed so far (a worker's handle says in which it started)
    lost: bool = False  # its actor died; the next restart replaces it
    pid: int | None = None
    ip: str | None = None
    node_id: str | None = None
    inflight: dict = field(default_factory=dict)  # first ref -> (kind, [workers], refs)
    command: str | None = None  # the command being gathered for one call
    pending: dict = field(default_factory=dict)  # pool worker j -> payload
    launches: dict = field(default_factory=dict)  # pool worker j -> reset seeds
    sock: socket.socket | None = None  # the step channel to its actor, if it has one
    sock_ws: list[int] | None = None  # the workers of the step in flight on it
    rbuf: np.ndarray | None = None  # where its step replies are read to


@dataclass
class _Slot:  # a worker's handle (chaos_harness reads its pid)
    generation: int  # of its actor
    pid: int | None = None


class RayTransport(Transport):
    """Actors (:attr:`body`), each running a pool of consecutive workers: one per entry of
    ``groups`` (``[(Ray node id or None, workers), ...]``, pinned while that node is alive
    unless ``actor_options`` has a ``scheduling_strategy``), by default one per worker."""

    body: type = ActorHost
    defaults: dict = ACTOR_OPTIONS
    actor_word = "actor"  # what messages call an actor
    lost_words = ""  # what a worker's death in a Ray call of its actor says first

    def __init__(self, spec: VecSpec, workers: list[Worker], same_step: bool,
                 actor_options: dict | None, close_timeout: float, pool_options: dict,
                 groups: list[tuple[str | None, int]] | None = None, chunk_bytes: int = CHUNK,
                 channels: bool = False):
        ray = import_ray()
        from ray.exceptions import GetTimeoutError, RayError

        self.ray, self.errors = ray, (GetTimeoutError, RayError)
        self.spec, self.workers, self.same_step = spec, workers, same_step
        self.n = len(spec.agents)
        opts = {**self.defaults, **(actor_options or {})}
        key = (self.body, repr(sorted(opts.items())))
        if key not in _ACTOR_CLASSES:
            _ACTOR_CLASSES[key] = ray.remote(**opts)(self.body)
        self.actor_cls = _ACTOR_CLASSES[key]
        self.placement = "scheduling_strategy" not in (actor_options or {})
        self.bufs = Buffers(spec.layout)
        self.pool_options = pool_options
        self.chunk_bytes, self.channels = chunk_bytes, channels
        self.early: list[Reply] = []  # replies known without asking (a lost actor)
        self.handles: list = []  # what the finalizer kills
        self.close_timeout = [float(close_timeout)]
        self.finalizer = weakref.finalize(self, _shutdown, self.handles, self.close_timeout)
        fields = reply_fields(spec.layout, same_step)
        self.nodes: list[_Node] = []
        self.node_of = [0] * len(workers)
        k = 0
        for target, n in groups or [(None, 1)] * len(workers):
            ws, k = workers[k : k + n], k + n
            if not ws:
                continue
            first, count = ws[0].first, sum(w.count for w in ws)
            copies, off = [], 0
            for name in fields:  # the actor packs its rows of these buffers in this order
                whole = getattr(self.bufs, name)
                unit = whole.shape[0] // spec.num_sims
                dst = whole[first * unit : (first + count) * unit]
                copies.append((dst, off, dst.nbytes, dst.dtype, dst.shape))
                off += dst.nbytes
            acts = self.bufs.act[first * self.n : (first + count) * self.n]
            for w in ws:
                self.node_of[w.index] = len(self.nodes)
            self.nodes.append(_Node(len(self.nodes), target, [w.index for w in ws], first,
                                    count, acts, copies, off))

    def _new_actor(self, node: _Node) -> None:
        opts = {}
        if node.generation and node.target and node.target not in dict(alive_nodes()):
            log.warning("Ray node %s is gone; %s %d goes where Ray places it", node.target,
                        self.actor_word, node.index)
            node.target = None
        if self.placement and node.target is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node.target, soft=False)
        spec = dataclasses.replace(self.spec, num_sims=node.count)
        events = self.bufs.events[node.first : node.first + node.count].copy()
        node.handle = self.actor_cls.options(**opts).remote(
            spec, node.first, len(node.workers), events, self.same_step, self.pool_options,
            self.chunk_bytes, self.channels)
        chunks = -(-node.nbytes // self.chunk_bytes)  # as the actor cuts its block
        node.run = (node.handle.run if chunks == 1
                    else node.handle.run.options(num_returns=chunks + 1))
        self.handles.append(node.handle)
        node.lost = False
        node.pid = node.ip = node.node_id = None

    def start(self, w: Worker, reset_seeds: list | None) -> None:
        node = self.nodes[self.node_of[w.index]]
        if node.handle is None:
            self._new_actor(node)
        w.handle = _Slot(node.generation)
        w.to(WorkerState.BOOT)
        node.launches[w.index - node.workers[0]] = reset_seeds

    def post(self, ws: Sequence[Worker], command: str, payloads: Any) -> None:
        """Gather the commands per actor, then send each actor one call."""
        per = isinstance(payloads, dict)
        for w in ws:
            w.to(WorkerState(command))
            node = self.nodes[self.node_of[w.index]]
            if w.handle is None or w.handle.generation != node.generation or node.lost:
                self.early += _died([w.index], f"its {self.actor_word} was lost")
                continue
            if node.command not in (None, command):
                self._send(node)
            node.command = command
            node.pending[w.index - node.workers[0]] = payloads[w.index] if per else payloads
        self._flush()

    def _flush(self) -> None:
        hook = self.hook
        for node in self.nodes:
            if self._send(node) and hook is not None:
                hook("handout")
                hook = None

    def _send(self, node: _Node) -> bool:
        """Send ``node`` its gathered launches and command; whether there were any."""
        launches, pending, command = node.launches, node.pending, node.command
        every = len(pending) == len(node.workers)
        if pending and command == "step" and every and node.sock is not None and not launches:
            node.command, node.pending = None, {}  # a whole step through the step channel
            try:
                node.sock.sendall(STEP_HEAD.pack(bool(next(iter(pending.values()))),
                                                 node.acts.nbytes))
                node.sock.sendall(memoryview(node.acts.reshape(-1).view(np.uint8)))
                node.sock_ws = list(node.workers)
            except OSError as exc:  # its actor is gone
                self.early += self._lost_channel(node, list(node.workers), exc)
            return True
        if launches:
            ref = node.handle.launch.remote(launches)
            node.inflight[ref] = ("boot", [node.workers[j] for j in launches], [ref])
            node.launches = {}
        if pending:
            step = command == "step"
            refs = node.run.remote(command, None if every else sorted(pending),
                                   next(iter(pending.values())) if step else pending,
                                   node.acts if step else None)
            refs = refs if isinstance(refs, list) else [refs]
            node.inflight[refs[0]] = (command, [node.workers[j] for j in sorted(pending)], refs)
            node.command, node.pending = None, {}
        return bool(launches or pending)

    def _hang_up(self, node: _Node) -> None:
        if node.sock is not None:
            node.sock.close()
        node.sock, node.sock_ws = None, None

    def _lost_channel(self, node: _Node, ws: list[int], exc: BaseException) -> list[Reply]:
        self._hang_up(node)
        node.lost = True
        return _died(ws, f"its {self.actor_word} was lost; step channel: "
                         f"{type(exc).__name__}: {exc}")

    def _receive_step(self, node: _Node) -> list[Reply]:
        """An actor's step reply from its channel (it is readable)."""
        ws, sock, head = node.sock_ws, node.sock, bytearray(REPLY_HEAD.size)
        try:
            # A reply follows its first byte at once: an actor stopped midway is lost after
            # the timeout, never waited for for ever.
            sock.settimeout(self.pool_options["timeout"])
            _recv(sock, head)
            nblock, nnotes = REPLY_HEAD.unpack(head)
            if nblock != len(node.rbuf):
                raise ConnectionError(f"a block of {nblock} bytes; expected {len(node.rbuf)}")
            data = bytearray(nnotes)
            _recv(sock, node.rbuf)
            _recv(sock, data)
            notes = pickle.loads(data) if nnotes else None
            sock.settimeout(None)
        except (OSError, pickle.UnpicklingError) as exc:
            return self._lost_channel(node, ws, exc)
        node.sock_ws = None
        return self._node_replies(node, "step", ws, (node.rbuf, notes))

    def poll(self, deadline: float, want: int) -> list[Reply]:
        if self.early:
            out, self.early = self.early, []
            return out
        self._flush()  # launches gathered by start() go out here
        owner = {ref: node for node in self.nodes for ref in node.inflight}
        socks = {node.sock: node for node in self.nodes if node.sock_ws}
        if not owner and not socks:
            return []
        remaining = max(0.0, deadline - time.monotonic())
        out: list[Reply] = []
        if socks:
            # Ray calls in flight too (rare): look at the channels briefly, then at Ray.
            ready_socks, _, _ = select.select(list(socks), [], [],
                                              min(remaining, 0.002) if owner else remaining)
            for sock in ready_socks:
                out += self._receive_step(socks[sock])
            if not owner:
                return out
        # Wait for every call, or for as many as the wanted workers make on average.
        busy = sum(len(ws) for node in self.nodes for _, ws, _ in node.inflight.values())
        calls = len(owner) if want >= busy else max(1, want * len(owner) // busy)
        ready, _ = self.ray.wait(list(owner), num_returns=calls,
                                 timeout=0.0 if socks else remaining)
        got = [(owner[ref], *owner[ref].inflight.pop(ref)) for ref in ready]
        try:  # one get for every answer (a call's return values come together)
            values = self.ray.get([r for *_, refs in got for r in refs])
        except self.errors:
            values = None
        at = 0
        for node, kind, ws, refs in got:
            try:
                parts = values[at : at + len(refs)] if values is not None else self.ray.get(refs)
                at += len(refs)
                if len(refs) == 1:
                    value = parts[0]
                else:  # (notes, chunk 0, ...) -> (block, notes)
                    notes, first_chunk = parts[0], parts[1]
                    value = (None if first_chunk is None else np.concatenate(parts[1:]), notes)
            except self.errors as exc:
                node.lost = True
                out += _died(ws, f"{self.lost_words}ray: {type(exc).__name__}: {_reason(exc)}")
                continue
            out += self._node_replies(node, kind, ws, value)
        return out

    def _node_replies(self, node: _Node, kind: str, ws: list[int], value: Any) -> list[Reply]:
        if kind == "boot":
            (node.pid, node.ip, node.node_id, channel), results = value
            if node.sock is None and self.channels and channel is not None:
                ip, port, token = channel
                try:  # the actor's step channel; else it steps through Ray
                    node.sock = socket.create_connection((ip, port), timeout=10.0)
                    node.sock.sendall(token)
                    node.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    node.sock.settimeout(None)
                    node.rbuf = np.empty(node.nbytes, np.uint8)
                except OSError as exc:
                    self._hang_up(node)
                    log.warning("%s %d: no step channel to %s:%s (%s); steps go through Ray",
                                self.actor_word, node.index, ip, port, exc)
            out = []
            for j, (k, pid, detail) in results.items():
                i = node.workers[j]
                if self.workers[i].handle is not None:
                    self.workers[i].handle.pid = pid
                out.append(Reply(i, "booted" if k == "booted" else "boot_failed",
                                 detail=detail or k))
            return out
        block, notes = value
        if notes is None:  # every worker "ok", nothing to report
            if block is not None:
                self._copy(node, block, None if len(ws) == len(node.workers) else ws)
            return [Reply(i, "ok") for i in ws]
        for r in notes:
            r.worker = node.workers[r.worker]
            if r.kind == "ok" and block is not None:
                self._copy(node, block, [r.worker])
        return notes

    def _copy(self, node: _Node, block: np.ndarray, ws: list[int] | None) -> None:
        """Copy an actor's reply into the batch: all its rows, or workers ``ws``'."""
        for dst, off, nbytes, dtype, shape in node.copies:
            src = block[off : off + nbytes].view(dtype).reshape(shape)
            if ws is None:
                dst[...] = src
                continue
            unit = shape[0] // node.count
            for w in (self.workers[i] for i in ws):
                lo, hi = (w.first - node.first) * unit, (w.first - node.first + w.count) * unit
                dst[lo:hi] = src[lo:hi]

    def stop(self, w: Worker) -> None:
        node, slot = self.nodes[self.node_of[w.index]], w.handle
        waiting = (any(w.index in ws for _, ws, _ in node.inflight.values())
                   or w.index in (node.sock_ws or ()))
        if slot is not None and slot.generation == node.generation and (node.lost or waiting):
            self._kill_actor(node)  # dead, or silent with the worker's call in flight
        w.handle = None

    def _kill_actor(self, node: _Node) -> None:
        kill_actors(self.ray, [node.handle])
        self.handles[:] = [h for h in self.handles if h is not node.handle]
        for ws in [ws for _, ws, _ in node.inflight.values()] + [node.sock_ws or []]:
            self.early += [Reply(i, "died", detail=f" (its {self.actor_word} was killed)")
                           for i in ws if self.workers[i].busy]  # calls never to answer
        self._hang_up(node)
        node.handle, node.inflight, node.generation = None, {}, node.generation + 1
        node.command, node.pending, node.launches = None, {}, {}

    def close(self) -> None:
        for node in self.nodes:
            self._hang_up(node)
        if any(w.busy for w in self.workers):
            self.close_timeout[0] = 0.0  # a hung actor is not worth waiting for
        self.finalizer()

    def where(self, w: Worker) -> tuple[_Node, str]:
        """Worker ``w``'s actor, and where that actor runs in words."""
        node = self.nodes[self.node_of[w.index]]
        return node, (f"pid {node.pid} on {node.ip}" if node.pid is not None else "not started")

    def describe(self, w: Worker) -> str:
        _, where = self.where(w)
        return f"ray actor {w.index} ({where}, envs {w.first}..{w.first + w.count - 1})"

    def pid(self, w: Worker) -> int | None:
        return None if w.handle is None else w.handle.pid


PER_NODE_ONLY = ("nodes", "start_method", "spin_us", "step_channel")


@rule(("per_node", *PER_NODE_ONLY), "nodes, start_method, spin_us and step_channel are "
      "for per_node=True only")
def _PER_NODE_ONLY(v: dict[str, Any]) -> str | None:
    given = [name for name in PER_NODE_ONLY if v[name] is not None and not v["per_node"]]
    return f"{given[0]}={v[given[0]]!r} is for per_node=True only" if given else None


@rule(("num_workers", "num_sims"), "num_workers at most num_sims")
def _WORKERS_FIT(v: dict[str, Any]) -> str | None:
    workers, sims = v["num_workers"], v["num_sims"]
    if workers is not None and workers > sims:
        return (f"num_workers={workers} is more than num_sims={sims}: each worker hosts at "
                "least one env")
    return None


class RayVecEnv(DeszooVecEnv):
    """Ray actor backend (its options: :attr:`options`); see ``docs/distributed.md``.
    ``started_ray``: whether this vector env initialised Ray (it stays up after ``close``,
    for further vector envs, until ``ray.shutdown()`` or exit)."""

    backend = "ray"
    per_node = False
    chunk_bytes = CHUNK  # largest return value of an actor's reply
    options = (
        option("num_workers", None, optional(integer(1)), "Ray actors (with per_node: shm pool "
               "workers in all; default: the usable cores, or the cluster's CPUs with "
               "per_node)", rules=(_WORKERS_FIT,)),
        option("address", None, optional(instance("a str", str)), "the Ray cluster to "
               "start or join if Ray is not initialised"),
        option("per_node", False, flag(), "one actor per Ray node, each running a shm pool "
               "of that node's cores", rules=(_PER_NODE_ONLY,)),
        option("actor_options", None, optional(instance("a dict", dict)),
               "Ray actor options over the defaults"),
        option("boot_timeout", None, optional(SECONDS), "seconds to wait for the actors (and "
               "a per-node pool's workers) to start (default: max(timeout, 60))"),
        _procs.CLOSE_TIMEOUT,
        option("nodes", None, optional(named_check(
            "a non-empty list of (Ray node id, CPUs) pairs, CPUs a positive int",
            lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(
                isinstance(n, (list, tuple)) and len(n) == 2 and integer(1)(n[1]) is None
                for n in v))),
            "per_node only: [(Ray node id, CPUs), ...] to use (default: every alive node "
            "with CPUs)"),
        _procs.START_METHOD,  # per_node only: the pools'
        option("spin_us", None, optional(real(0, MAX_SPIN_US)), "per_node only: how long an "
               "idle pool worker polls before it sleeps, in microseconds (default 0)"),
        option("step_channel", None, optional(flag()), "per_node only: steps go through a "
               "direct TCP connection to each node actor (default True), or through Ray "
               "calls (False)"),
    )

    @classmethod
    def build(cls, spec: VecSpec, seed: int | None, opts: dict[str, Any]) -> DeszooVecEnv:
        import_ray()  # ImportError saying how to install it
        if cls.per_node:
            return cls(spec, seed, opts)
        if opts["per_node"]:  # make_vec builds those with RayNodeVecEnv
            raise ConfigError("per_node=True: build it with make_vec(..., backend='ray', "
                              "per_node=True) or deszoo.vector.ray_nodes.RayNodeVecEnv")
        return cls(spec, seed, {**opts, "num_workers": cls.workers_for(spec, opts["num_workers"])})

    def make_transport(self, opts: dict[str, Any]) -> Transport:
        self.boot_timeout = float(opts["boot_timeout"] or max(self.timeout, 60.0))
        if not self.per_node:
            self.started_ray = ensure_ray(opts["address"])
        return self._ray_transport(opts)

    def _ray_transport(self, opts: dict[str, Any]) -> Transport:  # one actor per worker
        return RayTransport(self.sim_spec, self.workers, self._same_step,
                            opts["actor_options"], opts["close_timeout"],
                            {"timeout": self.timeout, "boot_timeout": self.boot_timeout},
                            chunk_bytes=self.chunk_bytes)

    def actor_pids(self) -> list[int]:
        """Process ids of the Ray actors (by actor index; for ``ray`` the workers)."""
        return [node.pid for node in self.transport.nodes if node.handle is not None and node.pid]

    def worker_nodes(self) -> list[tuple[str, str]]:
        """``(ip address, Ray node id)`` of the node each worker runs on, by worker index."""
        t = self.transport
        nodes = [t.nodes[t.node_of[w.index]] for w in self.workers if w.handle is not None]
        return [(node.ip, node.node_id) for node in nodes if node.ip is not None]
