"""The interface every vector backend shares (a Gymnasium 1.x ``VectorEnv`` over agents),
and the one worker lifecycle behind it.

Rows are env-major, agent-minor: row ``r`` is agent ``r % n`` of env ``r // n`` (``n``
agents per env), as SuperSuit's ``pettingzoo_env_to_vec_env_v1`` lays them out. See
``docs/vector.md`` for the semantics (seeding, autoreset, dead agents, faults).

:class:`DeszooVecEnv` owns the lifecycle: the workers (each hosts an
:class:`~deszoo.vector._host.EnvGroup` of consecutive envs), their boot, the commands in
flight, deadlines, faults and restarts, seeding, and the Gymnasium API (sync ``step``,
async ``send``/``recv``, ``reset`` with ``reset_mask``, ``call``/``get_attr``/
``set_attr``). A backend is a transport with five methods: :meth:`_launch` a worker,
:meth:`_post` a command to it, :meth:`_poll` for replies until a deadline, :meth:`_kill`
a worker and :meth:`_shutdown` them all. Results travel in :class:`Buffers`: shared
memory (``shm``) or copied there from the replies (``ray``, ``supersuit``).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import operator
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from deszoo import errors as _errors
from deszoo.core.config import check_seed, is_int
from deszoo.core.groups import AgentRows
from deszoo.errors import (
    ConfigError,
    InvalidActionError,
    ResetNeededError,
    SubEnvError,
    VectorEnvError,
    WorkerDiedError,
    WorkerTimeoutError,
)
from deszoo.vector._host import Buffers, Call, EnvFailure, Layout, restart_seed

__all__ = ["VecSpec", "DeszooVecEnv", "State", "Worker", "Reply", "step_seconds"]

log = logging.getLogger("deszoo.vector")

# A replacement worker that fails to boot this many times in a row ends the run.
BOOT_ATTEMPTS = 3
# Longest a wait for replies runs with Ctrl-C held off (a pending one is raised after it).
POLL_SLICE = 0.05
_SIGINT = {signal.SIGINT}
# Errors of call/get_attr/set_attr re-raised in the parent as their own type.
_CALL_ERRORS: dict[str, type[Exception]] = {
    cls.__name__: cls
    for cls in (AttributeError, TypeError, ValueError, KeyError, IndexError, NotImplementedError)
}
_CALL_ERRORS.update(
    (name, getattr(_errors, name)) for name in _errors.__all__
    if name not in ("SubEnvError",) and issubclass(getattr(_errors, name), ValueError)
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
                      r.act_dtype.name)


class State(enum.Enum):
    """Where a vector env is: waiting for ``reset``, ready to step, failed or closed."""

    NEEDS_RESET = "needs reset"
    READY = "ready"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass
class Worker:
    """The parent's record of one worker: its envs, the command in flight, its handle."""

    index: int
    first: int
    count: int
    n_agents: int
    generation: int = 0
    busy: str | None = None  # the command in flight
    handle: Any = None  # the transport's (process, pipes, actor, ...)

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


# Hot-path shortcut: enum members as module constants (reading one through its class
# costs about a microsecond).
_READY = State.READY
_DISABLED = AutoresetMode.DISABLED


def _same(a: np.ndarray) -> np.ndarray:
    return a


@contextlib.contextmanager
def sigint_deferred() -> Iterator[None]:
    """Hold off Ctrl-C while commands are handed out (a half-sent batch is unrecoverable).

    Costs two system calls; the ``shm`` step path has its own idempotent hand-out instead.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class DeszooVecEnv(VectorEnv):
    """Base class of the backends: the lifecycle, spaces, seeding, checks, faults.

    Attributes:
        num_envs: rows (``num_sims * agents_per_sim``), as Gymnasium counts sub-envs.
        num_sims: simulations (PettingZoo envs) in the batch.
        agents_per_sim: agents of each simulation (``possible_agents``).
        num_workers: workers (processes, actors; 1 for ``roundrobin``).
        backend: backend name (``"roundrobin"``, ``"supersuit"``, ``"shm"``, ...).
    """

    backend: str = "base"
    _bufs: Buffers  # every backend keeps its batch results here

    def __init__(
        self,
        spec: VecSpec,
        seed: int | None = 0,
        num_workers: int = 1,
        batch_size: int | None = None,
        timeout: float = 60.0,
        on_error: str = "raise",
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        copy: bool = True,
    ):
        if on_error not in ("raise", "restart"):
            raise ConfigError(f"on_error={on_error!r}; valid: 'raise' or 'restart'")
        try:
            mode = AutoresetMode(autoreset_mode)
        except ValueError:
            raise ConfigError(
                f"autoreset_mode={autoreset_mode!r}; valid: 'NextStep', 'SameStep', "
                "'Disabled'"
            ) from None
        if not (isinstance(timeout, (int, float)) and 0 < timeout < float("inf")):
            raise ConfigError(f"timeout={timeout!r} must be a positive number of seconds")
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
        if self._act_type is spaces.Discrete:
            self.n_actions = int(spec.rows.mask_dim)
        self._noop_mask = spec.rows.noop_mask()
        # Each row's kind (group index), reported in infos["kind"], and env.
        self._kind = np.tile(spec.rows.kind, self.num_sims)
        self._row_sim = np.repeat(np.arange(self.num_sims), self.agents_per_sim)
        self.autoreset_mode = mode
        self._same_step = mode is AutoresetMode.SAME_STEP
        # PettingZoo's mask convention: observations {"observation", "action_mask"}.
        self._mask_in_obs = spec.mask_in_obs
        self.metadata = {"autoreset_mode": mode, "render_modes": [], "name": spec.name}
        self.on_error = on_error
        self.copy = copy
        self.timeout = float(timeout)
        # Starting a worker (a process under spawn, a Ray actor) takes longer than a step.
        self.boot_timeout = max(self.timeout, 30.0)
        self._base_seed = None if seed is None else int(seed)
        self._sim_seeds: list[int | None] = [None] * self.num_sims
        self._restarts = np.zeros(self.num_sims, dtype=np.int64)
        self._reset_once = False
        self._state = State.NEEDS_RESET
        self._restarted = np.zeros(self.num_envs, dtype=bool)
        self._any_restarted = False
        # Workers and what they are doing.
        num_workers = min(int(num_workers), self.num_sims)
        self.num_workers = num_workers
        self._workers = [
            Worker(w, first, count, self.agents_per_sim)
            for w, (first, count) in enumerate(_split(self.num_sims, num_workers))
        ]
        self._ready: dict[int, Reply] = {}  # replies not yet consumed, in the order they came
        self._interrupted = False  # a call was cut short while workers were busy
        # Async mode (EnvPool style): ``recv`` returns the first ``batch_size`` envs.
        sims = self.num_sims
        batch = sims if batch_size is None else batch_size
        if not is_int(batch) or not 0 < batch <= sims:
            raise ConfigError(f"batch_size={batch_size!r} must be an int in 1..num_envs ({sims})")
        per = sims // num_workers
        if batch != sims and (sims % num_workers or batch % per):
            raise ConfigError(
                f"async mode needs num_envs ({sims}) divisible by num_workers "
                f"({num_workers}) and batch_size ({batch}) a multiple of the envs per "
                f"worker ({per})"
            )
        self.batch_size = int(batch)
        self._batch_workers = self.batch_size // per if batch != sims else num_workers
        self._last: list[int] | None = None
        self._last_rows: np.ndarray | None = None
        self._act_scratch: dict[int, np.ndarray] = {}
        self._unsigned: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # action buffers as uint64

    # ---- transport (backends implement these) -----------------------------------------
    def _launch(self, w: Worker, reset_seeds: list | None) -> None:
        """Start worker ``w`` (it answers ``"booted"`` through :meth:`_poll`)."""
        raise NotImplementedError

    def _post(self, w: Worker, command: str, payload: Any) -> None:
        """Hand ``command`` to worker ``w``; actions are in ``self._bufs.act[w.rows]``."""
        raise NotImplementedError

    def _poll(self, deadline: float, want: int = 1) -> list[Reply]:
        """Replies of busy workers (and deaths), waiting at most until ``deadline`` for
        ``want`` of them (a hint; returning fewer, as soon as there are any, is fine)."""
        raise NotImplementedError

    def _kill(self, w: Worker) -> None:
        """Stop worker ``w`` at once and forget its handle."""
        raise NotImplementedError

    def _shutdown(self) -> None:
        """Stop every worker (politely, then by force); idempotent."""
        raise NotImplementedError

    def describe(self, w: Worker) -> str:
        """A worker in words, for messages."""
        return f"worker {w.index} (envs {w.first}..{w.first + w.count - 1})"

    # ---- lifecycle ----------------------------------------------------------------------
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
        w.busy = "boot"
        self._launch(w, reset_seeds)

    def _post_all(self, ws: Sequence[Worker], command: str, payloads: Any = None) -> None:
        """Hand ``command`` to every worker of ``ws`` (``payloads``: one per worker, by
        index, or one for all). Ctrl-C waits until all have it."""
        per = isinstance(payloads, dict)
        try:
            with sigint_deferred():  # a Ctrl-C now is raised when the block ends
                for w in ws:
                    w.busy = command
                    self._post(w, command, payloads[w.index] if per else payloads)
        except BaseException:
            self._interrupted = True  # the next call collects these workers' answers
            raise

    def _deadline(self, ws: Sequence[Worker]) -> float:
        """When workers ``ws``, given their commands now, count as hung."""
        for w in ws:
            if w.busy == "boot":
                return time.monotonic() + self.boot_timeout
        return time.monotonic() + self.timeout

    def _collect(self, ws: Sequence[Worker], deadline: float | None = None) -> dict[int, Reply]:
        """Wait for one reply from each worker of ``ws`` (``"hung"`` at ``deadline``,
        by default :meth:`_deadline`)."""
        ready = self._ready
        if deadline is None:
            deadline = self._deadline(ws)
        try:
            missing = [w.index for w in ws if w.index not in ready]
            while missing:
                if time.monotonic() >= deadline:
                    for i in missing:
                        self._take(Reply(i, "hung"))
                    break
                self._poll_take(deadline, len(missing))
                missing = [i for i in missing if i not in ready]
        except BaseException:
            self._interrupted = True
            raise
        return {w.index: ready.pop(w.index) for w in ws}

    def _collect_first(self, k: int) -> list[Reply]:
        """The first ``k`` replies among busy workers, in the order they came."""
        deadline = self._deadline([w for w in self._workers if w.busy])
        try:
            while len(self._ready) < k:
                busy = [w.index for w in self._workers if w.busy and w.index not in self._ready]
                if not busy:
                    break
                if time.monotonic() >= deadline:
                    for i in busy:
                        self._take(Reply(i, "hung"))
                    break
                self._poll_take(deadline, k - len(self._ready))
        except BaseException:
            self._interrupted = True
            raise
        return [self._ready.pop(i) for i in list(self._ready)[:k]]

    def _poll_take(self, deadline: float, want: int) -> None:
        """Poll for replies and take them with Ctrl-C held off: a KeyboardInterrupt between
        a transport reading replies and their being taken lost them (the next call waited
        for those workers until the timeout, then replaced them; their env failures were
        dropped). Waits at most ``POLL_SLICE`` so a Ctrl-C still comes through at once."""
        # sigint_deferred() inlined: this runs on every step.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGINT)
        try:
            for r in self._poll(min(deadline, time.monotonic() + POLL_SLICE), want):
                self._take(r)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _take(self, r: Reply) -> None:
        w = self._workers[r.worker]
        if w.busy is None:  # a late answer of a worker already given up on
            return
        w.busy = None
        self._ready[r.worker] = r  # in the order they came (dicts keep insertion order)

    def _exchange(
        self, ws: Sequence[Worker], command: str, payloads: Any = None
    ) -> dict[int, Reply]:
        self._post_all(ws, command, payloads)
        try:
            return self._collect(ws)
        except BaseException:  # also a Ctrl-C before _collect's own guard: the workers are busy
            self._interrupted = True
            raise

    def _settle(self) -> None:
        """Finish a call that was cut short (Ctrl-C while waiting): its results are
        dropped, its faults handled as usual."""
        if not self._interrupted:
            return
        busy = [w for w in self._workers if w.busy]
        replies = self._collect(busy)
        self._interrupted = False  # only now: a Ctrl-C before this leaves it to the next call
        stale = list(self._ready.values())  # answered before the cut, never consumed
        self._ready.clear()
        self._last = self._last_rows = None
        with sigint_deferred():  # see _report
            errors = self._handle(list(replies.values()) + stale, "step")
        for exc in errors:
            log.warning("after an interrupted call: %s", exc)

    def _restart_worker(self, w: Worker, seeds: list, reset_now: bool) -> None:
        """Replace worker ``w`` by a fresh one whose envs start with ``seeds`` (reset at
        once with ``reset_now``). A replacement that fails to boot, or dies or hangs before
        its envs are reset, is replaced in turn, up to ``BOOT_ATTEMPTS`` times."""
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            self._kill(w)
            w.busy = None
            self._ready.pop(w.index, None)
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

    def _handle(self, replies: Sequence[Reply], command: str) -> list[Exception]:
        """Repair what failed in ``replies``; return the errors to report.

        Every fault is handled the same way whatever ``on_error`` says (which only
        decides whether the error is raised or logged): a dead or hung worker is replaced
        and its envs restart; an env that raised (not bad input) is rebuilt in its
        worker. Their rows report a truncation with ``infos["restarted"]``.
        """
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
        or log them. A raised error carries the step's results in ``.results``."""
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
        self._state = State.FAILED
        raise exc

    def _close_quietly(self) -> None:
        try:
            self._shutdown()
        finally:
            self.closed = True
            self._state = State.CLOSED

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
    def _check_state(self, stepping: bool = True) -> None:
        state = self._state
        if state is State.READY or (state is State.NEEDS_RESET and not stepping):
            return
        if state is State.CLOSED:
            raise VectorEnvError(f"{self.backend} vector env is closed")
        if state is State.FAILED:
            raise VectorEnvError(
                f"{self.backend} vector env failed earlier (a worker could not be restarted); "
                "close() it and build a new one"
            )
        raise ResetNeededError(f"{self.backend} vector env: step() before reset(); call reset()")

    def _check_actions(self, actions: Any, out: np.ndarray, rows: Any = None) -> None:
        """Validate ``actions`` and write them into ``out``, before any send (``rows``: the
        rows they are for, all by default)."""
        if (self._act_type is spaces.Discrete and type(actions) is np.ndarray
                and actions.shape == out.shape and actions.dtype.kind in "iu"):
            # Hot-path shortcut for the usual integer array: one copy and the largest
            # action seen unsigned (a negative one wraps to a huge value); argmax is a
            # third of the cost of max on small arrays. The checks below name the row.
            out[...] = actions
            pair = self._unsigned.get(id(out))
            if pair is None or pair[0] is not out:
                pair = self._unsigned[id(out)] = (out, out.view(np.uint64))
            u = pair[1]
            if u[u.argmax()] < self.n_actions:
                return
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
            infos["_final_info"] = final
        if self._mask_in_obs:
            obs = {"observation": obs, "action_mask": infos["action_mask"].copy()}
        return obs, take(bufs.rew), take(bufs.term), take(bufs.trunc), infos

    def _mark_restarted(self, sims: Sequence[int], reset_now: bool) -> None:
        """Report the episodes of rebuilt envs ``sims`` as truncated.

        ``reset_now`` (same-step mode, resets): the rows already show the new episode;
        else they are dead until the next step starts it.
        """
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
        if self._any_restarted:  # restart flags last one step
            for w in ws:
                self._restarted[w.rows] = False
            self._any_restarted = bool(self._restarted.any())

    def num_events(self) -> np.ndarray:
        """SimPy events processed per env since this vector env was built (int64)."""
        return self._bufs.events.copy()

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers (empty for in-process backends)."""
        return []

    # ---- Gymnasium API --------------------------------------------------------------
    def reset(self, *, seed=None, options=None):
        """Reset every env (env ``i`` gets ``seed + i``), or those of
        ``options["reset_mask"]`` (one bool per row, all rows of an env alike)."""
        self._check_state(stepping=False)
        self._settle()
        which = self._reset_mask(options)
        self._drain()
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
            self._any_restarted = False
        else:
            self._restarted[np.repeat(which, self.agents_per_sim)] = False
        replies = self._exchange(ws, "reset", payloads)
        reset_rows = slice(None) if which is None else np.repeat(which, self.agents_per_sim)
        self._bufs.rew[reset_rows] = 0.0
        self._bufs.term[reset_rows] = False
        self._bufs.trunc[reset_rows] = False
        self._bufs.final[:] = False  # a reset reports no episode ends
        self._last = self._last_rows = None
        self._state = State.READY
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
        if self._state is not State.READY and not mask.all():
            raise ResetNeededError("reset the whole batch once before a partial reset")
        which = per_env[:, 0].copy()
        return None if which.all() else which

    def step(self, actions):
        """Step every env with ``actions`` (shape ``(num_envs,)``, integers)."""
        if self._state is not _READY:
            self._check_state()
        if self.batch_size != self.num_sims:
            raise ConfigError(
                "step() needs sync mode (batch_size == num_envs); in async mode use send/recv"
            )
        if self._interrupted:
            self._settle()
        self._check_actions(actions, self._bufs.act)
        if self.autoreset_mode is _DISABLED and self._state is _READY:
            self._check_no_pending_reset()
        if self._any_restarted:
            self._begin_step(self._workers)
        replies = self._exchange(self._workers, "step", self._same_step)
        self._report(list(replies.values()), "step")
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
        self._check_state(stepping=False)
        self._settle()
        self._drain()
        seeds = self._seeds(seed)
        self._restarted[:] = False
        self._any_restarted = False
        payloads = {w.index: (seeds[w.first : w.first + w.count], None) for w in self._workers}
        self._post_all(self._workers, "reset", payloads)
        self._last = self._last_rows = None
        self._state = State.READY

    def recv(self) -> tuple:
        """The next ``batch_size`` envs to finish: ``(obs, rew, term, trunc, infos)``.

        Rows are those of the ready workers' envs, in the order they finished;
        ``infos["env_id"]`` gives each row's index in the full batch (``0..num_envs-1``).
        """
        self._check_state()
        if self._last is not None:
            raise VectorEnvError("recv() twice without send(); send actions for the last batch")
        replies = self._collect_first(self._batch_workers)
        if len(replies) < self._batch_workers:
            raise VectorEnvError("recv() without send(); call async_reset() or send() first")
        ws = [r.worker for r in replies]
        rows = np.concatenate([np.arange(self.num_envs)[self._workers[i].rows] for i in ws])
        self._last, self._last_rows = ws, rows
        try:
            self._report(replies, "step")
        except Exception as exc:
            if hasattr(exc, "results"):
                exc.results = self._recv_results(rows)
            raise
        return self._recv_results(rows)

    def _recv_results(self, rows: np.ndarray) -> tuple:
        obs, rew, term, trunc, infos = self._results(self._bufs, rows)
        infos["env_id"] = rows.copy()
        return obs, rew, term, trunc, infos

    def send(self, actions: Any, env_id: Any = None) -> None:
        """Actions for the rows of the last :meth:`recv` (``env_id``, if given, must match)."""
        self._check_state()
        if self._last is None:
            raise VectorEnvError("send() without a preceding recv(); call recv() first")
        rows = self._last_rows
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
        ws = [self._workers[i] for i in self._last]
        self._last = self._last_rows = None
        self._begin_step(ws)
        self._post_all(ws, "step", self._same_step)

    def _drain(self) -> None:
        """Async mode: wait for the steps in flight and drop them (before a reset or call).
        Their faults are handled (and logged) as usual."""
        busy = [w for w in self._workers if w.busy]
        replies = list(self._collect(busy).values()) if busy else []
        replies += list(self._ready.values())
        self._ready.clear()
        with sigint_deferred():  # see _report
            errors = self._handle(replies, "step") if replies else []
        for exc in errors:
            log.warning("while draining steps in flight: %s", str(exc).splitlines()[0])

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
        if self._state is State.CLOSED or self._state is State.FAILED:
            self._check_state()
        self._settle()
        self._drain()
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
        replies = self._exchange(ws, "call", plan)
        lost = [r for r in replies.values() if r.kind != "ok"]
        if lost:  # a worker died or hung: it is replaced (or the error raised), then asked again
            self._report(lost, "call")
            again = self._exchange([self._workers[r.worker] for r in lost], "call", plan)
            if any(r.kind != "ok" for r in again.values()):
                self._fail(VectorEnvError(f"{call.kind}({call.name!r}) failed twice: workers lost"))
            replies.update(again)
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
        if "_workers" not in self.__dict__:  # __init__ failed early (Gymnasium may still call)
            self.closed = True
            return
        try:
            self.close_extras(**kwargs)
            self._shutdown()
        finally:
            self.closed = True
            self._state = State.CLOSED

    def close_extras(self, **kwargs: Any) -> None:
        """Backend-specific cleanup before the workers stop (optional)."""

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.sim_spec.name} x{self.num_sims} "
            f"({self.num_envs} rows), {self._state.value}>"
        )
