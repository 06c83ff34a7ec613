"""``ray``: Ray actors hosting several envs each, on one machine or across a cluster.

Design (the lifecycle is the base class's; this module is the transport):

* Actor ``w`` hosts envs ``first_w .. first_w + count_w - 1`` in an
  :class:`~deszoo.vector._host.EnvGroup` over its own private buffers (the same per-env code
  as every other backend, which is what makes them bit-identical).
* A command is one remote call per actor: a step sends its rows' actions (one int64 array)
  and gets its results back packed in one uint8 array (observations, masks, rewards,
  flags, clocks, event counts; final observations in SameStep mode only), with a list of
  env failures, usually empty. The parent submits every call, waits for them with one
  ``ray.wait``, and copies each reply into the batch buffers.
* Faults: an actor that dies (killed, ``os._exit``, its node lost) is reported as a dead
  worker, one that gives no answer within ``timeout`` as a hung one, and the base class
  replaces it (``on_error="restart"``) or raises.
* Ray itself: an initialised Ray (``ray.init`` by the caller, or a Ray Client connection) is
  used as it is and never shut down here. Otherwise the first vector env calls
  ``ray.init(address=address)`` and leaves Ray running when it closes, for further vector
  envs; Ray's own exit hook shuts it down with the interpreter (or call ``ray.shutdown()``).

See ``docs/distributed.md``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import traceback
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deszoo.core.arrays import AGENT_ARRAYS
from deszoo.core.params import flag, integer, named_check, optional, real
from deszoo.errors import ConfigError
from deszoo.vector import _procs
from deszoo.vector._host import Buffers, Call, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, VecSpec
from deszoo.vector.options import MAX_SPIN_US, SECONDS, option, rule
from deszoo.vector.pool import Reply, Transport, Worker, WorkerState

__all__ = ["RayTransport", "RayVecEnv", "import_ray", "reply_fields"]

log = logging.getLogger(__name__)

INSTALL_HINT = "backend='ray' needs Ray: pip install 'deszoo[ray]'"
# Fields the parent reads back from an actor's block (``final_obs``/``final``: SameStep only).
FIELDS = (*(name for name, _, _ in AGENT_ARRAYS.values()), "sim_time", "events")
SAME_STEP_FIELDS = ("final_obs", "final", "final_count", "final_time")
SIM_FIELDS = ("sim_time", "events", "final_time", "state", "final_state")


def reply_fields(layout: Layout, same_step: bool) -> tuple[str, ...]:
    """The fields a reply packs: the states only when the batch carries them."""
    state = layout.state_dim > 0
    return (FIELDS + (("state",) if state else ())
            + ((*SAME_STEP_FIELDS, *(("final_state",) if state else ())) if same_step else ()))
# Default actor options: Ray's default resources for actors (one CPU to be placed, none held
# while running, so several vector envs fit on a small cluster), spread over the nodes.
ACTOR_OPTIONS = {"max_restarts": 0, "max_task_retries": 0, "scheduling_strategy": "SPREAD"}


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
    import threading

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


class _Host:
    """Body of one actor: envs ``first .. first + count - 1`` over private buffers.

    Each command returns ``(block, failures, value)``: ``block`` packs the fields the
    parent reads into one uint8 array (serialised by Ray before the next call runs, so it is
    reused), ``failures`` a list of env failures with batch-wide env indices.
    """

    def __init__(
        self,
        factory: Any,
        layout: Layout,
        first: int,
        count: int,
        reset_seeds: list | None,
        same_step: bool,
        events: np.ndarray,
    ):
        self.build_error: str | None = None
        ignore_sigint()
        try:
            local = dataclasses.replace(layout, num_sims=count)
            self.bufs = Buffers(local, bytearray(local.nbytes()))
            self.bufs.events[:] = events  # event counts survive an actor's replacement
            self.group = EnvGroup(factory, self.bufs, 0, count, reset_seeds)
            self.first = first
            # The reply packs only the fields the parent reads (no actions, no final
            # observations in NextStep mode), so it stays small enough for Ray to send it
            # inline (up to 100 KiB) rather than through the object store.
            names = reply_fields(layout, same_step)
            self.parts = [getattr(self.bufs, name).reshape(-1).view(np.uint8) for name in names]
            sizes = [p.nbytes for p in self.parts]
            self.offsets = dict(zip(names, np.cumsum([0, *sizes[:-1]]).tolist(), strict=True))
            self.block = np.empty(sum(sizes), dtype=np.uint8)
        except Exception as exc:
            self.build_error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"

    def boot(self) -> tuple:
        """``(pid, (node ip, node id), offset of each field in the reply, build error)``."""
        import ray

        node = (ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id())
        if self.build_error is not None:
            return os.getpid(), node, None, self.build_error
        return os.getpid(), node, self.offsets, None

    def run(self, command: str, payload: Any, actions: np.ndarray | None) -> tuple:
        if actions is not None:
            self.bufs.act[:] = actions
        first = self.first
        if command == "call":  # batch-wide env indices -> this actor's
            payload = Call(payload.kind, payload.name, tuple(s - first for s in payload.sims),
                           payload.args, payload.kwargs, payload.values)
        elif command == "rebuild":
            seeds, reset_now = payload
            payload = ({s - first: v for s, v in seeds.items()}, reset_now)
        failures, value = self.group.run(command, payload)
        for f in failures:
            f.env_index += first
        if command in ("step", "reset", "rebuild"):
            np.concatenate(self.parts, out=self.block)
            return self.block, failures, value
        return None, failures, value

    def close(self) -> None:
        self.group.close()


@dataclass
class _Actor:
    """The parent's handle on one actor: Ray's handle, the call in flight, where its
    reply goes in the batch buffers."""

    handle: Any
    ref: Any = None
    pid: int | None = None
    node: tuple[str, str] | None = None  # (ip, Ray node id)
    copies: list = field(default_factory=list)


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


class RayTransport(Transport):
    """One Ray actor per worker (:class:`_Host`); one remote call per worker and command.

    Args:
        spec: what the actors build.
        workers: the vector env's workers.
        same_step: the vector env's autoreset mode is ``SameStep``.
        actor_options: Ray options over the body's defaults.
        close_timeout: seconds :meth:`close` waits for the actors to close their envs.
    """

    # The actors' class body and default options (the per-node transport has its own).
    body: type = _Host
    defaults: dict = ACTOR_OPTIONS

    def __init__(self, spec: VecSpec, workers: list[Worker], same_step: bool,
                 actor_options: dict | None, close_timeout: float):
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
        self.fields = reply_fields(self.layout, same_step)
        self.bufs = Buffers(self.layout)
        self.handles: list = []  # what the finalizer kills
        self.close_timeout = [float(close_timeout)]
        self.finalizer = weakref.finalize(self, _shutdown, self.handles, self.close_timeout)

    # ---- the contract ---------------------------------------------------------------
    def start(self, w: Worker, reset_seeds: list | None) -> None:
        handle = self.actor_cls.remote(
            self.spec.factory, self.layout, w.first, w.count, reset_seeds, self.same_step,
            self.bufs.events[w.first : w.first + w.count].copy(),
        )
        self.handles.append(handle)
        w.handle = _Actor(handle, ref=handle.boot.remote())
        w.to(WorkerState.BOOT)

    def post(self, ws: list[Worker], command: str, payloads: Any) -> None:
        per = isinstance(payloads, dict)
        for k, w in enumerate(ws):
            a: _Actor = w.handle
            actions = self.bufs.act[w.rows] if command == "step" else None
            a.ref = a.handle.run.remote(command, payloads[w.index] if per else payloads,
                                        actions)
            w.to(WorkerState(command))
            if k == 0 and self.hook is not None:
                self.hook("handout")

    def poll(self, deadline: float, want: int) -> list[Reply]:
        ray = self.ray
        busy = {w.handle.ref: w for w in self.workers if w.busy and w.handle is not None}
        remaining = max(0.0, deadline - time.monotonic())
        if not busy:
            return []
        ready, _ = ray.wait(list(busy), num_returns=min(max(want, 1), len(busy)),
                            timeout=remaining)
        out = []
        try:
            values = ray.get(ready)
        except self.errors:
            values = None
        for k, ref in enumerate(ready):
            w = busy[ref]
            try:
                value = values[k] if values is not None else ray.get(ref)
            except self.errors as exc:
                out.append(Reply(w.index, "died",
                                 detail=f" (ray: {type(exc).__name__}: {exc}); its envs were lost"))
                continue
            w.handle.ref = None
            out.append(self._reply(w, value))
        return out

    def _reply(self, w: Worker, value: Any) -> Reply:
        a: _Actor = w.handle
        if w.state is WorkerState.BOOT:
            pid, node, offsets, error = value
            a.pid, a.node = pid, node
            if error is not None:
                return Reply(w.index, "boot_failed", detail=error)
            a.copies = self._plan(w, offsets)
            return Reply(w.index, "booted")
        block, failures, result = value
        if block is not None:
            for dst, off, nbytes, dtype, shape in a.copies:
                dst[...] = block[off : off + nbytes].view(dtype).reshape(shape)
        return Reply(w.index, "ok", failures, result)

    def _plan(self, w: Worker, offsets: dict[str, int]) -> list:
        """``(destination view, source offset, nbytes, dtype, shape)`` per field of ``w``."""
        plan = []
        for name in self.fields:
            whole = getattr(self.bufs, name)
            dst = whole[w.first : w.first + w.count] if name in SIM_FIELDS else whole[w.rows]
            plan.append((dst, offsets[name], dst.nbytes, dst.dtype, dst.shape))
        return plan

    def stop(self, w: Worker) -> None:
        a: _Actor | None = w.handle
        if a is None:
            return
        kill_actors(self.ray, [a.handle])
        self.handles[:] = [h for h in self.handles if h is not a.handle]
        w.handle = None

    def close(self) -> None:
        if any(w.busy for w in self.workers):
            self.close_timeout[0] = 0.0  # a hung actor is not worth waiting for
        self.finalizer()

    def describe(self, w: Worker) -> str:
        a: _Actor | None = w.handle
        where = "not started"
        if a is not None and a.node is not None:
            where = f"pid {a.pid} on {a.node[0]}"
        return f"ray actor {w.index} ({where}, envs {w.first}..{w.first + w.count - 1})"

    def pids(self) -> list[int]:
        return [w.handle.pid for w in self.workers
                if w.handle is not None and w.handle.pid is not None]

    def actor_pids(self) -> list[int]:
        return self.pids()

    def worker_nodes(self) -> list[tuple[str, str]]:
        return [w.handle.node for w in self.workers
                if w.handle is not None and w.handle.node is not None]


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
        option("address", None, "str", "the Ray cluster to start or join if Ray is not "
               "initialised", none=True),
        option("per_node", False, flag(), "one actor per Ray node, each running a shm pool "
               "of that node's cores", rules=(_PER_NODE_ONLY,)),
        option("actor_options", None, "dict", "Ray actor options over the defaults",
               none=True),
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
        self.started_ray = ensure_ray(opts["address"])
        return RayTransport(self.sim_spec, self._workers, self._same_step,
                            opts["actor_options"], opts["close_timeout"])

    # ---- extras ---------------------------------------------------------------------
    def actor_pids(self) -> list[int]:
        """Process ids of the Ray actors (by actor index; for ``ray`` the workers)."""
        return self.transport.actor_pids()

    def worker_nodes(self) -> list[tuple[str, str]]:
        """``(ip address, Ray node id)`` of the node each worker runs on, by worker index."""
        return self.transport.worker_nodes()
