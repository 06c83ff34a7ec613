"""The Gymnasium face every backend shares: a ``VectorEnv`` over agents (rows env-major,
agent-minor), its :class:`Lifecycle` (:class:`State`, :data:`NEXT`), batch I/O, autoreset
and faults, over a :class:`~deszoo.vector.pool.WorkerPool`. A backend is a subclass that
declares its options and builds its transport. Semantics: ``docs/vector.md``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from deszoo.core.config import is_int
from deszoo.core.groups import AgentRows
from deszoo.core.params import choice, flag, integer, named_check, optional
from deszoo.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    ConfigError,
    NoAsyncCallError,
    ResetNeededError,
    VectorEnvError,
    WorkerTimeoutError,
)
from deszoo.vector._host import Buffers, Call, Layout
from deszoo.vector.batch import Batch
from deszoo.vector.faults import Faults
from deszoo.vector.options import SECONDS, Option, check_rules, option, rule
from deszoo.vector.pool import (
    Reply,
    Transport,
    Worker,
    WorkerPool,
    resolve_workers,
    sigint_deferred,
    split,
    usable_cores,
)

__all__ = ["COMMON_OPTIONS", "NEXT", "DeszooVecEnv", "State", "VecSpec", "step_seconds"]

log = logging.getLogger("deszoo.vector")

_AUTORESET = ("NextStep", "SameStep", "Disabled")


@rule(("batch_size", "num_workers", "num_sims"), "batch_size at most num_sims; below it "
      "(async mode), num_sims divisible by num_workers and batch_size a multiple of the "
      "envs per worker")
def _BATCH_FITS(v: dict[str, Any]) -> str | None:
    sims, batch = v["num_sims"], v["batch_size"]
    if batch is None or batch == sims:
        return None
    if batch > sims:
        return f"batch_size={batch!r} must be an int in 1..num_sims ({sims})"
    workers = min(int(v["num_workers"]), sims)
    per = sims // workers
    if sims % workers or batch % per:
        return (f"async mode needs num_sims ({sims}) divisible by num_workers ({workers}) "
                f"and batch_size ({batch}) a multiple of the envs per worker ({per})")
    return None


@rule(("autoreset_mode", "batch_size", "num_sims"), "'Disabled' needs sync mode "
      "(batch_size None or num_sims)")
def _DISABLED_SYNC(v: dict[str, Any]) -> str | None:
    batch = v["batch_size"]
    if AutoresetMode(v["autoreset_mode"]) is not AutoresetMode.DISABLED:
        return None
    if batch is None or batch == v["num_sims"]:
        return None
    return (f"autoreset_mode='Disabled' needs sync mode (batch_size={batch!r} is below "
            f"num_sims ({v['num_sims']})): in async mode send() would step ended envs, and "
            "a partial reset() drops the steps in flight")


COMMON_OPTIONS: tuple[Option, ...] = (
    option("batch_size", None, optional(integer(1)),
           "envs per recv() (async mode) when below num_sims", rules=(_BATCH_FITS,)),
    option("timeout", 60.0, SECONDS, "seconds to wait for a worker before it counts as hung"),
    option("on_error", "raise", choice("raise", "restart"),
           "what a repaired fault does: raise it or log it"),
    option("autoreset_mode", "NextStep",
           named_check("one of 'NextStep', 'SameStep', 'Disabled'",
                       lambda v: isinstance(v, AutoresetMode) or v in _AUTORESET),
           "Gymnasium's autoreset mode", rules=(_DISABLED_SYNC,)),
    option("copy", True, flag(), "return copies (True) or views of the batch buffers"),
    option("state", False, flag(), "each env's global state in infos['state'] (per row)"),
)


@dataclass(frozen=True)
class VecSpec:
    """What a backend needs to build its envs: a picklable factory, the agents' row layout
    (:class:`~deszoo.core.groups.AgentRows`) and the batch's spaces."""

    factory: Callable[[], Any]
    name: str
    num_sims: int
    rows: AgentRows
    mask_in_obs: bool = False
    state_space: spaces.Box | None = None  # the env's, if it has one
    state_dim: int = 0  # > 0: the batch carries each env's state (make_vec(state=True))

    def with_state(self) -> VecSpec:
        """This spec with each env's global state in the batch."""
        if self.state_space is None:
            raise ConfigError(
                f"make_vec(state=True): {self.name} has no global state (no state_space and "
                "state(), or not a flat Box); leave state out"
            )
        return dataclasses.replace(self, state_dim=int(self.state_space.shape[0]))

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(self.rows.names)

    @property
    def obs_box(self) -> spaces.Box:
        """One observation row (padded across kinds)."""
        return self.rows.batch_observation_space()

    @property
    def observation_space(self) -> spaces.Space:
        if self.mask_in_obs:  # PettingZoo's convention for masks in observations
            mask = spaces.Box(0, 1, (self.rows.mask_dim,), dtype=np.int8)
            return spaces.Dict({"observation": self.obs_box, "action_mask": mask})
        return self.obs_box

    @property
    def action_space(self) -> spaces.Space:
        return self.rows.batch_action_space()

    @property
    def layout(self) -> Layout:
        r = self.rows
        return Layout(self.num_sims, len(r.names), r.obs_dim, r.mask_dim, r.act_shape,
                      r.act_dtype.name, self.state_dim)


class State(enum.Enum):
    """Where a vector env is (Gymnasium's ``AsyncState``, with faults and Ctrl-C)."""

    NEEDS_RESET = "needs reset"  # no episode yet: reset() or async_reset()
    READY = "ready"  # every worker idle, results taken: step, reset, call
    SENT = "sent"  # async mode: steps (or a reset) in flight: recv()
    RECEIVED = "received"  # async mode: recv() gave a batch: send() its actions
    INTERRUPTED = "interrupted"  # a call was cut short (Ctrl-C) with commands in flight
    FAILED = "failed"  # a worker could not be replaced: close()
    CLOSED = "closed"


_S = State
# INTERRUPTED goes back to where the cut-short call started once the next call has
# finished what it left in flight.
NEXT: dict[State, frozenset[State]] = {
    _S.NEEDS_RESET: frozenset({_S.READY, _S.SENT, _S.INTERRUPTED, _S.FAILED, _S.CLOSED}),
    _S.READY: frozenset({_S.SENT, _S.INTERRUPTED, _S.FAILED, _S.CLOSED}),
    _S.SENT: frozenset({_S.RECEIVED, _S.READY, _S.INTERRUPTED, _S.FAILED, _S.CLOSED}),
    _S.RECEIVED: frozenset({_S.SENT, _S.READY, _S.INTERRUPTED, _S.FAILED, _S.CLOSED}),
    _S.INTERRUPTED: frozenset({_S.NEEDS_RESET, _S.READY, _S.SENT, _S.RECEIVED, _S.FAILED,
                               _S.CLOSED}),
    _S.FAILED: frozenset({_S.CLOSED}),
    _S.CLOSED: frozenset(),
}


def step_seconds(infos: dict[str, Any], clock: np.ndarray) -> np.ndarray:
    """Each row's simulated length of the step that returned ``infos`` (``SameStep`` mode),
    given ``clock``, the rows' ``infos["sim_time"]`` before it. A row whose episode ended
    in the step counts up to its end; a restarted sim's clock starts again, so its step has
    no known length (0)."""
    end = np.where(infos["_final_obs"], infos["final_info"]["sim_time"], infos["sim_time"])
    return np.where(infos["restarted"], 0.0, np.maximum(end - clock, 0.0))


def boot_error(what: str, r: Reply, boot_timeout: float) -> VectorEnvError:
    """The error of a worker (``what``) whose boot answered ``r``, not ``"booted"``."""
    if r.kind == "hung":  # (a Ray actor with no room on the cluster, say)
        return WorkerTimeoutError(f"{what} did not start within boot_timeout={boot_timeout:g} s")
    return VectorEnvError(f"{what} could not build its envs: " + (r.detail or r.kind))


# Hot-path shortcut: enum members as module constants (read through the class, ~1 us).
_READY = State.READY
_INTERRUPTED = State.INTERRUPTED
_RECEIVED = State.RECEIVED


class Lifecycle:
    """Where a vector env is, what a call may do there, and the finishing of calls cut
    short. State changes go through :meth:`to` (the sync step and ``recv`` inline theirs).

    Attributes:
        state, resume: the state, and where INTERRUPTED goes back to.
        command: the sync call in flight (a call cut short is finished as what it was).
        recv_workers, recv_rows: RECEIVED: the workers and rows of the last ``recv()``.
    """

    def __init__(self, backend: str, is_async: bool):
        self.backend = backend
        self.is_async = is_async
        self.state = State.NEEDS_RESET
        self.resume = State.NEEDS_RESET
        self.command = "step"
        self.recv_workers: list[int] = []
        self.recv_rows: np.ndarray | None = None
        self.pool: WorkerPool | None = None  # set once built
        self.faults: Faults | None = None
        self.hook: Callable[[str], None] | None = None

    def to(self, new: State) -> None:
        """Move to state ``new``; every transition goes through here (see :data:`NEXT`)."""
        if new is not self.state and new not in NEXT[self.state]:
            raise RuntimeError(f"deszoo bug: no transition {self.state.name} -> {new.name}")
        self.state = new

    def enter(self, call: str) -> None:
        """Raise if ``call`` may not run now; first finish what a cut-short call left in
        flight and, before a reset or call, async mode's steps in flight."""
        state = self.state
        if state is State.CLOSED:
            raise ClosedEnvironmentError(f"{self.backend} vector env is closed")
        if state is State.FAILED:
            raise VectorEnvError(
                f"{self.backend} vector env failed earlier (a worker could not be restarted); "
                "close() it and build a new one"
            )
        if state is State.INTERRUPTED:
            self.settle()
            state = self.state
        if call in ("reset", "call"):
            if state is State.SENT or state is State.RECEIVED:
                self.drain()
                self.to(State.READY)  # nothing in flight: recv() needs a send or reset
            return
        if state is State.NEEDS_RESET:
            raise ResetNeededError(
                f"{self.backend} vector env: {call}() before reset(); call reset()")
        if call == "step":
            if self.is_async:
                raise ConfigError(
                    "step() needs sync mode (batch_size == num_sims); in async mode use "
                    "send/recv")
            if state is State.SENT:
                raise AlreadyPendingCallError(
                    "step() while a reset or step is in flight (async_reset() or send()); "
                    "recv() its results first, or reset()", "step")
            if state is State.RECEIVED:
                raise AlreadyPendingCallError(
                    "step() after recv(): send() the actions of its batch first, or reset()",
                    "step")
        elif call == "recv":
            if state is State.RECEIVED:
                raise AlreadyPendingCallError(
                    "recv() twice without send(); send actions for the last batch", "recv")
            if state is not State.SENT:
                raise NoAsyncCallError(
                    "recv() without send(); call async_reset() or send() first", "recv")
        elif call == "send" and state is not State.RECEIVED:
            raise NoAsyncCallError("send() without a preceding recv(); call recv() first", "send")

    def calling(self, command: str) -> None:
        """A call hands out ``command``: INTERRUPTED until every reply is taken, so a call
        cut short (Ctrl-C) leaves it there. Set before the hand-out, not in an ``except``
        (a second Ctrl-C could land there)."""
        self.resume = self.state
        self.command = command
        self.to(State.INTERRUPTED)

    def settle(self) -> None:
        """Finish a call cut short: results dropped, faults handled as that call would."""
        if self.hook is not None:
            self.hook("settle")
        self.finish_in_flight("after an interrupted call", self.command)
        self.recv_workers, self.recv_rows = [], None
        self.to(self.resume)

    def drain(self) -> None:
        """Async mode: wait for the steps in flight and drop them; faults are logged."""
        self.finish_in_flight("while draining steps in flight", "step")

    def finish_in_flight(self, why: str, command: str) -> None:
        # Kept until handled: a Ctrl-C before the block below holds loses no failure.
        replies = self.pool.finish()
        with sigint_deferred():  # see Faults.report
            self.pool.forget(replies)
            errors = self.faults.handle(replies, command) if replies else []
        for exc in errors:
            log.warning("%s: %s", why, str(exc).splitlines()[0])

    def fail(self, exc: Exception) -> None:
        """The vector env cannot go on: FAILED, and ``exc`` raised."""
        self.to(State.FAILED)
        raise exc


class DeszooVecEnv(VectorEnv):
    """Base class of the backends. A backend sets :attr:`backend`, declares
    :attr:`options` and implements :meth:`make_transport` (:meth:`build` may resolve workers).

    Attributes:
        num_envs: rows (``num_sims * agents_per_sim``), as Gymnasium counts sub-envs.
        num_sims: simulations (PettingZoo envs) in the batch.
        agents_per_sim: agents of each simulation (``possible_agents``).
        num_workers: workers (processes, actors; 1 for ``roundrobin``).
        workers: the :class:`~deszoo.vector.pool.Worker` s by index, run by ``pool``.
        backend: backend name (``"roundrobin"``, ``"supersuit"``, ``"shm"``, ...).
        transport: how this vector env reaches its workers.
    """

    backend: ClassVar[str] = "base"
    # The backend's own options, besides COMMON_OPTIONS.
    options: ClassVar[tuple[Option, ...]] = ()
    transport: Transport
    _bufs: Buffers

    @classmethod
    def declared(cls) -> tuple[Option, ...]:
        """Every option this backend takes: :data:`COMMON_OPTIONS` and its own."""
        return COMMON_OPTIONS + cls.options

    @classmethod
    def create(cls, spec: VecSpec, seed: int | None = 0, **given: Any) -> DeszooVecEnv:
        """Check ``given`` against :meth:`declared`, then :meth:`build`."""
        from deszoo.vector.options import check_options

        opts = check_options(cls.declared(), given, f"make_vec(backend={cls.backend!r})")
        return cls.build(spec, seed, opts)

    @classmethod
    def build(cls, spec: VecSpec, seed: int | None, opts: dict[str, Any]) -> DeszooVecEnv:
        """A vector env of checked options ``opts`` (every declared one present)."""
        return cls(spec, seed, opts)

    @classmethod
    def workers_for(cls, spec: VecSpec, num_workers: int | None) -> int:
        """``num_workers`` checked, or the usable cores (at most one per env)."""
        return resolve_workers(cls.backend, spec.num_sims, num_workers, usable_cores())

    def __init__(self, spec: VecSpec, seed: int | None, opts: dict[str, Any]):
        if opts.get("state") and not spec.state_dim:
            spec = spec.with_state()
        self.sim_spec = spec
        self.layout = spec.layout
        self.num_sims = spec.num_sims
        self.agents_per_sim = len(spec.agents)
        self.possible_agents = list(spec.agents)
        self.num_envs = self.layout.rows
        self.single_observation_space = spec.observation_space
        self.single_action_space = spec.action_space
        self.observation_space = batch_space(spec.observation_space, self.num_envs)
        self.action_space = batch_space(spec.action_space, self.num_envs)
        self._discrete = spec.rows.type is spaces.Discrete
        if self._discrete:
            self.n_actions = int(spec.rows.mask_dim)
        mode = AutoresetMode(opts["autoreset_mode"])
        self.autoreset_mode = mode
        self._same_step = mode is AutoresetMode.SAME_STEP
        self._disabled = mode is AutoresetMode.DISABLED
        self.metadata = {"autoreset_mode": mode, "render_modes": [], "name": spec.name}
        self.on_error = opts["on_error"]
        self.copy = opts["copy"]
        self.timeout = float(opts["timeout"])
        # Starting a worker (a process under spawn, a Ray actor) takes longer than a step.
        self.boot_timeout = max(self.timeout, 30.0)
        self._hook: Callable[[str], None] | None = None
        num_workers = min(int(opts["num_workers"]), self.num_sims)
        self.num_workers = num_workers
        self.workers = [
            Worker(w, first, count, self.agents_per_sim)
            for w, (first, count) in enumerate(split(self.num_sims, num_workers))
        ]
        sims = self.num_sims
        check_rules(self.declared(), {**opts, "num_sims": sims},
                    f"make_vec(backend={self.backend!r})")
        batch = sims if opts["batch_size"] is None else opts["batch_size"]
        per = sims // num_workers
        self.batch_size = int(batch)
        self._async = batch != sims
        self._batch_workers = self.batch_size // per if self._async else num_workers
        self.life = life = Lifecycle(self.backend, self._async)
        self._act_scratch: dict[int, np.ndarray] = {}
        self.transport = self.make_transport(opts)
        self.pool = WorkerPool(self.transport, self.workers, self.timeout, self.boot_timeout)
        self._bufs = bufs = self.transport.bufs
        self.batch = Batch(spec, bufs, self.copy, self._same_step)
        self.faults = Faults(self.pool, self.batch, self.on_error, seed, life.fail)
        life.pool, life.faults = self.pool, self.faults
        self._act = bufs.act
        self._act_u = bufs.act.view(np.uint64) if self._discrete else None
        self._boot()

    def _boot(self) -> None:
        """Start every worker and wait until each has built its envs."""
        try:
            replies = self.pool.boot()
            for w in self.workers:
                if replies[w.index].kind != "booted":
                    raise boot_error(self.describe(w), replies[w.index], self.pool.boot_timeout)
        except BaseException:
            self.close()
            raise

    def make_transport(self, opts: dict[str, Any]) -> Transport:
        """This backend's transport over ``self.workers``."""
        raise NotImplementedError

    # ---- the state machine --------------------------------------------------------------
    @property
    def state(self) -> State:
        """Where this vector env is in its lifecycle."""
        return self.life.state

    @property
    def fault_hook(self) -> Callable[[str], None] | None:
        """Called with each :data:`FAULT_POINTS` name a call passes; ``None`` costs nothing."""
        return self._hook

    @fault_hook.setter
    def fault_hook(self, hook: Callable[[str], None] | None) -> None:
        self._hook = self.batch.hook = self.faults.hook = self.life.hook = hook
        self.pool.set_hook(hook)

    def _settled(self, replies: list[Reply]) -> None:
        """A sync call's replies are handled: drop them, READY (no Ctrl-C meanwhile)."""
        self.pool.forget(replies)
        self.life.to(State.READY)

    # ---- the Gymnasium API --------------------------------------------------------------
    def reset(self, *, seed=None, options=None):
        """Reset every env (env ``i`` gets ``seed + i``), or those of
        ``options["reset_mask"]`` (one bool per row, all rows of an env alike)."""
        self.life.enter("reset")
        which = self.batch.reset_mask(options, self.life.state is State.NEEDS_RESET)
        seeds = self.faults.seeds(seed)
        ws, payloads = [], {}
        for w in self.workers:
            mine = None if which is None else which[w.first : w.first + w.count]
            if mine is not None and not any(mine):
                continue
            ws.append(w)
            payloads[w.index] = (seeds[w.first : w.first + w.count], mine)
        self.batch.clear_restarted(None if which is None
                                   else np.repeat(which, self.agents_per_sim))
        self.life.calling("reset")
        self.pool.post(ws, "reset", payloads)
        replies = list(self.pool.collect(ws, keep=True).values())
        reset_rows = slice(None) if which is None else np.repeat(which, self.agents_per_sim)
        self._bufs.rew[reset_rows] = 0.0
        self._bufs.term[reset_rows] = False
        self._bufs.trunc[reset_rows] = False
        # No episode ends, but those of envs rebuilt in a call (held: the next step's).
        self._bufs.final[~self.batch.held] = False
        self.life.recv_workers, self.life.recv_rows = [], None
        self.faults.report(replies, "reset", lambda: self._settled(replies))
        obs, _, _, _, infos = self.batch.results()
        return obs, infos

    def step(self, actions):
        """Step every env with ``actions`` (shape ``(num_envs,)``, integers)."""
        life = self.life
        if life.state is not _READY or self._async:
            life.enter("step")
        hook = self._hook
        if hook is not None:
            hook("before")
        act = self._act
        # Hot-path shortcut for an integer array: one copy, the largest action seen unsigned
        # (negatives wrap; argmax costs a third of max here); check_actions names the row.
        if (self._discrete and type(actions) is np.ndarray and actions.shape == act.shape
                and actions.dtype.kind in "iu"):
            act[...] = actions
            u = self._act_u
            if u[u.argmax()] >= self.n_actions:
                self.batch.check_actions(actions, act)
        else:
            self.batch.check_actions(actions, act)
        if self._disabled:
            self.batch.check_no_pending_reset()
        batch = self.batch
        ws = self.workers
        if batch.any_restarted:  # (a worker restarted in a call sits this step out)
            ws = batch.begin_step(ws)
        life.resume = _READY  # life.calling("step"), inlined: until every reply is taken
        life.command = "step"
        life.state = _INTERRUPTED
        # The transport's step, not pool.step: one frame less on the hot path.
        deadline = time.monotonic() + self.timeout + self.transport.grace
        got = self.transport.step(ws, self._same_step, deadline) if ws else None
        if got is None:
            life.state = _READY
        else:  # not every worker answered "ok" at once
            replies = list(self.pool.step_replies(got, deadline, keep=True, ws=ws).values())
            self.faults.report(replies, "step", lambda: self._settled(replies))
        return batch.results()

    # ---- async API (EnvPool style) ----------------------------------------------------
    def async_reset(self, seed: Any = None) -> None:
        """Start a reset of every env; results come from :meth:`recv`, a batch at a time."""
        self.life.enter("reset")
        seeds = self.faults.seeds(seed)
        self.batch.clear_restarted()
        payloads = {w.index: (seeds[w.first : w.first + w.count], None) for w in self.workers}
        self.life.recv_workers, self.life.recv_rows = [], None
        with sigint_deferred():  # in flight and SENT, or neither
            self.life.to(State.SENT)
            self.pool.post(self.workers, "reset", payloads)

    def recv(self) -> tuple:
        """The next ``batch_size`` envs to finish: ``(obs, rew, term, trunc, infos)``.

        Rows are those of the ready workers' envs, in the order they finished;
        ``infos["env_id"]`` gives each row's index in the full batch (``0..num_envs-1``).
        """
        self.life.enter("recv")
        # The batch's replies stay taken in the pool until send() drops them: a Ctrl-C
        # anywhere before the hand-over below loses none (the next recv() returns them).
        replies = self.pool.collect_first(self._batch_workers)
        if len(replies) < self._batch_workers:
            raise NoAsyncCallError(
                "recv() without send(); call async_reset() or send() first", "recv")
        ws = [r.worker for r in replies]
        rows = np.concatenate([np.arange(self.num_envs)[self.workers[i].rows] for i in ws])
        repaired = None
        for r in replies:
            if r.kind != "ok" or r.failures:  # once repaired, plain "ok" ones in their place
                repaired = functools.partial(self.pool.give_back, [Reply(i, "ok") for i in ws])
                break
        error = None
        with sigint_deferred():  # the repairs are done, or not begun
            try:
                self.faults.report(replies, "step", repaired)
            except Exception as exc:  # a fault raised (on_error="raise"): the batch is given
                error = exc
        life = self.life
        if life.state is State.FAILED:  # a worker could not be replaced
            raise error
        out = self._recv_results(rows)
        if error is not None and hasattr(error, "results"):
            error.results = self._recv_results(rows)
        # The hand-over: plain stores and no call, where Python never raises a pending
        # KeyboardInterrupt (it does so at calls and loop jumps); one lands before them (the
        # state still SENT, the batch the next recv()'s) or once the caller has the batch.
        life.recv_workers = ws
        life.recv_rows = rows
        life.state = _RECEIVED  # life.to(State.RECEIVED), inlined
        if error is not None:
            raise error
        return out

    def _recv_results(self, rows: np.ndarray) -> tuple:
        *out, infos = self.batch.results(rows)
        infos["env_id"] = rows.copy()
        return (*out, infos)

    def send(self, actions: Any, env_id: Any = None) -> None:
        """Actions for the rows of the last :meth:`recv` (``env_id``, if given, must match)."""
        self.life.enter("send")
        rows = self.life.recv_rows
        if env_id is not None and not np.array_equal(np.asarray(env_id), rows):
            raise VectorEnvError(
                "send(env_id=...) must give the rows of the last recv(), infos['env_id']"
            )
        scratch = self._act_scratch.get(len(rows))
        if scratch is None:
            scratch = self._act_scratch[len(rows)] = np.zeros(
                (len(rows), *self.layout.act_shape), dtype=self.layout.act_dtype)
        self.batch.check_actions(actions, scratch, rows)
        self._bufs.act[rows] = scratch
        ws = [self.workers[i] for i in self.life.recv_workers]
        with sigint_deferred():  # in flight and SENT, or neither
            self.pool.forget(self.life.recv_workers)  # the last recv()'s replies, handed on
            self.batch.begin_step(ws, hold=False)
            self.life.recv_workers, self.life.recv_rows = [], None
            self.life.to(State.SENT)
            self.pool.post(ws, "step", self._same_step)

    # ---- attributes of the envs (Gymnasium's call / get_attr / set_attr) ---------------
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple:
        """Call method ``name`` of every env (or read attribute ``name`` if it is not
        callable); one result per env (``num_sims``), not per row."""
        return tuple(self._call(Call("call", name, (), args, kwargs)))

    def get_attr(self, name: str) -> tuple:
        """Attribute ``name`` of every env; one value per env (``num_sims``)."""
        return tuple(self._call(Call("get", name, ())))

    def set_attr(self, name: str, values: Any) -> None:
        """Set attribute ``name`` of every env: one value for all, or a list or tuple of
        one value per env (``num_sims``). Envs rebuilt after a fault get it again."""
        if isinstance(values, (list, tuple)):
            if len(values) != self.num_sims:
                raise ConfigError(
                    f"set_attr({name!r}, values): {len(values)} values for {self.num_sims} envs; "
                    "give one value, or a list or tuple of one value per env"
                )
            values = list(values)
        else:
            values = [values] * self.num_sims
        self._call(Call("set", name, (), values=tuple(values)))

    def call_envs(self, kind: str, name: str, sims: Sequence[int], *args: Any,
                  values: Sequence[Any] = (), **kwargs: Any) -> list:
        """``get``, ``set`` or ``call`` attribute ``name`` of the envs ``sims`` only."""
        if kind not in ("get", "set", "call"):
            raise ConfigError(f"kind={kind!r}; valid: 'get', 'set', 'call'")
        sims, values = list(sims), tuple(values)
        if any(not is_int(s) or not 0 <= s < self.num_sims for s in sims):
            raise ConfigError(f"env indices {sims} out of range 0..{self.num_sims - 1}")
        if (kind == "set") != bool(values) or (values and len(values) != len(sims)):
            raise ConfigError(f"call_envs({kind!r}, {name!r}): {len(values)} values for "
                              f"{len(sims)} envs; 'set' takes one value per env, the others none")
        return self._call(Call(kind, name, (), args, kwargs, values), sims)

    def _call(self, call: Call, sims: Sequence[int] | None = None) -> list:
        self.life.enter("call")
        sims = list(range(self.num_sims)) if sims is None else sims
        plan = self.pool.plan_call(call, sims)
        ws = [self.workers[i] for i in plan]
        self.life.calling("call")
        replies = self.pool.exchange(ws, "call", plan)
        lost = [r for r in replies.values() if r.kind != "ok"]
        if lost:  # a worker died or hung: it is replaced (or the error raised), then asked again
            try:
                self.faults.report(lost, "call")
            except Exception:
                self.life.to(self.life.resume)  # nothing in flight
                raise
            again = self.pool.exchange([self.workers[r.worker] for r in lost], "call", plan)
            if any(r.kind != "ok" for r in again.values()):
                self.life.fail(VectorEnvError(
                    f"{call.kind}({call.name!r}) failed twice: workers lost"))
            replies.update(again)
        self.life.to(self.life.resume)
        failures = [f for r in replies.values() for f in r.failures]
        self.faults.remember(call, sims, failures)
        if failures:  # the caller's mistake (no such attribute, a bad value): its own type
            raise self.faults.call_error(failures)
        out: dict[int, Any] = {}
        for i, c in plan.items():
            r = replies[i]
            for s, v in zip(c.sims, r.value or [None] * len(c.sims), strict=True):
                out[s] = v
        return [out[s] for s in sims]

    def render(self) -> tuple | None:
        """One frame per env (``num_sims``): ``call("render")``."""
        return self.call("render")

    def close(self, **kwargs: Any) -> None:
        """Release workers and memory; safe to call any number of times."""
        if self.closed:
            return
        if "transport" not in self.__dict__:  # __init__ failed early (Gymnasium may still call)
            self.life.state = State.CLOSED
            return
        try:
            self.close_extras(**kwargs)
            self.transport.close()
        finally:
            self.life.to(State.CLOSED)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (state ``CLOSED``; Gymnasium's attribute)."""
        life = self.__dict__.get("life")
        return life is None or life.state is State.CLOSED

    @closed.setter
    def closed(self, value: bool) -> None:  # Gymnasium's wrappers set it after close()
        if value and not self.closed:
            self.close()

    def close_extras(self, **kwargs: Any) -> None:
        """Backend-specific cleanup before the workers stop (optional)."""

    def describe(self, w: Worker) -> str:
        """A worker in words, for messages."""
        return self.pool.describe(w)

    def num_events(self) -> np.ndarray:
        """SimPy events processed per env since this vector env was built (int64)."""
        return self._bufs.events.copy()

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers, by worker index (empty for in-process
        backends)."""
        return self.pool.pids()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.sim_spec.name} x{self.num_sims} "
            f"({self.num_envs} rows), {self.life.state.value}>"
        )

