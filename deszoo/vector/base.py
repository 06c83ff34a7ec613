"""The interface every vector backend shares (a Gymnasium 1.x ``VectorEnv`` over agents):
one lifecycle, a state machine, over a transport.

Rows are env-major, agent-minor: row ``r`` is agent ``r % n`` of env ``r // n`` (``n``
agents per env), as SuperSuit's ``pettingzoo_env_to_vec_env_v1`` lays them out. See
``docs/vector.md`` for the semantics (seeding, autoreset, dead agents, faults, Ctrl-C).

Three pieces:

* :class:`State` and :data:`NEXT`: where a vector env is and where it may go from there.
  :class:`DeszooVecEnv` changes state only through ``_to``, which checks the table, and
  checks what a call may do in each state in one place (``_enter``).
* :class:`Transport`: how a backend reaches its workers, and all it implements: ``start``
  a worker, ``post`` a command to some workers, ``poll`` for their replies until a deadline,
  ``stop`` a worker, ``close``; optionally a fused sync ``step`` (the ``shm`` fast path).
  Each worker hosts an :class:`~deszoo.vector._host.EnvGroup` of consecutive envs and writes
  its results into :class:`~deszoo.vector._host.Buffers` (shared memory for ``shm``; copied
  there from the replies for ``ray`` and ``supersuit``).
* :data:`FAULT_POINTS`: the places a fault may strike in a call. The lifecycle and the
  transports call ``fault_hook(point)`` there when one is set (tests inject Ctrl-C that way).

A backend is a subclass of :class:`DeszooVecEnv` that declares its options
(:mod:`deszoo.vector.options`) and builds its transport.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import operator
import os
import signal
import threading
import time
from _signal import getsignal as _get_handler
from _signal import raise_signal as _raise_signal
from _signal import signal as _set_handler
from _thread import get_ident as _get_ident
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from deszoo import errors as _errors
from deszoo.core.config import check_seed, is_int
from deszoo.core.groups import AgentRows
from deszoo.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    ConfigError,
    InvalidActionError,
    NoAsyncCallError,
    ResetNeededError,
    SubEnvError,
    VectorEnvError,
    WorkerDiedError,
    WorkerTimeoutError,
)
from deszoo.vector._host import Buffers, Call, EnvFailure, Layout, restart_seed
from deszoo.vector.options import Option, option

__all__ = [
    "COMMON_OPTIONS",
    "FAULT_POINTS",
    "NEXT",
    "DeszooVecEnv",
    "Reply",
    "State",
    "Transport",
    "VecSpec",
    "Worker",
    "post_guarded",
    "sigint_deferred",
    "step_seconds",
    "usable_cores",
]

log = logging.getLogger("deszoo.vector")

# A replacement worker that fails to boot this many times in a row ends the run.
BOOT_ATTEMPTS = 3
# Longest a wait for replies runs with Ctrl-C held off (a pending one is raised after it).
POLL_SLICE = 0.05
_SIGINT = int(signal.SIGINT)
_SIG_IGN = int(signal.SIG_IGN)
_MAIN_THREAD = threading.main_thread().ident
# Ctrl-C held off: [held, a Ctrl-C came meanwhile] (see sigint_deferred).
_held = [False, False]
# Errors of call/get_attr/set_attr re-raised in the parent as their own type.
_CALL_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (AttributeError, TypeError, ValueError, KeyError, IndexError, NotImplementedError)
}
_CALL_ERRORS.update(
    (name, getattr(_errors, name)) for name in _errors.__all__
    if name not in ("SubEnvError",) and issubclass(getattr(_errors, name), ValueError)
)

# Where a fault may strike a call; the lifecycle and the transports call
# ``fault_hook(point)`` at each (tests/chaos_harness.py lands Ctrl-C there).
FAULT_POINTS: dict[str, str] = {
    "before": "a step begins: nothing handed out yet",
    "handout": "the first worker has its command, the others not yet (transport)",
    "wait": "commands handed out, waiting for the replies",
    "polled": "replies read from the transport, not yet taken",
    "taken": "replies taken",
    "handle": "faults seen, not yet repaired",
    "restart": "a replacement worker started, not yet booted",
    "marked": "the rows of restarted envs being marked",
    "after": "the results being copied out",
    "settle": "a call finishing what a call cut short left in flight",
}

_AUTORESET = ("NextStep", "SameStep", "Disabled")

# The options every backend takes (each backend declares its own besides).
COMMON_OPTIONS: tuple[Option, ...] = (
    option("batch_size", None, "int", "envs per recv() (async mode) when below num_envs",
           minimum=1, none=True),
    option("timeout", 60.0, "number", "seconds to wait for a worker before it counts as hung",
           positive=True),
    option("on_error", "raise", "choice", "what a repaired fault does: raise it or log it",
           choices=("raise", "restart")),
    Option("autoreset_mode", "NextStep", "one of 'NextStep', 'SameStep', 'Disabled'",
           lambda v: isinstance(v, AutoresetMode) or v in _AUTORESET,
           "Gymnasium's autoreset mode"),
    option("copy", True, "bool", "return copies (True) or views of the batch buffers"),
    option("state", False, "bool", "each env's global state in infos['state'] (per row)"),
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
# Every transition there is. INTERRUPTED goes back to where the cut-short call started,
# once the next call has finished the commands it left in flight.
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


@dataclass
class Worker:
    """The parent's record of one worker: its envs, the command in flight, its handle.

    ``command`` is the command handed out and not yet answered (``"boot"`` while it
    starts; ``None`` when idle); ``handle`` is the transport's (process, actor, ...).
    """

    index: int
    first: int
    count: int
    n_agents: int
    generation: int = 0
    command: str | None = None
    handle: Any = None
    deadline: float = 0.0  # async mode: when the command in flight counts as hung

    @property
    def sims(self) -> range:
        return range(self.first, self.first + self.count)

    @property
    def rows(self) -> slice:
        n = self.n_agents
        return slice(self.first * n, (self.first + self.count) * n)


@dataclass
class Reply:
    """A worker's answer to its command in flight, or what happened to it instead.

    ``kind``: ``"ok"`` (done; env exceptions, if any, in ``failures``), ``"booted"``,
    ``"boot_failed"`` (``detail`` has the error), ``"died"`` or ``"hung"``.
    """

    worker: int
    kind: str
    failures: list[EnvFailure] = field(default_factory=list)
    value: Any = None
    detail: str = ""


class Transport:
    """How a backend reaches its workers: the whole contract between a backend and the
    lifecycle of :class:`DeszooVecEnv`.

    The lifecycle marks nothing itself: ``start`` and ``post`` set ``w.command`` (what the
    worker was handed), ``poll`` reports replies of workers that have a command (the
    lifecycle clears it when it takes the reply). Results go to :attr:`bufs`.

    Attributes:
        bufs: the batch buffers (commands read actions from ``bufs.act``).
        idempotent: ``post`` and ``poll`` may be cut short by Ctrl-C and called again (a
            worker is never handed one command twice, a reply read is read again until it
            is taken); otherwise the lifecycle holds Ctrl-C off around them.
        grace: seconds added to every deadline (a transport whose workers report hung
            ones themselves).
        hook: the vector env's fault hook (see :data:`FAULT_POINTS`), or ``None``.
    """

    bufs: Buffers
    idempotent: bool = False
    grace: float = 0.0
    hook: Callable[[str], None] | None = None

    def start(self, w: Worker, reset_seeds: list | None) -> None:
        """Start worker ``w`` (``w.command = "boot"``); it answers ``"booted"`` or
        ``"boot_failed"`` through :meth:`poll`. ``reset_seeds``: its envs start as needing
        a reset with these seeds (a replacement)."""
        raise NotImplementedError

    def post(self, ws: Sequence[Worker], command: str, payloads: Any) -> None:
        """Hand ``command`` to each worker of ``ws`` (``w.command = command``).

        ``payloads``: one per worker by index (a dict), or one for all. A worker that turns
        out to be gone is reported by the next :meth:`poll`.
        """
        raise NotImplementedError

    def poll(self, deadline: float, want: int) -> list[Reply]:
        """Replies of workers with a command (and their deaths), waiting at most until
        ``deadline`` for ``want`` of them (a hint: returning as soon as there is one is
        fine; past the deadline, the replies there are, without waiting). Results are in
        :attr:`bufs` when a reply is returned."""
        raise NotImplementedError

    def stop(self, w: Worker) -> None:
        """Stop worker ``w`` at once and forget its handle (``w.handle = None``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop every worker (politely, then by force); idempotent."""
        raise NotImplementedError

    def step(self, ws: Sequence[Worker], same_step: bool, deadline: float) -> list[Reply] | None:
        """A sync step of every worker (``ws``): post it and, if the transport can, wait.

        Returns ``None`` when every worker answered ``ok`` with nothing to report (the
        results in :attr:`bufs`, every worker idle), else the replies it has (possibly
        none); the lifecycle collects the rest. This default only posts.
        """
        post_guarded(self, ws, "step", same_step)
        return []

    def describe(self, w: Worker) -> str:
        """A worker in words, for messages."""
        return f"worker {w.index} (envs {w.first}..{w.first + w.count - 1})"

    def pids(self) -> list[int]:
        """Process ids of the live workers, by worker index (empty if in-process)."""
        return []


def step_seconds(infos: dict[str, Any], clock: np.ndarray) -> np.ndarray:
    """Each row's simulated length of the step that returned ``infos`` (``SameStep`` mode),
    given ``clock``, the rows' ``infos["sim_time"]`` before it. A row whose episode ended
    in the step counts up to its end; a restarted sim's clock starts again, so its step has
    no known length (0)."""
    end = np.where(infos["_final_obs"], infos["final_info"]["sim_time"], infos["sim_time"])
    return np.where(infos["restarted"], 0.0, np.maximum(end - clock, 0.0))


def _split(sims: int, workers: int) -> list[tuple[int, int]]:
    """``(first, count)`` per worker: consecutive envs, the first workers one more."""
    counts = [sims // workers + (w < sims % workers) for w in range(workers)]
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
    return list(zip(firsts, counts, strict=True))


def usable_cores() -> int:
    """Cores this process may run on (the default ``num_workers``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def resolve_workers(backend: str, num_sims: int, num_workers: int | None, default: int) -> int:
    """The worker count: ``num_workers`` (checked against the envs) or ``default``, at most
    one per env."""
    if num_workers is None:
        return max(1, min(default, num_sims))
    if num_workers > num_sims:
        raise ConfigError(
            f"make_vec(backend={backend!r}): num_workers={num_workers} is more than "
            f"num_envs={num_sims}: each worker hosts at least one env; lower num_workers (or "
            "leave it out: the usable cores, at most one per env)"
        )
    return num_workers


# Hot-path shortcut: enum members as module constants (reading one through its class
# costs about a microsecond).
_READY = State.READY
_INTERRUPTED = State.INTERRUPTED


def _same(a: np.ndarray) -> np.ndarray:
    return a


class sigint_deferred:
    """``with sigint_deferred():`` holds off Ctrl-C where a batch must not be cut (a
    half-sent batch, a half-stepped in-process batch, a repair); one that comes meanwhile is
    raised as ``KeyboardInterrupt`` when the block ends.

    A Python-level handler that records the signal is installed for the block and the old
    one restored after it: Python runs signal handlers in the main thread whichever thread
    the OS delivered the signal to, so this holds in a process with other threads (numpy's,
    a trainer's), where blocking the signal in the main thread alone does not. Blocks nest
    (the outermost one holds). Outside the main thread it does nothing: Python raises
    ``KeyboardInterrupt`` only in the main thread. A process that ignores SIGINT keeps
    ignoring it. (A class calling ``_signal`` directly, not ``contextlib`` and ``signal``:
    it runs on every in-process step, and their Python wrappers cost frames and time.)
    """

    __slots__ = ("_old",)

    def __enter__(self) -> None:
        self._old = None
        if _get_ident() != _MAIN_THREAD or _held[0]:
            return
        old = _get_handler(_SIGINT)
        if old is None or old == _SIG_IGN:  # not set from Python, or ignored: left alone
            return
        _set_handler(_SIGINT, _record)
        self._old = old
        _held[0] = True

    def __exit__(self, *exc: object) -> None:
        old = self._old
        if old is None:
            return
        _held[0] = False
        _set_handler(_SIGINT, old)
        if _held[1]:
            _held[1] = False
            _raise_signal(_SIGINT)  # now handled by the restored handler


def _record(signum: int, frame: Any) -> None:
    """The handler while Ctrl-C is held off: remember it."""
    _held[1] = True


def sigint_pending() -> bool:
    """Whether a Ctrl-C came while held off and is still to be raised."""
    return _held[1]


def post_guarded(t: Transport, ws: Sequence[Worker], command: str, payloads: Any) -> None:
    """``t.post`` such that a Ctrl-C never leaves a batch half handed out: held off, or,
    for an idempotent transport, the hand-out done again in full before it propagates."""
    if t.idempotent:
        try:
            t.post(ws, command, payloads)
        except BaseException:
            t.post(ws, command, payloads)
            raise
        return
    with sigint_deferred():  # a Ctrl-C now is raised when the block ends
        t.post(ws, command, payloads)


class DeszooVecEnv(VectorEnv):
    """Base class of the backends: the lifecycle, spaces, seeding, checks, faults.

    A backend sets :attr:`backend`, declares :attr:`options` and implements
    :meth:`_transport`; :meth:`build` may pick a subclass or resolve the worker count.

    Attributes:
        num_envs: rows (``num_sims * agents_per_sim``), as Gymnasium counts sub-envs.
        num_sims: simulations (PettingZoo envs) in the batch.
        agents_per_sim: agents of each simulation (``possible_agents``).
        num_workers: workers (processes, actors; 1 for ``roundrobin``).
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
        """``num_workers`` checked against the envs, or the usable cores, at most one per
        env."""
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
        self._act_type = spec.rows.type
        self._discrete = self._act_type is spaces.Discrete
        if self._discrete:
            self.n_actions = int(spec.rows.mask_dim)
        self._noop_mask = spec.rows.noop_mask()
        # Each row's kind (group index), reported in infos["kind"], and env.
        self._kind = np.tile(spec.rows.kind, self.num_sims)
        self._row_sim = np.repeat(np.arange(self.num_sims), self.agents_per_sim)
        mode = AutoresetMode(opts["autoreset_mode"])
        self.autoreset_mode = mode
        self._same_step = mode is AutoresetMode.SAME_STEP
        self._disabled = mode is AutoresetMode.DISABLED
        # PettingZoo's mask convention: observations {"observation", "action_mask"}.
        self._mask_in_obs = spec.mask_in_obs
        self.metadata = {"autoreset_mode": mode, "render_modes": [], "name": spec.name}
        self.on_error = opts["on_error"]
        self.copy = opts["copy"]
        self.timeout = float(opts["timeout"])
        # Starting a worker (a process under spawn, a Ray actor) takes longer than a step.
        self.boot_timeout = max(self.timeout, 30.0)
        self._base_seed = None if seed is None else int(seed)
        self._sim_seeds: list[int | None] = [None] * self.num_sims
        self._restarts = np.zeros(self.num_sims, dtype=np.int64)
        self._reset_once = False
        self._state = State.NEEDS_RESET
        self._resume = State.NEEDS_RESET  # where INTERRUPTED goes back to
        self._hook: Callable[[str], None] | None = None
        self._restarted = np.zeros(self.num_envs, dtype=bool)
        self._any_restarted = False  # hot-path shortcut: whether _restarted has a True
        num_workers = min(int(opts["num_workers"]), self.num_sims)
        self.num_workers = num_workers
        self._workers = [
            Worker(w, first, count, self.agents_per_sim)
            for w, (first, count) in enumerate(_split(self.num_sims, num_workers))
        ]
        self._replies: dict[int, Reply] = {}  # taken, not yet consumed, in the order they came
        # Async mode (EnvPool style): ``recv`` returns the first ``batch_size`` envs.
        sims = self.num_sims
        batch = sims if opts["batch_size"] is None else opts["batch_size"]
        if not batch <= sims:
            raise ConfigError(f"batch_size={batch!r} must be an int in 1..num_envs ({sims})")
        per = sims // num_workers
        if batch != sims and (sims % num_workers or batch % per):
            raise ConfigError(
                f"async mode needs num_envs ({sims}) divisible by num_workers "
                f"({num_workers}) and batch_size ({batch}) a multiple of the envs per "
                f"worker ({per})"
            )
        self.batch_size = int(batch)
        self._async = batch != sims
        self._batch_workers = self.batch_size // per if self._async else num_workers
        self._recv_workers: list[int] = []  # RECEIVED: the workers of the last recv()
        self._recv_rows: np.ndarray | None = None
        self._act_scratch: dict[int, np.ndarray] = {}
        self.transport = self._transport(opts)
        self._bufs = bufs = self.transport.bufs
        self._act = bufs.act
        self._act_u = bufs.act.view(np.uint64) if self._discrete else None
        self._boot()

    def _transport(self, opts: dict[str, Any]) -> Transport:
        """This backend's transport over ``self._workers``."""
        raise NotImplementedError

    # ---- the state machine --------------------------------------------------------------
    @property
    def state(self) -> State:
        """Where this vector env is in its lifecycle."""
        return self._state

    def _to(self, new: State) -> None:
        """Move to state ``new``; every transition goes through here (see :data:`NEXT`)."""
        if new is not self._state and new not in NEXT[self._state]:
            raise RuntimeError(f"deszoo bug: no transition {self._state.name} -> {new.name}")
        self._state = new

    def _enter(self, call: str) -> None:
        """May ``call`` (``"step"``, ``"recv"``, ``"send"``, ``"reset"``, ``"call"``) run
        now? Raises if not; first finishes what a cut-short call left in flight and, before
        a reset or a call, the steps async mode has in flight (their results dropped)."""
        state = self._state
        if state is State.CLOSED:
            raise ClosedEnvironmentError(f"{self.backend} vector env is closed")
        if state is State.FAILED:
            raise VectorEnvError(
                f"{self.backend} vector env failed earlier (a worker could not be restarted); "
                "close() it and build a new one"
            )
        if state is State.INTERRUPTED:
            self._settle()
            state = self._state
        if call in ("reset", "call"):
            if state is State.SENT or state is State.RECEIVED:
                self._drain()
            return
        if state is State.NEEDS_RESET:
            raise ResetNeededError(
                f"{self.backend} vector env: {call}() before reset(); call reset()")
        if call == "step":
            if self._async:
                raise ConfigError(
                    "step() needs sync mode (batch_size == num_envs); in async mode use "
                    "send/recv")
        elif call == "recv":
            if state is State.RECEIVED:
                raise AlreadyPendingCallError(
                    "recv() twice without send(); send actions for the last batch", "recv")
            if state is not State.SENT:
                raise NoAsyncCallError(
                    "recv() without send(); call async_reset() or send() first", "recv")
        elif call == "send" and state is not State.RECEIVED:
            raise NoAsyncCallError("send() without a preceding recv(); call recv() first", "send")

    def _calling(self) -> None:
        """A call hands out commands: until it has taken every reply the state is
        INTERRUPTED, so a call cut short anywhere in between (Ctrl-C) leaves it there and
        the next call finishes the commands in flight. (Set before the hand-out, not when
        the KeyboardInterrupt is caught: a second one could land in the handler.)"""
        self._resume = self._state
        self._to(State.INTERRUPTED)

    def _settle(self) -> None:
        """Finish a call that was cut short: its results dropped, its faults handled."""
        if self._hook is not None:
            self._hook("settle")
        self._finish_in_flight("after an interrupted call")
        self._recv_workers, self._recv_rows = [], None
        self._to(self._resume)

    def _drain(self) -> None:
        """Async mode: wait for the steps in flight and drop them (before a reset or call).
        Their faults are handled (and logged) as usual."""
        self._finish_in_flight("while draining steps in flight")

    def _finish_in_flight(self, why: str) -> None:
        busy = [w for w in self._workers if w.command]
        replies = list(self._collect(busy).values()) if busy else []
        replies += list(self._replies.values())  # taken before, never consumed
        self._replies.clear()
        with sigint_deferred():  # see _report
            errors = self._handle(replies, "step") if replies else []
        for exc in errors:
            log.warning("%s: %s", why, str(exc).splitlines()[0])

    @property
    def fault_hook(self) -> Callable[[str], None] | None:
        """Called with the name of each :data:`FAULT_POINTS` entry a call passes (for fault
        injection in tests); ``None`` (the default) costs nothing."""
        return self._hook

    @fault_hook.setter
    def fault_hook(self, hook: Callable[[str], None] | None) -> None:
        self._hook = hook
        self.transport.hook = hook

    # ---- workers --------------------------------------------------------------------------
    def _boot(self) -> None:
        """Start every worker and wait until each has built its envs."""
        try:
            for w in self._workers:
                self._start(w, None)
            replies = self._collect(self._workers)
            for w in self._workers:
                r = replies[w.index]
                if r.kind != "booted":
                    raise VectorEnvError(
                        f"{self.describe(w)} could not build its envs: "
                        + (r.detail or r.kind)
                    )
        except BaseException:
            self._close_quietly()
            raise

    def _start(self, w: Worker, reset_seeds: list | None) -> None:
        w.generation += 1
        self.transport.start(w, reset_seeds)
        if self._hook is not None:
            self._hook("restart")

    def _deadline(self, ws: Sequence[Worker]) -> float:
        """When workers ``ws``, given their commands now, count as hung."""
        limit = self.timeout
        for w in ws:
            if w.command == "boot":
                limit = self.boot_timeout
                break
        return time.monotonic() + limit + self.transport.grace

    def _exchange(
        self, ws: Sequence[Worker], command: str, payloads: Any = None
    ) -> dict[int, Reply]:
        """Hand ``command`` to workers ``ws`` and wait for their replies."""
        post_guarded(self.transport, ws, command, payloads)
        return self._collect(ws)

    def _collect(self, ws: Sequence[Worker], deadline: float | None = None) -> dict[int, Reply]:
        """One reply from each worker of ``ws`` (``"hung"`` at ``deadline``, by default
        :meth:`_deadline`)."""
        replies = self._replies
        if deadline is None:
            deadline = self._deadline(ws)
        missing = [w.index for w in ws if w.index not in replies]
        while missing:
            self._poll(deadline, len(missing))  # past the deadline: what is there, at once
            missing = [i for i in missing if i not in replies]
            if missing and time.monotonic() >= deadline:
                for i in missing:
                    self._take(Reply(i, "hung"))
                break
        with sigint_deferred():  # every reply handed over, or none
            return {w.index: replies.pop(w.index) for w in ws}

    def _collect_first(self, k: int) -> list[Reply]:
        """The first ``k`` replies among busy workers, in the order they came. Each worker
        counts as hung at its own deadline (from when it got its command), so a hung worker
        is found even while the others keep answering."""
        replies = self._replies
        while True:
            busy = [w for w in self._workers if w.command]
            if busy:
                now = time.monotonic()
                for w in busy:
                    if w.deadline <= now:
                        self._take(Reply(w.index, "hung"))
            if len(replies) >= k or not any(w.command for w in busy):
                break
            self._poll(min(w.deadline for w in busy if w.command), k - len(replies))
        with sigint_deferred():  # all k handed over, or none
            return [replies.pop(i) for i in list(replies)[:k]]

    def _posted(self, ws: Sequence[Worker]) -> None:
        """Async mode: the deadlines of the commands just handed to ``ws``."""
        deadline = self._deadline(ws)
        for w in ws:
            w.deadline = deadline

    def _poll(self, deadline: float, want: int) -> None:
        """Poll the transport and take what it has. A transport whose poll reads replies
        for good gets Ctrl-C held off until they are taken (a KeyboardInterrupt between the
        two lost them), waiting at most ``POLL_SLICE`` so that a Ctrl-C still comes
        through at once."""
        hook, t = self._hook, self.transport
        if hook is not None:
            hook("wait")
        if t.idempotent:
            got = t.poll(deadline, want)
            if hook is not None:
                hook("polled")
            for r in got:
                self._take(r)
        else:
            with sigint_deferred():
                got = t.poll(min(deadline, time.monotonic() + POLL_SLICE), want)
                if hook is not None:
                    hook("polled")
                for r in got:
                    self._take(r)
        if hook is not None:
            hook("taken")

    def _take(self, r: Reply) -> None:
        w = self._workers[r.worker]
        if w.command is None:  # a late answer of a worker already given up on
            return
        w.command = None
        self._replies[r.worker] = r  # in the order they came (dicts keep insertion order)

    def _restart_worker(self, w: Worker, seeds: list, reset_now: bool) -> None:
        """Replace worker ``w`` by a fresh one whose envs start with ``seeds`` (reset at
        once with ``reset_now``). A replacement that fails to boot, or dies or hangs before
        its envs are reset, is replaced in turn, up to ``BOOT_ATTEMPTS`` times."""
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            self.transport.stop(w)
            w.command = None
            self._replies.pop(w.index, None)
            log.warning("restarting %s", self.describe(w))
            self._start(w, seeds)
            r = self._collect([w])[w.index]
            if r.kind == "booted" and reset_now:
                r = self._exchange([w], "reset", (seeds, None))[w.index]
                if r.kind == "ok" and r.failures:
                    self._fail(VectorEnvError(
                        f"{self.describe(w)} was restarted but its envs failed to reset: "
                        + r.failures[0].message
                    ))
            if r.kind in ("booted", "ok"):
                return
            if attempt == BOOT_ATTEMPTS:
                self._fail(VectorEnvError(
                    f"{self.describe(w)} failed to restart {BOOT_ATTEMPTS} times in a row; "
                    f"last: {r.detail or r.kind}; close() the vector env"
                ))

    def _lost(self, w: Worker, r: Reply) -> VectorEnvError:
        """The error of a worker that died or hung (``r``)."""
        if r.kind == "died":
            return WorkerDiedError(f"{self.describe(w)} died{r.detail}")
        return WorkerTimeoutError(
            f"no answer within timeout={self.timeout:g} s from {self.describe(w)}"
        )

    # ---- faults -------------------------------------------------------------------------
    def _handle(self, replies: Sequence[Reply], command: str) -> list[Exception]:
        """Repair what failed in ``replies``; return the errors to report.

        Every fault is handled the same way whatever ``on_error`` says (which only
        decides whether the error is raised or logged): a dead or hung worker is replaced
        and its envs restart; an env that raised (not bad input) is rebuilt in its
        worker. Their rows report a truncation with ``infos["restarted"]``.
        """
        if self._hook is not None:
            self._hook("handle")
        errors: list[Exception] = []
        reset_now = self._same_step or command == "reset"
        for r in sorted(replies, key=lambda r: r.worker):
            w = self._workers[r.worker]
            if r.kind in ("died", "hung"):
                errors.append(self._lost(w, r))
                seeds = [self._next_seed(s) for s in w.sims]
                self._restart_worker(w, seeds, reset_now)
                self._mark_restarted(list(w.sims), reset_now)
                continue
            broken = [f for f in r.failures if not f.intact]
            if broken:
                errors.append(self._sub_env_error(broken))
                seeds = {f.env_index: self._next_seed(f.env_index) for f in broken}
                again = self._exchange([w], "rebuild", (seeds, reset_now))[w.index]
                if again.kind in ("died", "hung"):  # the worker went too: replace it
                    errors.append(self._lost(w, again))
                    every = [seeds[s] if s in seeds else self._next_seed(s) for s in w.sims]
                    self._restart_worker(w, every, reset_now)
                    self._mark_restarted(list(w.sims), reset_now)
                    continue
                if again.kind != "ok" or again.failures:
                    self._fail(VectorEnvError(
                        f"env(s) {sorted(seeds)} could not be rebuilt after a failure: "
                        + (again.failures[0].message if again.failures else again.kind)
                    ))
                self._mark_restarted(sorted(seeds), reset_now)
        return errors

    def _next_seed(self, sim: int) -> int | None:
        """Seed of a rebuilt env's next episode (a new one for each restart)."""
        self._restarts[sim] += 1
        return restart_seed(self._sim_seeds[sim], int(self._restarts[sim]))

    def _report(self, replies: Sequence[Reply], command: str) -> None:
        """Handle faults, then raise (bad input always; faults with ``on_error="raise"``)
        or log them. A raised error carries the call's results in ``.results``."""
        for r in replies:
            if r.kind != "ok" or r.failures:
                break
        else:
            return
        # Ctrl-C waits for the repairs: cut short, the faults not yet reached were lost (an
        # env that raised neither rebuilt nor reported), and a worker being replaced was
        # left for the next call to replace again.
        with sigint_deferred():
            errors = self._handle(replies, command)
        bad_input = [f for r in replies for f in r.failures if f.intact]
        if bad_input:
            raise self._with_results(self._sub_env_error(bad_input), command)
        if not errors:
            return
        if self.on_error == "raise":
            exc = errors[0]
            if len(errors) > 1:
                exc.args = (f"{exc.args[0]} ({len(errors) - 1} more fault(s) in this call)",)
            raise self._with_results(exc, command)
        for exc in errors:
            log.warning("%s; restarted (on_error='restart')", str(exc).splitlines()[0])

    def _with_results(self, exc: Exception, command: str) -> Exception:
        """Attach what the call would have returned (``(obs, infos)`` for a reset)."""
        if command == "step":
            exc.results = self._results(self._bufs)  # type: ignore[attr-defined]
        elif command == "reset":
            obs, _, _, _, infos = self._results(self._bufs)
            exc.results = (obs, infos)  # type: ignore[attr-defined]
        return exc

    def _sub_env_error(self, failures: Sequence[EnvFailure]) -> SubEnvError:
        failures = sorted(failures, key=lambda f: f.env_index)
        first = failures[0]
        more = f" ({len(failures) - 1} more env(s) failed too)" if len(failures) > 1 else ""
        return SubEnvError(
            f"env {first.env_index} raised {first.error_type}: {first.message}{more}\n"
            f"worker traceback:\n{first.traceback}",
            env_index=first.env_index,
            error_type=first.error_type,
            worker_traceback=first.traceback,
        )

    def _fail(self, exc: Exception) -> None:
        self._to(State.FAILED)
        raise exc

    def _close_quietly(self) -> None:
        try:
            if "transport" in self.__dict__:
                self.transport.close()
        finally:
            self.closed = True
            self._to(State.CLOSED)

    def _mark_restarted(self, sims: Sequence[int], reset_now: bool) -> None:
        """Report the episodes of rebuilt envs ``sims`` as truncated.

        ``reset_now`` (same-step mode, resets): the rows already show the new episode;
        else they are dead until the next step starts it.
        """
        if self._hook is not None:
            self._hook("marked")
        bufs, n = self._bufs, self.agents_per_sim
        for s in sims:
            rows = slice(s * n, (s + 1) * n)
            bufs.rew[rows] = 0.0
            bufs.term[rows] = False
            bufs.trunc[rows] = True
            bufs.final_obs[rows] = 0.0
            bufs.final[rows] = self._same_step
            if not reset_now:
                bufs.obs[rows] = 0.0
                bufs.live[rows] = False
                bufs.needs[rows] = False
                bufs.mask[rows] = self._noop_mask
                bufs.invalid[rows] = False
                bufs.invalid_count[rows] = 0
            self._restarted[rows] = True
        self._any_restarted = True

    def _begin_step(self, ws: Sequence[Worker]) -> None:
        """Restart flags last one step: clear those of ``ws``'s rows."""
        for w in ws:
            self._restarted[w.rows] = False
        self._any_restarted = bool(self._restarted.any())

    # ---- the Gymnasium API --------------------------------------------------------------
    def reset(self, *, seed=None, options=None):
        """Reset every env (env ``i`` gets ``seed + i``), or those of
        ``options["reset_mask"]`` (one bool per row, all rows of an env alike)."""
        self._enter("reset")
        which = self._reset_mask(options)
        seeds = self._seeds(seed)
        ws, payloads = [], {}
        for w in self._workers:
            mine = None if which is None else which[w.first : w.first + w.count]
            if mine is not None and not any(mine):
                continue
            ws.append(w)
            payloads[w.index] = (seeds[w.first : w.first + w.count], mine)
        if which is None:
            self._restarted[:] = False
        else:
            self._restarted[np.repeat(which, self.agents_per_sim)] = False
        self._any_restarted = bool(self._restarted.any())
        self._calling()
        replies = self._exchange(ws, "reset", payloads)
        reset_rows = slice(None) if which is None else np.repeat(which, self.agents_per_sim)
        self._bufs.rew[reset_rows] = 0.0
        self._bufs.term[reset_rows] = False
        self._bufs.trunc[reset_rows] = False
        self._bufs.final[:] = False  # a reset reports no episode ends
        self._recv_workers, self._recv_rows = [], None
        self._to(State.READY)
        self._report(list(replies.values()), "reset")
        obs, _, _, _, infos = self._results(self._bufs)
        return obs, infos

    def _reset_mask(self, options: dict | None) -> np.ndarray | None:
        """Per-env booleans from Gymnasium's ``reset_mask`` option (per row), or None."""
        if not options or "reset_mask" not in options:  # read, never pop: callers reuse it
            return None
        mask = options["reset_mask"]
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_:
            raise ConfigError("options['reset_mask'] must be a numpy bool array, one per row")
        if mask.shape != (self.num_envs,):
            raise ConfigError(
                f"options['reset_mask'] has shape {mask.shape}; expected ({self.num_envs},) "
                f"(one per row: {self.num_sims} envs x {self.agents_per_sim} agents)"
            )
        per_env = mask.reshape(self.num_sims, self.agents_per_sim)
        if not (per_env.all(axis=1) | ~per_env.any(axis=1)).all():
            bad = int(np.flatnonzero(per_env.any(axis=1) & ~per_env.all(axis=1))[0])
            raise ConfigError(
                f"options['reset_mask'] selects some rows of env {bad} but not all; an env "
                "resets as a whole (all its agents' rows)"
            )
        if not mask.any():
            raise ConfigError("options['reset_mask'] selects no env")
        if self._state is State.NEEDS_RESET and not mask.all():
            raise ResetNeededError("reset the whole batch once before a partial reset")
        which = per_env[:, 0].copy()
        return None if which.all() else which

    def step(self, actions):
        """Step every env with ``actions`` (shape ``(num_envs,)``, integers)."""
        if self._state is not _READY or self._async:
            self._enter("step")
        hook = self._hook
        if hook is not None:
            hook("before")
        act = self._act
        # Hot-path shortcut for the usual integer array: one copy and the largest action
        # seen unsigned (a negative one wraps to a huge value); argmax is a third of the
        # cost of max on small arrays. _check_actions names the bad row.
        if (self._discrete and type(actions) is np.ndarray and actions.shape == act.shape
                and actions.dtype.kind in "iu"):
            act[...] = actions
            u = self._act_u
            if u[u.argmax()] >= self.n_actions:
                self._check_actions(actions, act)
        else:
            self._check_actions(actions, act)
        if self._disabled:
            self._check_no_pending_reset()
        ws = self._workers
        if self._any_restarted:
            self._begin_step(ws)
        deadline = time.monotonic() + self.timeout + self.transport.grace
        self._resume = _READY  # _calling(), inlined: until every reply is taken
        self._state = _INTERRUPTED
        replies = self.transport.step(ws, self._same_step, deadline)
        if replies is None:
            self._state = _READY
        else:  # not every worker answered "ok" at once
            for r in replies:
                self._take(r)
            got = self._collect(ws, deadline)
            self._state = _READY
            self._report(list(got.values()), "step")
        return self._results(self._bufs)

    def _check_no_pending_reset(self) -> None:
        """Disabled autoreset: an env whose episode ended must be reset before a step."""
        ended = ~self._bufs.live.reshape(self.num_sims, self.agents_per_sim).any(axis=1)
        if ended.any():
            env = int(np.flatnonzero(ended)[0])
            raise ResetNeededError(
                f"env {env} ended its episode and autoreset_mode='Disabled': reset it with "
                "reset(options={'reset_mask': mask}) before the next step"
            )

    # ---- async API (EnvPool style) ----------------------------------------------------
    def async_reset(self, seed: Any = None) -> None:
        """Start a reset of every env; results come from :meth:`recv`, a batch at a time."""
        self._enter("reset")
        seeds = self._seeds(seed)
        self._restarted[:] = False
        self._any_restarted = False
        payloads = {w.index: (seeds[w.first : w.first + w.count], None) for w in self._workers}
        self._recv_workers, self._recv_rows = [], None
        with sigint_deferred():  # in flight and SENT, or neither
            self._to(State.SENT)
            post_guarded(self.transport, self._workers, "reset", payloads)
            self._posted(self._workers)

    def recv(self) -> tuple:
        """The next ``batch_size`` envs to finish: ``(obs, rew, term, trunc, infos)``.

        Rows are those of the ready workers' envs, in the order they finished;
        ``infos["env_id"]`` gives each row's index in the full batch (``0..num_envs-1``).
        """
        self._enter("recv")
        replies = self._collect_first(self._batch_workers)
        if len(replies) < self._batch_workers:
            raise NoAsyncCallError(
                "recv() without send(); call async_reset() or send() first", "recv")
        try:
            ws = [r.worker for r in replies]
            rows = np.concatenate([np.arange(self.num_envs)[self._workers[i].rows] for i in ws])
            self._report(replies, "step")
            out = self._recv_results(rows)
        except Exception as exc:  # a fault raised (on_error="raise"): the batch is given
            self._recv_workers, self._recv_rows = ws, rows
            self._to(State.RECEIVED)
            if hasattr(exc, "results"):
                exc.results = self._recv_results(rows)
            raise
        except BaseException:  # Ctrl-C: the batch (repaired) is the next recv()'s
            with sigint_deferred():
                back = {r.worker: Reply(r.worker, "ok") for r in replies}
                self._replies = {**back, **self._replies}
            raise
        self._recv_workers, self._recv_rows = ws, rows
        self._to(State.RECEIVED)
        return out

    def _recv_results(self, rows: np.ndarray) -> tuple:
        obs, rew, term, trunc, infos = self._results(self._bufs, rows)
        infos["env_id"] = rows.copy()
        return obs, rew, term, trunc, infos

    def send(self, actions: Any, env_id: Any = None) -> None:
        """Actions for the rows of the last :meth:`recv` (``env_id``, if given, must match)."""
        self._enter("send")
        rows = self._recv_rows
        if env_id is not None and not np.array_equal(np.asarray(env_id), rows):
            raise VectorEnvError(
                "send(env_id=...) must give the rows of the last recv(), infos['env_id']"
            )
        scratch = self._act_scratch.get(len(rows))
        if scratch is None:
            scratch = self._act_scratch[len(rows)] = np.zeros(
                (len(rows), *self.layout.act_shape), dtype=self.layout.act_dtype)
        self._check_actions(actions, scratch, rows)
        self._bufs.act[rows] = scratch
        ws = [self._workers[i] for i in self._recv_workers]
        with sigint_deferred():  # in flight and SENT, or neither
            self._begin_step(ws)
            self._recv_workers, self._recv_rows = [], None
            self._to(State.SENT)
            post_guarded(self.transport, ws, "step", self._same_step)
            self._posted(ws)

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
        sims = list(sims)
        if any(not is_int(s) or not 0 <= s < self.num_sims for s in sims):
            raise ConfigError(f"env indices {sims} out of range 0..{self.num_sims - 1}")
        return self._call(Call(kind, name, (), args, kwargs, tuple(values)), sims)

    def _call(self, call: Call, sims: Sequence[int] | None = None) -> list:
        self._enter("call")
        sims = list(range(self.num_sims)) if sims is None else sims
        values = list(call.values)
        plan: dict[int, Call] = {}
        for w in self._workers:
            mine = [j for j, s in enumerate(sims) if s in w.sims]
            if mine:
                plan[w.index] = Call(
                    call.kind, call.name, tuple(sims[j] for j in mine), call.args, call.kwargs,
                    tuple(values[j] for j in mine) if values else (),
                )
        ws = [self._workers[i] for i in plan]
        self._calling()
        replies = self._exchange(ws, "call", plan)
        lost = [r for r in replies.values() if r.kind != "ok"]
        if lost:  # a worker died or hung: it is replaced (or the error raised), then asked again
            try:
                self._report(lost, "call")
            except Exception:
                self._to(self._resume)  # nothing in flight
                raise
            again = self._exchange([self._workers[r.worker] for r in lost], "call", plan)
            if any(r.kind != "ok" for r in again.values()):
                self._fail(VectorEnvError(f"{call.kind}({call.name!r}) failed twice: workers lost"))
            replies.update(again)
        self._to(self._resume)
        failures = [f for r in replies.values() for f in r.failures]
        if failures:  # the caller's mistake (no such attribute, a bad value): its own type
            f = min(failures, key=lambda f: f.env_index)
            cls = _CALL_ERRORS.get(f.error_type)
            if cls is not None:
                raise cls(f"env {f.env_index}: {f.message}")
            raise self._sub_env_error(failures)
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
            self.closed = True
            return
        try:
            self.close_extras(**kwargs)
            self.transport.close()
        finally:
            self.closed = True
            self._to(State.CLOSED)

    def close_extras(self, **kwargs: Any) -> None:
        """Backend-specific cleanup before the workers stop (optional)."""

    def describe(self, w: Worker) -> str:
        """A worker in words, for messages."""
        return self.transport.describe(w)

    def num_events(self) -> np.ndarray:
        """SimPy events processed per env since this vector env was built (int64)."""
        return self._bufs.events.copy()

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers, by worker index (empty for in-process
        backends)."""
        return self.transport.pids()

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.sim_spec.name} x{self.num_sims} "
            f"({self.num_envs} rows), {self._state.value}>"
        )

    # ---- seeding --------------------------------------------------------------------
    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        """Per-env seeds of a ``reset``: env ``i`` gets ``seed + i``."""
        if seed is None and not self._reset_once:
            seed = self._base_seed
        if seed is None:
            seeds: list[int | None] = [None] * self.num_sims
        elif is_int(seed):
            seeds = [int(seed) + i for i in range(self.num_sims)]
        elif isinstance(seed, (list, tuple, np.ndarray)):
            seeds = [None if s is None else s for s in seed]
            if len(seeds) != self.num_sims or not all(s is None or is_int(s) for s in seeds):
                raise ConfigError(
                    f"reset(seed=...) got {len(seeds)} seeds; expected an int or one int (or "
                    f"None) per env ({self.num_sims})"
                )
            seeds = [None if s is None else int(s) for s in seeds]
        else:
            raise ConfigError(f"seed={seed!r} must be an int, a list of ints or None")
        for s in seeds:
            check_seed(s, "reset")
        self._reset_once = True
        # Restarted envs derive their seeds from these; unseeded envs stay unseeded.
        self._sim_seeds = [
            s if s is not None else old for s, old in zip(seeds, self._sim_seeds, strict=True)
        ]
        return seeds

    # ---- checks ---------------------------------------------------------------------
    def _check_actions(self, actions: Any, out: np.ndarray, rows: Any = None) -> None:
        """Validate ``actions`` and write them into ``out``, before any send (``rows``: the
        rows they are for, all by default)."""
        if isinstance(actions, np.ndarray):
            a = actions
        else:
            try:
                a = np.asarray(actions)
            except ValueError as exc:  # ragged nested lists
                raise InvalidActionError(
                    f"actions must be an array of shape {out.shape}: {exc}"
                ) from None
        if a.shape != out.shape:
            raise InvalidActionError(
                f"actions must have shape {out.shape} (one action per row: "
                f"{out.shape[0] // self.agents_per_sim} envs x {self.agents_per_sim} agents), "
                f"got shape {a.shape}"
            )
        if self._act_type is spaces.Box:
            self._check_box_actions(a, out, rows)
            return
        if a.dtype.kind not in "iu":
            raise InvalidActionError(
                f"actions must be an integer array, got dtype {a.dtype}"
                + (f"; valid actions are 0..{self.n_actions - 1}"
                   if self._act_type is spaces.Discrete else "")
            )
        np.copyto(out, a, casting="unsafe")
        if self._act_type is spaces.Discrete:
            # One reduction checks both ends: negatives wrap to huge unsigned values.
            if out.view(np.uint64).max() >= self.n_actions:
                bad = int(np.flatnonzero((a < 0) | (a >= self.n_actions))[0])
                raise InvalidActionError(
                    f"row {bad} (env {bad // self.agents_per_sim}, agent "
                    f"{self.possible_agents[bad % self.agents_per_sim]!r}) got action "
                    f"{a[bad]}; the action space is Discrete({self.n_actions}), valid actions "
                    f"are 0..{self.n_actions - 1}"
                )
            return
        nvec = self.sim_spec.rows.nvec
        bad_rows = np.flatnonzero(((a < 0) | (a >= nvec)).any(axis=1))
        if len(bad_rows):
            bad = int(bad_rows[0])
            raise InvalidActionError(
                f"row {bad} got action {a[bad].tolist()}; the action space is "
                f"MultiDiscrete({nvec.tolist()})"
            )

    def _check_box_actions(self, a: np.ndarray, out: np.ndarray, rows: Any) -> None:
        if a.dtype.kind not in "iuf":
            raise InvalidActionError(f"actions must be a float array, got dtype {a.dtype}")
        r = self.sim_spec.rows
        n = self.agents_per_sim
        idx = np.arange(self.num_envs) if rows is None else np.asarray(rows)
        agent = idx % n
        own = np.arange(r.act_dim)[None, :] < r.act_dims[agent][:, None]  # not padding
        low, high = r.act_low[agent], r.act_high[agent]
        bad = own & ~(np.isfinite(a) & (a >= low) & (a <= high))
        if bad.any():
            row = int(np.flatnonzero(bad.any(axis=1))[0])
            raise InvalidActionError(
                f"row {row} (agent {self.possible_agents[idx[row] % n]!r}) got action "
                f"{a[row].tolist()}, outside its Box [{low[row].tolist()}, "
                f"{high[row].tolist()}] (actions are not clipped; NaN is refused)"
            )
        np.copyto(out, np.where(own, a, 0.0), casting="unsafe")

    # ---- results --------------------------------------------------------------------
    def _results(self, bufs: Buffers, rows: Any = None) -> tuple:
        """``(obs, rew, term, trunc, infos)`` for ``rows`` (all rows when ``None``)."""
        if self._hook is not None:
            self._hook("after")
        take: Callable[[np.ndarray], np.ndarray]
        if rows is None:
            take = np.ndarray.copy if self.copy else _same
            sim_time = bufs.sim_time[self._row_sim]
            restarted = take(self._restarted)
        else:
            take = operator.itemgetter(rows)  # fancy indexing copies anyway
            sim_time = bufs.sim_time[rows // self.agents_per_sim]
            restarted = self._restarted[rows]
        infos = {
            "action_mask": take(bufs.mask),
            "needs_action": take(bufs.needs),
            "live": take(bufs.live),
            "sim_time": sim_time,
            "restarted": restarted,
            "invalid_action": take(bufs.invalid),
            "invalid_count": take(bufs.invalid_count),
            "kind": take(self._kind),
        }
        if self.layout.state_dim:  # every row gets its env's state, as sim_time
            infos["state"] = bufs.state[self._row_sim if rows is None
                                        else rows // self.agents_per_sim]
        obs = take(bufs.obs)
        if self._same_step:
            final_obs = take(bufs.final_obs)
            if self._mask_in_obs:  # an ended episode's agents decide nothing: no-op masks
                noop = np.broadcast_to(self._noop_mask, infos["action_mask"].shape).copy()
                final_obs = {"observation": final_obs, "action_mask": noop}
            final = take(bufs.final)
            infos["final_obs"] = final_obs
            infos["_final_obs"] = final
            # Gymnasium's final_info: what the ended episodes' rows reported last (their
            # clock and invalid-action count; every agent of an ended episode is gone).
            n = self.agents_per_sim
            final_time = (bufs.final_time.repeat(n) if rows is None
                          else bufs.final_time[rows // n])
            infos["final_info"] = {
                "sim_time": final_time,
                "invalid_count": take(bufs.final_count),
                "_sim_time": final,
                "_invalid_count": final,
            }
            if self.layout.state_dim:
                infos["final_info"]["state"] = bufs.final_state[
                    self._row_sim if rows is None else rows // n]
                infos["final_info"]["_state"] = final
            infos["_final_info"] = final
        if self._mask_in_obs:
            obs = {"observation": obs, "action_mask": infos["action_mask"].copy()}
        return obs, take(bufs.rew), take(bufs.term), take(bufs.trunc), infos
