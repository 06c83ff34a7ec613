"""``ray``: Ray actors hosting several envs each, on one machine or across a cluster.

Design:

* Actor ``w`` hosts envs ``first_w .. first_w + count_w - 1`` in an
  :class:`~deszoo.vector._host.EnvGroup` over its own private buffers (the same per-env code
  as every other backend, which is what makes them bit-identical).
* A batch step is one remote call per actor: its rows' actions go in (one int64 array), and
  its results come back packed in one uint8 array (observations, masks, rewards, flags,
  clocks, event counts; final observations in SameStep mode only) with a list of env
  failures, usually empty. The parent submits every call, then waits for all of them at
  once (one ``ray.get``), and copies each reply into the batch buffers.
* Faults: an env exception is caught in the actor and re-raised in the parent as
  :class:`~deszoo.errors.SubEnvError`; an actor that dies (killed, ``os._exit``, its node
  lost) raises :class:`~deszoo.errors.WorkerDiedError`, one that gives no answer within
  ``timeout`` :class:`~deszoo.errors.WorkerTimeoutError`, as a dead or hung ``shm`` worker.
  With ``on_error="restart"`` a failed env is rebuilt inside its actor (the actor is fine),
  and a dead or hung actor is replaced by a fresh one.
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
from typing import Any

import numpy as np

from deszoo.errors import (
    ConfigError,
    VectorEnvError,
    WorkerDiedError,
    WorkerTimeoutError,
)
from deszoo.vector._host import Buffers, EnvFailure, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, State, VecSpec

__all__ = ["RayVecEnv", "import_ray"]

log = logging.getLogger(__name__)

INSTALL_HINT = "backend='ray' needs Ray: pip install 'deszoo[ray]'"
# Fields the parent reads back from an actor's block (``final_obs``/``final``: SameStep only).
FIELDS = (
    "obs", "mask", "rew", "term", "trunc", "live", "needs", "invalid", "invalid_count",
    "sim_time", "events",
)
SAME_STEP_FIELDS = ("final_obs", "final")
SIM_FIELDS = ("sim_time", "events")
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

    Each call returns ``(block, failures)``: ``block`` packs the fields the parent reads
    into one uint8 array (serialised by Ray before the next call runs, so it is reused),
    ``failures`` a list of :class:`EnvFailure` with batch-wide env indices.
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
        self.first = first
        self.same_step = same_step
        self.build_error: tuple[str, str, str] | None = None
        try:
            local = Layout(count, layout.n_agents, layout.obs_dim, layout.n_actions)
            memory = bytearray(local.nbytes())
            self.bufs = Buffers(local, memory)
            self.bufs.events[:] = events  # event counts survive an actor's replacement
            self.group = EnvGroup(factory, self.bufs, 0, count, reset_seeds)
            # The reply packs only the fields the parent reads (no actions, no final
            # observations in NextStep mode), so it stays small enough for Ray to send it
            # inline (up to 100 KiB) rather than through the object store.
            names = FIELDS + (SAME_STEP_FIELDS if same_step else ())
            self.parts = [getattr(self.bufs, name).reshape(-1).view(np.uint8) for name in names]
            sizes = [p.nbytes for p in self.parts]
            self.offsets = dict(zip(names, np.cumsum([0, *sizes[:-1]]).tolist(), strict=True))
            self.block = np.empty(sum(sizes), dtype=np.uint8)
        except Exception as exc:
            self.build_error = (type(exc).__name__, str(exc), traceback.format_exc())

    def boot(self) -> tuple:
        """``(pid, (node ip, node id), offset of each field in the reply, build error)``."""
        import ray

        node = (ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id())
        if self.build_error is not None:
            return os.getpid(), node, None, self.build_error
        return os.getpid(), node, self.offsets, None

    def _answer(self, failures: list[EnvFailure]) -> tuple:
        if failures:
            failures = [
                dataclasses.replace(f, env_index=f.env_index + self.first) for f in failures
            ]
        np.concatenate(self.parts, out=self.block)
        return self.block, failures

    def reset(self, seeds: list) -> tuple:
        return self._answer(self.group.reset(seeds))

    def step(self, actions: np.ndarray) -> tuple:
        self.bufs.act[:] = actions
        return self._answer(self.group.step(self.same_step))

    def rebuild(self, seeds: dict[int, int | None]) -> None:
        """Replace envs (batch-wide index -> seed of their next episode) by fresh ones."""
        for sim, seed in seeds.items():
            self.group.rebuild(sim - self.first, seed)

    def close(self) -> None:
        self.group.close()


class _Actor:
    """The parent's handle on one actor and where its rows go in the batch buffers."""

    def __init__(self, index: int, first: int, count: int, n: int):
        self.index = index
        self.first = first
        self.count = count
        self.rows = slice(first * n, (first + count) * n)
        self.handle: Any = None
        self.pid: int | None = None
        self.node: tuple[str, str] | None = None  # (ip, Ray node id)
        self.copies: list[tuple[np.ndarray, np.ndarray]] = []

    @property
    def sims(self) -> range:
        return range(self.first, self.first + self.count)

    def describe(self) -> str:
        where = f"pid {self.pid} on {self.node[0]}" if self.node is not None else "not started"
        return f"ray actor {self.index} ({where}, envs {self.first}..{self.first + self.count - 1})"


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


class RayVecEnv(DeszooVecEnv):
    """Ray actor backend; see :func:`deszoo.vector.make_vec` and ``docs/distributed.md``.

    Args:
        spec: what to build.
        seed: seed of the first ``reset()`` (env ``i`` gets ``seed + i``).
        num_workers: actors (at most ``num_sims``); the envs need not divide evenly.
        timeout: seconds to wait for the actors' answers to a step or reset.
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
        **options: ``on_error``, ``autoreset_mode``, ``copy`` (see :class:`DeszooVecEnv`).

    Attributes:
        started_ray: whether this vector env initialised Ray (then Ray stays up after
            ``close``, for further vector envs, until ``ray.shutdown()`` or exit).
    """

    backend = "ray"

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
        super().__init__(spec, seed=seed, **options)
        if not timeout > 0:
            raise ConfigError(f"timeout={timeout!r} must be positive (seconds)")
        self._ray = ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayError

        self._errors = (GetTimeoutError, RayActorError, RayError)
        self.timeout = float(timeout)
        self.boot_timeout = max(self.timeout, 60.0) if boot_timeout is None else boot_timeout
        sims = self.num_sims
        num_workers = max(1, min(int(num_workers), sims))
        self.num_workers = num_workers
        self.started_ray = ensure_ray(address)
        opts = {**ACTOR_OPTIONS, **(actor_options or {})}
        self._actor_cls = ray.remote(**opts)(_Host)
        self._same_step = self.autoreset_mode.value == "SameStep"
        self._fields = FIELDS + (SAME_STEP_FIELDS if self._same_step else ())
        self._bufs = Buffers(self.layout)
        counts = [sims // num_workers + (w < sims % num_workers) for w in range(num_workers)]
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
        n = self.agents_per_sim
        self._actors = [_Actor(w, firsts[w], counts[w], n) for w in range(num_workers)]
        self._pending: list | None = None  # refs of a call interrupted while waiting
        self._any_restarted = False
        self._handles: list = []  # what the finalizer kills
        self._close_timeout = [float(close_timeout)]
        self._finalizer = weakref.finalize(self, _shutdown, self._handles, self._close_timeout)
        try:
            self._start(self._actors, None)
        except BaseException:
            self._close_timeout[0] = 0.0
            self._finalizer()
            self.closed = True
            self._state = State.CLOSED
            raise

    # ---- actor lifecycle --------------------------------------------------------------
    def _start(self, actors: list[_Actor], reset_seeds: dict[int, list] | None) -> None:
        """Create ``actors`` and wait until each has built its envs."""
        for a in actors:
            seeds = None if reset_seeds is None else reset_seeds[a.index]
            a.handle = self._actor_cls.remote(
                self.sim_spec.factory, self.layout, a.first, a.count, seeds, self._same_step,
                self._bufs.events[a.first : a.first + a.count].copy(),
            )
            self._handles.append(a.handle)
        refs = [a.handle.boot.remote() for a in actors]
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=self.boot_timeout)
        ready_set = set(ready)
        for a, ref in zip(actors, refs, strict=True):
            if ref not in ready_set:
                free = self._ray.available_resources().get("CPU", 0.0)
                raise WorkerTimeoutError(
                    f"{a.describe()} did not start within {self.boot_timeout:g} s; "
                    f"{len(actors)} actor(s) requested, the cluster has {free:g} free CPUs "
                    "(an actor needs 1 free CPU to be placed, or what actor_options ask for)"
                )
            try:
                pid, node, plan, error = self._ray.get(ref)
            except self._errors as exc:
                raise VectorEnvError(f"{a.describe()} could not start: {exc}") from None
            a.pid, a.node = pid, node
            if error is not None:
                raise VectorEnvError(
                    f"{a.describe()} could not build its envs: {error[0]}: {error[1]}\n"
                    f"worker traceback:\n{error[2]}"
                )
            a.copies = self._plan(a, plan)

    def _plan(self, a: _Actor, offsets: dict[str, int]) -> list:
        """``(destination view, source offset, nbytes, dtype, shape)`` per field of ``a``."""
        plan = []
        for name in self._fields:
            whole = getattr(self._bufs, name)
            dst = whole[a.first : a.first + a.count] if name in SIM_FIELDS else whole[a.rows]
            plan.append((dst, offsets[name], dst.nbytes, dst.dtype, dst.shape))
        return plan

    def _kill(self, a: _Actor) -> None:
        try:
            self._ray.kill(a.handle, no_restart=True)
        except Exception:
            pass
        self._handles[:] = [h for h in self._handles if h is not a.handle]
        a.handle = None

    def _replace(self, a: _Actor) -> None:
        """A fresh actor for ``a``'s envs; their episodes report truncated."""
        self._kill(a)
        seeds = [self._restart_seed(s) for s in a.sims]
        log.warning("restarting %s", a.describe())
        try:
            self._start([a], {a.index: seeds})
        except VectorEnvError as exc:
            self._fail(exc)
        self._mark_restarted(self._bufs, list(a.sims))
        self._any_restarted = True

    # ---- waiting ----------------------------------------------------------------------
    def _gather(self, refs: list) -> tuple[list, list[_Actor], list[_Actor], dict]:
        """Wait for one reply per actor: ``(replies, dead, hung, errors by actor index)``.

        The fast path is one ``ray.get`` of every reply; only when it raises are the
        replies looked at one by one, to tell who died and who hung.
        """
        ray = self._ray
        self._pending = refs
        deadline = time.monotonic() + self.timeout
        try:
            replies = ray.get(refs, timeout=self.timeout)
            self._pending = None
            return replies, [], [], {}
        except self._errors:
            pass
        remaining = max(0.0, deadline - time.monotonic())
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=remaining)
        self._pending = None
        ready_set = set(ready)
        replies: list = [None] * len(refs)
        dead, hung, errors = [], [], {}
        for a, ref in zip(self._actors, refs, strict=True):
            if ref not in ready_set:
                hung.append(a)
                continue
            try:
                replies[a.index] = ray.get(ref)
            except self._errors as exc:
                dead.append(a)
                errors[a.index] = exc
        return replies, dead, hung, errors

    def _absorb(self, replies: list) -> list[EnvFailure]:
        """Copy each actor's block into the batch buffers; return the env failures."""
        failures: list[EnvFailure] = []
        for a, reply in zip(self._actors, replies, strict=True):
            if reply is None:
                continue
            block, found = reply
            for dst, off, nbytes, dtype, shape in a.copies:
                dst[...] = block[off : off + nbytes].view(dtype).reshape(shape)
            if found:
                failures.extend(found)
        return failures

    def _call(self, method: str, args: list) -> list[EnvFailure]:
        """``method`` on every actor (``args[i]`` for actor ``i``), wait, absorb, handle
        dead and hung actors; returns the env failures."""
        if self._pending is not None:
            self._finish_pending()
        refs = [getattr(a.handle, method).remote(arg) for a, arg in zip(
            self._actors, args, strict=True)]
        replies, dead, hung, errors = self._gather(refs)
        failures = self._absorb(replies)
        if dead or hung:
            self._on_lost(dead, hung, errors, replay=(method, args))
        return failures

    def _on_lost(self, dead: list[_Actor], hung: list[_Actor], errors: dict,
                 replay: tuple[str, list]) -> None:
        """Replace dead and hung actors (``on_error="restart"``) or fail the vector env."""
        if self.on_error != "restart":
            if dead:
                a = dead[0]
                self._fail(WorkerDiedError(
                    f"{a.describe()} died; the vector env cannot go on: close() it\n"
                    f"ray: {type(errors[a.index]).__name__}: {errors[a.index]}"
                ))
            names = ", ".join(a.describe() for a in hung)
            self._fail(WorkerTimeoutError(
                f"no answer within timeout={self.timeout:g} s from {names}; "
                "the vector env cannot go on: close() it"
            ))
        method, args = replay
        for a in dead + hung:
            self._replace(a)
            if method == "reset":  # a reset starts episodes anyway: redo it, no truncation
                ref = a.handle.reset.remote(args[a.index])
                replies = [None] * len(self._actors)
                try:
                    replies[a.index] = self._ray.get(ref, timeout=self.timeout)
                except self._errors as exc:
                    self._fail(WorkerDiedError(f"{a.describe()} failed again at reset: {exc}"))
                self._restarted[a.rows] = False
                failures = self._absorb(replies)
                if failures:
                    self._raise_failures(failures)

    def _finish_pending(self) -> None:
        """Wait for a call that was interrupted (Ctrl-C) while waiting; keep its results."""
        refs, self._pending = self._pending, None
        replies, dead, hung, errors = self._gather(refs)
        self._pending = None
        failures = self._absorb(replies)
        if dead or hung:
            self._on_lost(dead, hung, errors, replay=("step", []))
        if failures:
            if self.on_error != "restart":
                self._raise_failures(failures)
            self._rebuild_envs(failures)

    def _fail(self, exc: Exception) -> None:
        self._state = State.FAILED
        self._close_timeout[0] = 0.0  # a hung actor is not worth waiting for
        raise exc

    # ---- Gymnasium API ----------------------------------------------------------------
    def reset(self, *, seed=None, options=None):
        """Reset every env (env ``i`` gets ``seed + i``); waits for all actors."""
        self._check_state(stepping=False)
        seeds = self._seeds(seed)
        self._restarted[:] = False
        self._any_restarted = False
        self._state = State.NEEDS_RESET
        failures = self._call("reset", [seeds[a.first : a.first + a.count] for a in self._actors])
        if failures:
            self._raise_failures(failures)
        self._state = State.READY
        obs, _, _, _, infos = self._results(self._bufs)
        return obs, infos

    def step(self, actions):
        """Step every env with ``actions`` (shape ``(num_envs,)``, integers)."""
        if self._state is not State.READY:
            self._check_state()
        act = self._bufs.act
        self._check_actions(actions, act)
        if self._any_restarted:  # restart flags last one step
            self._restarted[:] = False
            self._any_restarted = False
        failures = self._call("step", [act[a.rows] for a in self._actors])
        if failures:
            if self.on_error != "restart":
                self._raise_failures(failures)
            self._rebuild_envs(failures)
        return self._results(self._bufs)

    def _rebuild_envs(self, failures: list[EnvFailure]) -> None:
        """``on_error="restart"`` after env exceptions: rebuild those envs in their actors."""
        by_actor: dict[int, dict[int, int | None]] = {}
        for f in failures:
            a = next(a for a in self._actors if f.env_index in a.sims)
            by_actor.setdefault(a.index, {})[f.env_index] = self._restart_seed(f.env_index)
        refs = [self._actors[i].handle.rebuild.remote(s) for i, s in by_actor.items()]
        try:
            self._ray.get(refs, timeout=self.timeout)
        except self._errors as exc:
            self._fail(WorkerDiedError(f"ray actor died while rebuilding failed envs: {exc}"))
        sims = sorted(f.env_index for f in failures)
        log.warning("rebuilt env(s) %s after an exception", sims)
        self._mark_restarted(self._bufs, sims)
        self._any_restarted = True

    # ---- extras ---------------------------------------------------------------------
    def worker_pids(self) -> list[int]:
        """Process ids of the actors, by actor index (on their own nodes)."""
        return [a.pid for a in self._actors if a.handle is not None and a.pid is not None]

    def worker_nodes(self) -> list[tuple[str, str]]:
        """``(ip address, Ray node id)`` of the node each actor runs on, by actor index."""
        return [a.node for a in self._actors if a.handle is not None and a.node is not None]

    def close_extras(self, **kwargs: Any) -> None:
        if self._state is State.FAILED:
            self._close_timeout[0] = 0.0
        self._finalizer()
        for a in self._actors:
            a.handle = None
