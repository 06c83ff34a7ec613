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
import time
import traceback
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deszoo.core.arrays import AGENT_ARRAYS
from deszoo.errors import ConfigError
from deszoo.vector._host import Buffers, Call, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, Reply, VecSpec, Worker

__all__ = ["RayVecEnv", "import_ray"]

log = logging.getLogger(__name__)

INSTALL_HINT = "backend='ray' needs Ray: pip install 'deszoo[ray]'"
# Fields the parent reads back from an actor's block (``final_obs``/``final``: SameStep only).
FIELDS = (*(name for name, _, _ in AGENT_ARRAYS.values()), "sim_time", "events")
SAME_STEP_FIELDS = ("final_obs", "final", "final_count", "final_time")
SIM_FIELDS = ("sim_time", "events", "final_time")
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
        try:
            local = dataclasses.replace(layout, num_sims=count)
            self.bufs = Buffers(local, bytearray(local.nbytes()))
            self.bufs.events[:] = events  # event counts survive an actor's replacement
            self.group = EnvGroup(factory, self.bufs, 0, count, reset_seeds)
            self.first = first
            # The reply packs only the fields the parent reads (no actions, no final
            # observations in NextStep mode), so it stays small enough for Ray to send it
            # inline (up to 100 KiB) rather than through the object store.
            names = FIELDS + (SAME_STEP_FIELDS if same_step else ())
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
        for h in live:
            try:
                ray.kill(h, no_restart=True)
            except Exception:
                pass
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


class RayVecEnv(DeszooVecEnv):
    """Ray actor backend; see :func:`deszoo.vector.make_vec` and ``docs/distributed.md``.

    Args:
        spec: what to build.
        seed: seed of the first ``reset()`` (env ``i`` gets ``seed + i``).
        num_workers: actors (at most ``num_sims``); the envs need not divide evenly.
        timeout: seconds to wait for the actors' answers to a command.
        address: where Ray runs if it is not initialised yet: ``None`` (an existing local
            cluster if there is one, else a new local Ray), ``"auto"`` (the cluster this
            machine belongs to), ``"host:6379"`` or ``"ray://host:10001"`` (Ray Client).
            Ignored, with a warning, when Ray is already initialised.
        actor_options: Ray actor options (``ray.remote(**options)``) over the defaults
            ``max_restarts=0, scheduling_strategy="SPREAD"`` (and Ray's default
            resources); e.g. ``{"num_cpus": 1}`` to reserve a core for each actor.
        boot_timeout: seconds to wait for the actors to start (starting a worker process,
            or a node on an autoscaling cluster, takes longer than a step); default
            ``max(timeout, 60)``.
        close_timeout: seconds ``close`` waits for the actors to close their envs before
            killing them.
        **options: ``batch_size``, ``on_error``, ``autoreset_mode``, ``copy`` (see
            :class:`DeszooVecEnv`).

    Attributes:
        started_ray: whether this vector env initialised Ray (then Ray stays up after
            ``close``, for further vector envs, until ``ray.shutdown()`` or exit).
    """

    backend = "ray"
    per_node = False
    # The actors' class body and default options (``RayNodeVecEnv`` has its own).
    _actor_body: type = _Host
    _actor_defaults: dict = ACTOR_OPTIONS

    def __init__(
        self,
        spec: VecSpec,
        seed: int | None = 0,
        num_workers: int = 1,
        timeout: float = 60.0,
        address: str | None = None,
        actor_options: dict | None = None,
        boot_timeout: float | None = None,
        close_timeout: float = 5.0,
        **options: Any,
    ):
        ray = import_ray()
        super().__init__(spec, seed=seed, num_workers=num_workers, timeout=timeout, **options)
        self._ray = ray
        from ray.exceptions import GetTimeoutError, RayError

        self._errors = (GetTimeoutError, RayError)
        if boot_timeout is not None and not boot_timeout > 0:
            raise ConfigError(f"boot_timeout={boot_timeout!r} must be positive (seconds)")
        self.boot_timeout = max(self.timeout, 60.0) if boot_timeout is None else boot_timeout
        self.started_ray = ensure_ray(address)
        opts = {**self._actor_defaults, **(actor_options or {})}
        self._actor_cls = _actor_class(ray, self._actor_body, opts)
        self._fields = FIELDS + (SAME_STEP_FIELDS if self._same_step else ())
        self._bufs = Buffers(self.layout)
        self._handles: list = []  # what the finalizer kills
        self._close_timeout = [float(close_timeout)]
        self._finalizer = weakref.finalize(self, _shutdown, self._handles, self._close_timeout)
        self._setup()
        self._boot()

    def _setup(self) -> None:
        """What a subclass prepares before the actors start (nothing here)."""

    # ---- transport ------------------------------------------------------------------
    def _launch(self, w: Worker, reset_seeds: list | None) -> None:
        handle = self._actor_cls.remote(
            self.sim_spec.factory, self.layout, w.first, w.count, reset_seeds, self._same_step,
            self._bufs.events[w.first : w.first + w.count].copy(),
        )
        self._handles.append(handle)
        w.handle = _Actor(handle, ref=handle.boot.remote())

    def _post(self, w: Worker, command: str, payload: Any) -> None:
        a: _Actor = w.handle
        actions = self._bufs.act[w.rows] if command == "step" else None
        a.ref = a.handle.run.remote(command, payload, actions)

    def _poll(self, deadline: float, want: int = 1) -> list[Reply]:
        ray = self._ray
        busy = {w.handle.ref: w for w in self._workers if w.busy and w.handle is not None}
        remaining = deadline - time.monotonic()
        if not busy or remaining <= 0:
            return []
        ready, _ = ray.wait(list(busy), num_returns=min(max(want, 1), len(busy)),
                            timeout=remaining)
        out = []
        try:
            values = ray.get(ready)
        except self._errors:
            values = None
        for k, ref in enumerate(ready):
            w = busy[ref]
            try:
                value = values[k] if values is not None else ray.get(ref)
            except self._errors as exc:
                out.append(Reply(w.index, "died",
                                 detail=f" (ray: {type(exc).__name__}: {exc}); its envs were lost"))
                continue
            w.handle.ref = None
            out.append(self._reply(w, value))
        return out

    def _reply(self, w: Worker, value: Any) -> Reply:
        a: _Actor = w.handle
        if w.busy == "boot":
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
        for name in self._fields:
            whole = getattr(self._bufs, name)
            dst = whole[w.first : w.first + w.count] if name in SIM_FIELDS else whole[w.rows]
            plan.append((dst, offsets[name], dst.nbytes, dst.dtype, dst.shape))
        return plan

    def _kill(self, w: Worker) -> None:
        a: _Actor | None = w.handle
        if a is None:
            return
        try:
            self._ray.kill(a.handle, no_restart=True)
        except Exception:
            pass
        self._handles[:] = [h for h in self._handles if h is not a.handle]
        w.handle = None

    def _shutdown(self) -> None:
        finalizer = getattr(self, "_finalizer", None)  # absent if __init__ failed early
        if finalizer is not None:
            finalizer()

    def describe(self, w: Worker) -> str:
        a: _Actor | None = w.handle
        where = "not started"
        if a is not None and a.node is not None:
            where = f"pid {a.pid} on {a.node[0]}"
        return f"ray actor {w.index} ({where}, envs {w.first}..{w.first + w.count - 1})"

    # ---- extras ---------------------------------------------------------------------
    def worker_pids(self) -> list[int]:
        """Process ids of the actors, by actor index (on their own nodes)."""
        return [w.handle.pid for w in self._workers
                if w.handle is not None and w.handle.pid is not None]

    def actor_pids(self) -> list[int]:
        """Process ids of the Ray actors (here the workers themselves)."""
        return self.worker_pids()

    def worker_nodes(self) -> list[tuple[str, str]]:
        """``(ip address, Ray node id)`` of the node each actor runs on, by actor index."""
        return [w.handle.node for w in self._workers
                if w.handle is not None and w.handle.node is not None]

    def close_extras(self, **kwargs: Any) -> None:
        if any(w.busy for w in self._workers):
            self._close_timeout[0] = 0.0  # a hung actor is not worth waiting for
