"""The worker pool: workers, the :class:`Transport` that reaches them, their replies and
restarts, below the Gymnasium face (:mod:`deszoo.vector.base`). Ctrl-C and fault points:
``docs/vector.md`` ("Faults", "One lifecycle over a transport")."""

from __future__ import annotations

import enum
import itertools
import logging
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
from typing import Any

import numpy as np

from deszoo.errors import ConfigError, VectorEnvError, WorkerDiedError, WorkerTimeoutError
from deszoo.vector._host import Buffers, Call, EnvFailure, EnvGroup

__all__ = [
    "BOOT_ATTEMPTS",
    "Buffers",
    "EnvGroup",
    "FAULT_POINTS",
    "RestartFailed",
    "Reply",
    "WORKER_NEXT",
    "Transport",
    "Worker",
    "WorkerPool",
    "WorkerState",
    "finish_hand_out",
    "post_guarded",
    "resolve_workers",
    "sigint_deferred",
    "split",
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

# Where a fault may strike a call: ``fault_hook(point)`` is called at each.
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


class sigint_deferred:
    """``with sigint_deferred():`` holds Ctrl-C off; one that comes meanwhile is raised
    when the outermost block ends.

    A recording handler, not a signal mask: Python runs handlers in the main thread
    whichever thread the OS picked, so this holds with other threads running. Does nothing
    outside the main thread or where SIGINT is ignored. Calls ``_signal`` directly: it runs
    on every in-process step, and ``signal``'s Python wrappers cost frames.
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


def post_guarded(t: Transport, ws: Sequence[Worker], command: str, payloads: Any) -> None:
    """``t.post`` that a Ctrl-C never leaves half done: held off, or for an idempotent
    transport done again in full (:func:`finish_hand_out`)."""
    if t.idempotent:
        t.handing = (ws, command, payloads)  # (plain stores: no Ctrl-C lands on them)
        try:
            t.post(ws, command, payloads)
        except BaseException:
            finish_hand_out(t)
            raise
        t.handing = None
        return
    with sigint_deferred():  # a Ctrl-C now is raised when the block ends
        t.post(ws, command, payloads)


def finish_hand_out(t: Transport) -> None:
    """Finish, with Ctrl-C held off (they come in bursts), the hand-out that Ctrl-C cut
    short (``t.handing``); if one lands before, the next call finishes it
    (:meth:`WorkerPool.finish`)."""
    with sigint_deferred():
        handing = t.handing
        if handing is not None:
            t.post(*handing)
            t.handing = None


class WorkerState(enum.Enum):
    """Idle, or the command in flight (``BOOT`` while it starts); values are command
    names."""

    IDLE = "idle"
    BOOT = "boot"
    STEP = "step"
    RESET = "reset"
    CALL = "call"
    REBUILD = "rebuild"


_W = WorkerState
IDLE = _W.IDLE
STEP = _W.STEP  # hot-path shortcut (see base._READY)
# Idle -> a command; a command -> idle when its reply is taken (a hand-out done again
# keeps the state).
WORKER_NEXT: dict[WorkerState, frozenset[WorkerState]] = {
    IDLE: frozenset(set(_W) - {IDLE}),
    **{busy: frozenset({IDLE}) for busy in _W if busy is not IDLE},
}


@dataclass
class Worker:
    """One worker: its envs, :class:`WorkerState` (changed by :meth:`to`) and the
    transport's ``handle``."""

    index: int
    first: int
    count: int
    n_agents: int
    generation: int = 0
    state: WorkerState = IDLE
    handle: Any = None
    deadline: float = 0.0  # when the command in flight counts as hung (WorkerPool.post)

    def to(self, new: WorkerState) -> None:
        """Move to state ``new`` (see :data:`WORKER_NEXT`)."""
        if new is not self.state and new not in WORKER_NEXT[self.state]:
            raise RuntimeError(
                f"deszoo bug: worker {self.index}: no transition {self.state.name} -> {new.name}")
        self.state = new

    @property
    def busy(self) -> bool:
        """Whether it has a command in flight."""
        return self.state is not IDLE

    @property
    def sims(self) -> range:
        return range(self.first, self.first + self.count)

    @property
    def rows(self) -> slice:
        n = self.n_agents
        return slice(self.first * n, (self.first + self.count) * n)


@dataclass
class Reply:
    """A worker's answer: ``kind`` is ``"ok"`` (env exceptions in ``failures``),
    ``"booted"``, ``"boot_failed"`` (error in ``detail``), ``"died"`` or ``"hung"``."""

    worker: int
    kind: str
    failures: list[EnvFailure] = field(default_factory=list)
    value: Any = None
    detail: str = ""


class Transport:
    """How a backend reaches its workers: the contract with :class:`WorkerPool`.

    ``start`` and ``post`` move each worker to its command's state (:meth:`Worker.to`);
    the pool makes it ``IDLE`` when it takes its reply. Results go to :attr:`bufs`.

    Attributes:
        bufs: the batch buffers (actions in ``bufs.act``).
        idempotent: ``post`` and ``poll`` may be cut by Ctrl-C and called again;
            otherwise the pool holds Ctrl-C off around them.
        handing: an idempotent transport's hand-out until done in full
            (:func:`finish_hand_out`).
        grace: seconds added to every deadline.
        hook: the fault hook (:data:`FAULT_POINTS`), or ``None``.
    """

    bufs: Buffers
    idempotent: bool = False
    handing: tuple[Sequence[Worker], str, Any] | None = None
    grace: float = 0.0
    hook: Callable[[str], None] | None = None

    def start(self, w: Worker, reset_seeds: list | None) -> None:
        """Start worker ``w`` (state ``BOOT``); it answers ``"booted"`` or
        ``"boot_failed"``. ``reset_seeds``: its envs start needing a reset with these."""
        raise NotImplementedError

    def post(self, ws: Sequence[Worker], command: str, payloads: Any) -> None:
        """Hand ``command`` to each worker of ``ws`` (state ``WorkerState(command)``);
        ``payloads``: a dict by worker index, or one for all. A lost worker is reported by
        :meth:`poll`."""
        raise NotImplementedError

    def poll(self, deadline: float, want: int) -> list[Reply]:
        """Replies (or deaths) of busy workers, waiting at most until ``deadline`` for
        ``want`` of them (a hint). Results are in :attr:`bufs` when a reply is returned."""
        raise NotImplementedError

    def stop(self, w: Worker) -> None:
        """Stop worker ``w`` at once and forget its handle (``w.handle = None``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop every worker (politely, then by force); idempotent."""
        raise NotImplementedError

    def step(self, ws: Sequence[Worker], same_step: bool, deadline: float) -> list[Reply] | None:
        """A sync step of ``ws``: ``None`` when every worker answered ``ok`` with nothing
        to report (all idle again), else the replies it has; the pool collects the rest.
        This default only posts."""
        post_guarded(self, ws, "step", same_step)
        return []

    def describe(self, w: Worker) -> str:
        """A worker in words, for messages."""
        return f"worker {w.index} (envs {w.first}..{w.first + w.count - 1})"

    def pid(self, w: Worker) -> int | None:
        """Process id of worker ``w`` (``None``: not running, or in this process)."""
        return None


def split(sims: int, workers: int) -> list[tuple[int, int]]:
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
    """``num_workers`` checked against the envs, or ``default`` (at most one per env)."""
    if num_workers is None:
        return max(1, min(default, num_sims))
    if num_workers > num_sims:
        raise ConfigError(
            f"make_vec(backend={backend!r}): num_workers={num_workers} is more than "
            f"num_sims={num_sims}: each worker hosts at least one env; lower num_workers (or "
            "leave it out: the usable cores, at most one per env)"
        )
    return num_workers


class RestartFailed(VectorEnvError):
    """A worker could not be replaced (:data:`BOOT_ATTEMPTS` failed boots in a row)."""


class WorkerPool:
    """Workers over a transport: hand out commands, take replies, replace workers.

    Args:
        transport: how the workers are reached (built over ``workers``).
        workers: the workers.
        timeout: seconds a command may take before its worker counts as hung.
        boot_timeout: the same for a start (default ``max(timeout, 30)``).

    Attributes:
        replies: replies taken and not yet handed over, in the order they came.
    """

    def __init__(self, transport: Transport, workers: list[Worker], timeout: float,
                 boot_timeout: float | None = None):
        self.transport = transport
        self.workers = workers
        self.timeout = float(timeout)
        self.boot_timeout = max(self.timeout, 30.0) if boot_timeout is None else boot_timeout
        self.replies: dict[int, Reply] = {}
        self.hook: Callable[[str], None] | None = None

    @property
    def bufs(self) -> Buffers:
        return self.transport.bufs

    def set_hook(self, hook: Callable[[str], None] | None) -> None:
        """Call ``hook(point)`` at each fault point (:data:`FAULT_POINTS`) passed."""
        self.hook = hook
        self.transport.hook = hook

    # ---- starting workers ---------------------------------------------------------------
    def boot(self, ws: Sequence[Worker] | None = None,
             seeds: dict[int, list | None] | None = None) -> dict[int, Reply]:
        """Start workers ``ws`` (default all; ``seeds[i]``: worker ``i``'s reset seeds)
        and wait for each."""
        ws = self.workers if ws is None else ws
        for w in ws:
            self.start(w, None if seeds is None else seeds.get(w.index))
        return self.collect(ws)

    def start(self, w: Worker, reset_seeds: list | None) -> None:
        """Start worker ``w`` afresh (the old one, if any, stopped at once)."""
        if w.handle is not None:
            self.transport.stop(w)
        w.to(IDLE)
        self.replies.pop(w.index, None)
        w.generation += 1
        self.transport.start(w, reset_seeds)
        if self.hook is not None:
            self.hook("restart")

    def restart(self, w: Worker, seeds: list, reset_now: bool,
                setters: Sequence[Call] = ()) -> None:
        """Replace worker ``w``; its envs start with ``seeds`` (reset at once with
        ``reset_now``), once ``setters`` (``set`` calls) gave them their attributes again.
        Tried :data:`BOOT_ATTEMPTS` times, then :class:`RestartFailed`."""
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            log.warning("restarting %s", self.describe(w))
            self.start(w, seeds)
            r = self.collect([w])[w.index]
            for c in setters:
                if r.kind != "booted":
                    break
                got = self.exchange([w], "call", {w.index: c})[w.index]
                if got.kind == "ok" and got.failures:
                    raise RestartFailed(
                        f"{self.describe(w)} was restarted but its envs refused {c.name!r} "
                        "again: " + got.failures[0].message
                    )
                if got.kind != "ok":
                    r = got
            if r.kind == "booted" and reset_now:
                r = self.exchange([w], "reset", (seeds, None))[w.index]
                if r.kind == "ok" and r.failures:
                    raise RestartFailed(
                        f"{self.describe(w)} was restarted but its envs failed to reset: "
                        + r.failures[0].message
                    )
            if r.kind in ("booted", "ok"):
                return
            if attempt == BOOT_ATTEMPTS:
                raise RestartFailed(
                    f"{self.describe(w)} failed to restart {BOOT_ATTEMPTS} times in a row; "
                    f"last: {r.detail or r.kind}; close() the vector env"
                )

    # ---- commands and replies -------------------------------------------------------------
    def deadline(self, ws: Sequence[Worker]) -> float:
        """When workers ``ws``, given their commands now, count as hung."""
        limit = self.timeout
        for w in ws:
            if w.state is _W.BOOT:
                limit = self.boot_timeout
                break
        return time.monotonic() + limit + self.transport.grace

    def post(self, ws: Sequence[Worker], command: str, payloads: Any = None) -> None:
        """Hand ``command`` to ``ws``; their deadlines run from now."""
        post_guarded(self.transport, ws, command, payloads)
        deadline = self.deadline(ws)
        for w in ws:
            w.deadline = deadline

    def exchange(self, ws: Sequence[Worker], command: str,
                 payloads: Any = None) -> dict[int, Reply]:
        """Hand ``command`` to ``ws`` and wait for their replies."""
        post_guarded(self.transport, ws, command, payloads)
        return self.collect(ws)

    def step(self, same_step: bool) -> dict[int, Reply] | None:
        """A sync step of every worker: ``None`` when all answered ``ok`` with nothing to
        report, else every reply."""
        deadline = time.monotonic() + self.timeout + self.transport.grace
        got = self.transport.step(self.workers, same_step, deadline)
        return None if got is None else self.step_replies(got, deadline)

    def step_replies(self, got: list[Reply], deadline: float, keep: bool = False,
                     ws: Sequence[Worker] | None = None) -> dict[int, Reply]:
        """Every reply of a sync step of ``ws`` (default all) that was not all ``ok``
        (``got``: the transport's replies so far); ``keep``: see :meth:`collect`."""
        for r in got:
            self.take(r)
        return self.collect(self.workers if ws is None else ws, deadline, keep)

    def collect(self, ws: Sequence[Worker], deadline: float | None = None,
                keep: bool = False) -> dict[int, Reply]:
        """One reply from each worker of ``ws`` (``"hung"`` at ``deadline``). ``keep``:
        they also stay taken until :meth:`forget`, so a caller cut short loses none."""
        replies = self.replies
        if deadline is None:
            deadline = self.deadline(ws)
        missing = [w.index for w in ws if w.index not in replies]
        while missing:
            self.poll(deadline, len(missing))  # past the deadline: what is there, at once
            missing = [i for i in missing if i not in replies]
            if missing and time.monotonic() >= deadline:
                for i in missing:
                    self.take(Reply(i, "hung"))
                break
        if keep:
            return {w.index: replies[w.index] for w in ws}
        with sigint_deferred():  # every reply handed over, or none
            return {w.index: replies.pop(w.index) for w in ws}

    def forget(self, replies: Sequence[Reply | int]) -> None:
        """Drop kept replies (given as replies or worker indices): they are handled."""
        for r in replies:
            self.replies.pop(r if isinstance(r, int) else r.worker, None)

    def collect_first(self, k: int) -> list[Reply]:
        """The first ``k`` replies of busy workers, in the order they came (fewer if fewer
        are busy); each worker hangs at its own deadline. They stay taken until
        :meth:`forget`: a caller cut short loses none, the next call returns them again."""
        replies = self.replies
        while True:
            busy = self.busy()
            if busy:
                now = time.monotonic()
                for w in busy:
                    if w.deadline <= now:
                        self.take(Reply(w.index, "hung"))
            busy = [w for w in busy if w.state is not IDLE]
            if len(replies) >= k or not busy:
                break
            self.poll(min(w.deadline for w in busy), k - len(replies))
        return [replies[i] for i in itertools.islice(replies, k)]

    def give_back(self, replies: Sequence[Reply]) -> None:
        """Put ``replies`` first among those taken, replacing their workers' ones."""
        front = {r.worker: r for r in replies}
        with sigint_deferred():
            self.replies = {**front, **{i: r for i, r in self.replies.items() if i not in front}}

    def finish(self) -> list[Reply]:
        """Every reply still due (in flight, waited for, or taken and kept), kept until
        :meth:`forget`; a hand-out cut short is finished first."""
        if self.transport.handing is not None:
            finish_hand_out(self.transport)
        busy = self.busy()
        if busy:
            self.collect(busy, keep=True)
        return list(self.replies.values())

    def plan_call(self, call: Call, sims: Sequence[int]) -> dict[int, Call]:
        """``call`` for the envs ``sims``, split into one per worker that hosts some."""
        values = list(call.values)
        plan: dict[int, Call] = {}
        for w in self.workers:
            mine = [j for j, s in enumerate(sims) if s in w.sims]
            if mine:
                plan[w.index] = Call(
                    call.kind, call.name, tuple(sims[j] for j in mine), call.args, call.kwargs,
                    tuple(values[j] for j in mine) if values else (),
                )
        return plan

    def busy(self) -> list[Worker]:
        """Workers with a command in flight."""
        return [w for w in self.workers if w.state is not IDLE]

    def poll(self, deadline: float, want: int) -> None:
        """Poll the transport and take what it has; a non-idempotent one with Ctrl-C held
        off (at most ``POLL_SLICE``) until its replies are taken."""
        hook, t = self.hook, self.transport
        if hook is not None:
            hook("wait")
        if t.idempotent:
            got = t.poll(deadline, want)
            if hook is not None:
                hook("polled")
            for r in got:
                self.take(r)
        else:
            with sigint_deferred():
                got = t.poll(min(deadline, time.monotonic() + POLL_SLICE), want)
                if hook is not None:
                    hook("polled")
                for r in got:
                    self.take(r)
        if hook is not None:
            hook("taken")

    def take(self, r: Reply) -> None:
        """Take reply ``r``: its worker is idle again."""
        w = self.workers[r.worker]
        if w.state is IDLE:  # a late answer of a worker already given up on
            return
        w.to(IDLE)
        self.replies[r.worker] = r  # in the order they came (dicts keep insertion order)

    # ---- words and ends -----------------------------------------------------------------
    def lost(self, w: Worker, r: Reply) -> VectorEnvError:
        """The error of a worker that died or hung (``r``)."""
        if r.kind == "died":
            return WorkerDiedError(f"{self.describe(w)} died{r.detail}")
        return WorkerTimeoutError(
            f"no answer within timeout={self.timeout:g} s from {self.describe(w)}"
        )

    def describe(self, w: Worker) -> str:
        """A worker in words, for messages."""
        return self.transport.describe(w)

    def pids(self) -> list[int]:
        """Process ids of the live workers, by worker index (empty if in-process)."""
        return [p for p in map(self.transport.pid, self.workers) if p is not None]

    def close(self) -> None:
        """Stop every worker; idempotent."""
        self.transport.close()
