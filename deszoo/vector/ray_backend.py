"""``ray``: Ray actors, each running a worker pool over a block of envs, on one machine or
across a cluster.

Design (the lifecycle is the base class's; this module is the transport):

* An actor (:class:`ActorHost`) runs a :class:`~deszoo.vector.pool.WorkerPool` over envs
  ``first .. first + count - 1``, through its public API. Per group (this module), each
  parent worker is one actor whose pool has one in-process worker (an
  :class:`~deszoo.vector._host.EnvGroup` in the actor, the same per-env code as every other
  backend, which is what makes them bit-identical). With ``per_node=True``
  (:mod:`deszoo.vector.ray_nodes`) each node actor's pool has ``shm`` worker processes,
  the parent's workers in order.
* A command is one remote call per actor: a step sends its rows' actions (one array) and
  gets its results back packed in one uint8 array (observations, masks, rewards, flags,
  clocks, event counts; final observations in SameStep mode only), in chunks Ray sends
  inline, with notes only when a worker has something to report. A node actor can also take
  whole-node steps through a step channel (a TCP connection, no Ray code on either side).
* Faults: a pool reports its workers' own faults as their replies. An actor that dies
  (killed, ``os._exit``, its node lost) is a death of each of its workers, one that gives no
  answer within ``timeout`` (plus the transport's grace) a hang; the base class replaces
  the worker (``on_error="restart"``; a lost actor is rebuilt by the first restart) or raises.
* Ray itself: an initialised Ray (``ray.init`` by the caller, or a Ray Client connection) is
  used as it is and never shut down here. Otherwise the first vector env calls
  ``ray.init(address=address)`` and leaves Ray running when it closes, for further vector
  envs; Ray's own exit hook shuts it down with the interpreter (or call ``ray.shutdown()``).

See ``docs/distributed.md``.
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
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deszoo.core.arrays import AGENT_ARRAYS
from deszoo.core.params import flag, integer, named_check, optional, real
from deszoo.errors import ConfigError
from deszoo.vector import _procs
from deszoo.vector._host import Buffers, Call, Layout
from deszoo.vector.base import DeszooVecEnv, VecSpec
from deszoo.vector.options import MAX_SPIN_US, SECONDS, instance, option, rule
from deszoo.vector.pool import (
    Reply,
    Transport,
    Worker,
    WorkerPool,
    WorkerState,
    sigint_deferred,
    split,
)
from deszoo.vector.roundrobin import InProcess

__all__ = ["ActorHost", "RayTransport", "RayVecEnv", "import_ray", "reply_fields"]

log = logging.getLogger(__name__)

INSTALL_HINT = "backend='ray' needs Ray: pip install 'deszoo[ray]'"
# Fields the parent reads back from an actor's block (``final_obs``/``final``: SameStep only).
FIELDS = (*(name for name, _, _ in AGENT_ARRAYS.values()), "sim_time", "events")
SAME_STEP_FIELDS = ("final_obs", "final", "final_count", "final_time")
SIM_FIELDS = ("sim_time", "events", "final_time", "state", "final_state")
DATA_COMMANDS = ("step", "reset", "rebuild")  # commands whose reply carries the rows


def reply_fields(layout: Layout, same_step: bool) -> tuple[str, ...]:
    """The fields a reply packs: the states only when the batch carries them."""
    state = layout.state_dim > 0
    return (FIELDS + (("state",) if state else ())
            + ((*SAME_STEP_FIELDS, *(("final_state",) if state else ())) if same_step else ()))
# Default actor options: Ray's default resources for actors (one CPU to be placed, none held
# while running, so several vector envs fit on a small cluster), spread over the nodes.
ACTOR_OPTIONS = {"max_restarts": 0, "max_task_retries": 0, "scheduling_strategy": "SPREAD"}
# Ray sends a return value of up to 100 KiB inline with the call's answer and a larger one
# through its object store, which costs milliseconds more per call (measured: ridehail_v0,
# 16 envs per node, 390 KB). So a larger reply comes back in chunks of this size, each its
# own return value.
CHUNK = 96 * 1024
# The step channel: the driver sends STEP_HEAD (same-step flag, bytes of actions) and the
# actor's actions; the actor answers REPLY_HEAD (bytes of the block, bytes of the pickled
# notes), its block and its notes (None: every worker "ok").
STEP_HEAD = struct.Struct("<II")
REPLY_HEAD = struct.Struct("<QQ")
TOKEN_BYTES = 16


def import_ray():
    """``import ray``, or an ``ImportError`` that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return ray


def ignore_sigint() -> None:
    """In an actor: leave Ctrl-C to the driver (see :mod:`deszoo.vector._procs`)."""
    import signal

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def ensure_ray(address: str | None) -> bool:
    """Connect to Ray unless already connected; ``True`` if this call initialised it."""
    ray = import_ray()
    if ray.is_initialized():
        if address is not None:
            warnings.warn(
                f"Ray is already initialised; make_vec(address={address!r}) is ignored and "
                "the current connection is used",
                stacklevel=4,
            )
        return False
    log.info("starting Ray: ray.init(address=%r)", address)
    ray.init(address=address)
    return True


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


# ---- inside an actor ---------------------------------------------------------------------
class ActorHost:
    """Body of an actor: a pool of ``num_workers`` workers over envs ``first .. first +
    spec.num_sims - 1`` (messages use batch-wide env indices; the pool numbers its envs
    from 0, its workers as ``j``). Here the workers are in-process :class:`EnvGroup` s
    (:meth:`transport`); with ``channel`` the actor also serves whole-pool steps over a
    step channel.
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
        channel: bool = False,
    ):
        import ray

        ignore_sigint()
        self.first = first
        self.info = (os.getpid(), ray.util.get_node_ip_address(),
                     ray.get_runtime_context().get_node_id())
        self.error: str | None = None
        try:
            workers = [Worker(j, f, c, len(spec.agents))
                       for j, (f, c) in enumerate(split(spec.num_sims, num_workers))]
            self.pool = WorkerPool(self.transport(spec, workers, pool_options), workers,
                                   pool_options["timeout"])
            bufs = self.pool.bufs
            bufs.events[:] = events  # event counts survive the actor's replacement
            # The reply packs only the fields the parent reads (no actions, no final
            # observations in NextStep mode).
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
            except OSError as exc:  # the driver steps this actor through Ray calls then
                log.warning("actor %s: no step channel (%s)", first, exc)

    @staticmethod
    def transport(spec: VecSpec, workers: list[Worker], options: dict) -> Transport:
        """The pool's transport over ``workers``: in this process."""
        return InProcess(spec.factory, spec.layout)

    @staticmethod
    def worker_pid(w: Worker) -> int | None:
        """Process id of the pool's worker ``w`` (it runs in this actor)."""
        return os.getpid()

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
            out[w.index] = (r.kind, self.worker_pid(w) if w.handle is not None else None,
                            r.detail)
        return info, (self.offsets, len(self.chunks)), out

    def run(self, command: str, workers: list[int] | None, payload: Any,
            actions: np.ndarray | None) -> tuple:
        """Run ``command`` on pool workers ``workers`` (``None``: all).

        Returns ``(block, replies)``: ``block`` packs the actor's rows (step, reset,
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
        elif len(live) == len(pool.workers):  # the pool's fast path: None when all are "ok"
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
# Longest wait for Ray to kill actors: ray.kill was seen to block for ever (a vector env
# whose boot failed late in a long test session), and a close must never hang.
KILL_WAIT = 10.0


def kill_actors(ray: Any, handles: list) -> None:
    """``ray.kill`` each actor of ``handles`` (no restart), waiting at most
    :data:`KILL_WAIT` seconds: a kill still blocked then is left to a daemon thread."""
    if not handles:
        return

    def kill() -> None:
        for h in handles:
            try:
                ray.kill(h, no_restart=True)
            except Exception:  # already gone, or Ray is shutting down
                pass

    thread = threading.Thread(target=kill, daemon=True, name="deszoo-ray-kill")
    thread.start()
    thread.join(KILL_WAIT)
    if thread.is_alive():
        log.warning("ray.kill of %d actor(s) did not return within %g s; left running in "
                    "the background", len(handles), KILL_WAIT)


def _shutdown(handles: list, close_timeout: list[float]) -> None:
    """Ask every actor to close its envs, wait ``close_timeout[0]`` s, then kill them all.

    Idempotent. Tolerates a Ray that is already shut down (its actors are gone with it).
    """
    if not handles:
        return
    live = [h for h in handles if h is not None]
    handles.clear()
    try:
        import ray

        if not ray.is_initialized():
            return
        refs = []
        for h in live:
            try:
                refs.append(h.close.remote())
            except Exception:  # the actor is already gone
                pass
        if refs and close_timeout[0] > 0:
            ray.wait(refs, num_returns=len(refs), timeout=close_timeout[0])
        kill_actors(ray, live)
    except Exception:  # never raise from a finalizer (e.g. at interpreter exit)
        log.debug("ray vector env shutdown", exc_info=True)


_ACTOR_CLASSES: dict[tuple, Any] = {}


def _actor_class(ray: Any, body: type, opts: dict) -> Any:
    """``ray.remote(**opts)(body)``, made once per process and options: each new actor class
    is exported to the cluster through its key-value store, a call seen to block for ever
    on a busy machine (Ray re-exports a cached class itself when the session changes)."""
    key = (body, repr(sorted(opts.items())))
    if key not in _ACTOR_CLASSES:
        _ACTOR_CLASSES[key] = ray.remote(**opts)(body)
    return _ACTOR_CLASSES[key]


def _reason(exc: BaseException) -> str:
    """A Ray error in a line or two: its first line and, for an actor whose creation task
    raised, the exception that task raised (the last line of its traceback)."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if not lines:
        return ""
    if len(lines) > 1 and "creation task" in lines[0]:
        return f"{lines[0]} ... {lines[-1]}"
    return lines[0]


@dataclass
class _Node:
    """The parent's record of one actor and the workers (consecutive) it hosts."""

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
    copies: list | None = None  # whole-actor copy plan
    run: Any = None  # the actor's ``run`` method, with as many returns as its reply has
    sock: socket.socket | None = None  # the step channel to its actor, if it has one
    sock_ws: list[int] | None = None  # the workers of the step in flight on it
    rbuf: np.ndarray | None = None  # where its step replies are read to


@dataclass
class _Slot:
    """Where a worker runs: pool worker ``j`` of actor ``node``, started in the actor of
    generation ``generation``."""

    node: int
    j: int
    generation: int
    pid: int | None = None


class RayTransport(Transport):
    """Actors (:attr:`body`), each running a pool of consecutive workers; one remote call
    per actor and command (or one step-channel message per actor and step).

    Args:
        spec: what the actors build.
        workers: the vector env's workers (the pools' workers, in order).
        same_step: the vector env's autoreset mode is ``SameStep``.
        actor_options: Ray options over :attr:`defaults`.
        close_timeout: seconds :meth:`close` waits for the actors to close their envs.
        groups: ``[(Ray node id or None, workers), ...]``: one actor per entry with that
            many workers (entries of 0 skipped), pinned to its node (:attr:`placement`);
            default: one actor per worker, placed by Ray.
        pool_options: options of each actor's pool (``timeout`` at least).
        chunk_bytes: largest return value of an actor's reply.
        channels: whole-actor steps go through step channels.
    """

    # The actors' class body and default options (the per-node transport has its own).
    body: type = ActorHost
    defaults: dict = ACTOR_OPTIONS
    actor_word = "actor"  # what messages call an actor
    lost_words = ""  # what a worker's death in a Ray call of its actor says first

    def __init__(self, spec: VecSpec, workers: list[Worker], same_step: bool,
                 actor_options: dict | None, close_timeout: float,
                 groups: list[tuple[str | None, int]] | None = None,
                 pool_options: dict | None = None, chunk_bytes: int = CHUNK,
                 channels: bool = False):
        ray = import_ray()
        from ray.exceptions import GetTimeoutError, RayError

        self.ray = ray
        self.errors = (GetTimeoutError, RayError)
        self.spec = spec
        self.layout = spec.layout
        self.workers = workers
        self.n = len(spec.agents)
        self.same_step = same_step
        self.actor_cls = _actor_class(ray, self.body, {**self.defaults, **(actor_options or {})})
        self.placement = "scheduling_strategy" not in (actor_options or {})
        self.fields = reply_fields(self.layout, same_step)
        self.bufs = Buffers(self.layout)
        self.pool_options = pool_options or {"timeout": 60.0}
        self.chunk_bytes = chunk_bytes
        self.channels = channels
        self.early: list[Reply] = []  # replies known without asking (a lost actor)
        self.handles: list = []  # what the finalizer kills
        self.close_timeout = [float(close_timeout)]
        self.finalizer = weakref.finalize(self, _shutdown, self.handles, self.close_timeout)
        self.nodes: list[_Node] = []
        self.node_of = [0] * len(workers)
        k = 0
        for target, n in groups or [(None, 1)] * len(workers):
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
        """Gather the commands per actor, then send each actor one call."""
        per = isinstance(payloads, dict)
        for w in ws:
            w.to(WorkerState(command))
            slot: _Slot | None = w.handle
            node = self.nodes[self.node_of[w.index]]
            if (slot is None or node.handle is None or node.lost
                    or slot.generation != node.generation):
                self.early.append(Reply(w.index, "died", detail=f" (its {self.actor_word} "
                                        "was lost); its envs were lost"))
                continue
            if node.command not in (None, command):
                self._send(node)
            node.command = command
            node.pending[slot.j] = payloads[w.index] if per else payloads
        self._flush()

    def _flush(self) -> None:
        """Send every actor its gathered launches and command, one remote call each."""
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
        """A whole actor's step through its step channel: its actions, no Ray call."""
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
        """Open the actor's step channel (if it has one); else it steps through Ray."""
        if channel is None or node.copies is None:
            return
        ip, port, token = channel
        try:
            sock = socket.create_connection((ip, port), timeout=10.0)
            sock.sendall(token)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            log.warning("%s %d: no step channel to %s:%s (%s); steps go through Ray",
                        self.actor_word, node.index, ip, port, exc)
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
        detail = (f" (its {self.actor_word} was lost; step channel: {type(exc).__name__}: "
                  f"{exc}); its envs were lost")
        return [Reply(i, "died", detail=detail) for i in ws]

    def _receive_step(self, node: _Node) -> list[Reply]:
        """An actor's step reply from its channel (it is readable)."""
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
            # Ray's calls in flight too (rare: an actor without a channel, a repair): look
            # at the channels briefly, then at Ray.
            ready_socks, _, _ = select.select(list(socks), [], [],
                                              min(remaining, 0.002) if owner else remaining)
            for sock in ready_socks:
                out += self._receive_step(socks[sock])
            if not owner:
                return out
        # The calls to wait for: all of them for every busy worker, else as many as the
        # wanted workers make on average (at least one).
        busy = sum(len(ws) for node in self.nodes for _, ws, _ in node.inflight.values())
        calls = len(owner) if want >= busy else max(1, want * len(owner) // busy)
        ray = self.ray
        ready, _ = ray.wait(list(owner), num_returns=calls,
                            timeout=0.0 if socks else remaining)
        got = [(owner[ref], *owner[ref].inflight.pop(ref)) for ref in ready]
        try:  # one get for every answer (a call's return values come together)
            values = ray.get([r for *_, refs in got for r in refs])
        except self.errors:
            values = None
        at = 0
        for node, kind, ws, refs in got:
            try:
                parts = values[at : at + len(refs)] if values is not None else ray.get(refs)
                at += len(refs)
                if len(refs) == 1:
                    value = parts[0]
                else:  # (replies, chunks...) -> (block, replies)
                    value = (None if parts[1] is None else np.concatenate(parts[1:]), parts[0])
            except self.errors as exc:
                node.lost = True
                detail = (f" ({self.lost_words}ray: {type(exc).__name__}: {_reason(exc)}); "
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
        """``(destination, offset, nbytes, dtype, shape)`` per field, for the whole actor."""
        plan = []
        n = self.n
        for name in self.fields:
            whole = getattr(self.bufs, name)
            unit = 1 if name in SIM_FIELDS else n
            dst = whole[node.first * unit : (node.first + node.count) * unit]
            plan.append((dst, offsets[name], dst.nbytes, dst.dtype, dst.shape))
        return plan

    def _copy_worker(self, node: _Node, block: np.ndarray, w: Worker) -> None:
        """Copy worker ``w``'s rows (only) out of its actor's reply."""
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
            self.early += [Reply(i, "died", detail=f" (its {self.actor_word} was killed)")
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
        if any(w.busy for w in self.workers):
            self.close_timeout[0] = 0.0  # a hung actor is not worth waiting for
        self.finalizer()

    def describe(self, w: Worker) -> str:
        node = self.nodes[self.node_of[w.index]]
        where = f"pid {node.pid} on {node.ip}" if node.pid is not None else "not started"
        return f"ray actor {w.index} ({where}, envs {w.first}..{w.first + w.count - 1})"

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


# Options of per_node=True only (None: not given).
PER_NODE_ONLY = ("nodes", "start_method", "spin_us", "step_channel")


@rule(("per_node", *PER_NODE_ONLY), "nodes, start_method, spin_us and step_channel are "
      "for per_node=True only")
def _PER_NODE_ONLY(v: dict[str, Any]) -> str | None:
    if not v["per_node"]:
        for name in PER_NODE_ONLY:
            if v[name] is not None:
                return f"{name}={v[name]!r} is for per_node=True only"
    return None


@rule(("num_workers", "num_sims"), "num_workers at most num_sims")
def _WORKERS_FIT(v: dict[str, Any]) -> str | None:
    workers, sims = v["num_workers"], v["num_sims"]
    if workers is not None and workers > sims:
        return (f"num_workers={workers} is more than num_sims={sims}: each worker hosts at "
                "least one env")
    return None


def _node_list(v: Any) -> bool:
    return (isinstance(v, (list, tuple)) and len(v) > 0
            and all(isinstance(n, (list, tuple)) and len(n) == 2
                    and integer(1)(n[1]) is None for n in v))


class RayVecEnv(DeszooVecEnv):
    """Ray actor backend; see :func:`deszoo.vector.make_vec` and ``docs/distributed.md``.

    Options (besides the common ones, see :attr:`options`): ``num_workers`` (actors, at
    most ``num_sims``), ``address`` (where Ray runs if it is not initialised yet: ``None``
    for an existing local cluster or a new local Ray, ``"auto"``, ``"host:6379"`` or
    ``"ray://host:10001"``; ignored, with a warning, when Ray is already initialised),
    ``per_node`` (one actor per node driving a ``shm`` pool:
    :class:`~deszoo.vector.ray_nodes.RayNodeVecEnv`), ``actor_options`` (Ray actor options
    over the defaults ``max_restarts=0, scheduling_strategy="SPREAD"``),
    ``boot_timeout`` (default ``max(timeout, 60)``) and ``close_timeout``.

    Attributes:
        started_ray: whether this vector env initialised Ray (then Ray stays up after
            ``close``, for further vector envs, until ``ray.shutdown()`` or exit).
    """

    backend = "ray"
    per_node = False
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
        option("boot_timeout", None, optional(SECONDS), "seconds to wait for the actors to "
               "start (default: max(timeout, 60))"),
        _procs.CLOSE_TIMEOUT,
        option("nodes", None, optional(named_check(
            "a non-empty list of (Ray node id, CPUs) pairs, CPUs a positive int", _node_list)),
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
        if opts["per_node"]:  # make_vec builds those with RayNodeVecEnv
            raise ConfigError("per_node=True: build it with make_vec(..., backend='ray', "
                              "per_node=True) or deszoo.vector.ray_nodes.RayNodeVecEnv")
        return cls(spec, seed, {**opts, "num_workers": cls.workers_for(spec, opts["num_workers"])})

    def _transport(self, opts: dict[str, Any]) -> Transport:
        if opts["boot_timeout"] is not None:
            self.boot_timeout = float(opts["boot_timeout"])
        else:
            self.boot_timeout = max(self.timeout, 60.0)
        if not self.per_node:
            self.started_ray = ensure_ray(opts["address"])
        return self._ray_transport(opts)

    def _ray_transport(self, opts: dict[str, Any]) -> Transport:
        """The transport of this mode: one actor per worker."""
        return RayTransport(self.sim_spec, self._workers, self._same_step,
                            opts["actor_options"], opts["close_timeout"],
                            pool_options={"timeout": self.timeout})

    # ---- extras ---------------------------------------------------------------------
    def actor_pids(self) -> list[int]:
        """Process ids of the Ray actors (by actor index; for ``ray`` the workers)."""
        return self.transport.actor_pids()

    def worker_nodes(self) -> list[tuple[str, str]]:
        """``(ip address, Ray node id)`` of the node each worker runs on, by worker index."""
        return self.transport.worker_nodes()
