"""``shm``: worker processes hosting several envs each, results in shared memory.

Design (PufferLib and EnvPool style):

* One shared block (``multiprocessing.RawArray``) holds every batch buffer: observations,
  final observations, masks, actions, rewards, terminations, truncations, live and
  needs-action flags, per-env clocks and event counts. Each env's own per-agent arrays are
  views of its rows, so stepping an env writes the batch in place (no copy, no pickle).
* Worker ``w`` hosts envs ``first_w .. first_w + count_w - 1``. One command byte down its
  pipe wakes it for a whole batch step; it answers with one 8-byte message on a results
  pipe that all workers share, so the parent waits with a single ``poll`` (which also
  watches every worker's process sentinel: a killed worker is seen at once).
* Pickles go over a second, per-worker pipe only for rare things: reset seeds and errors.
* Sync mode: ``step`` wakes every worker and waits for all. Async mode (``batch_size`` envs
  fewer than ``num_envs``): ``send`` wakes the workers of the last batch, ``recv`` returns
  the first workers to finish, as EnvPool does.
"""

from __future__ import annotations

import collections
import logging
import os
import select
import signal
import struct
import time
import weakref
from typing import Any

import numpy as np

from deszoo.errors import ConfigError, VectorEnvError, WorkerDiedError, WorkerTimeoutError
from deszoo.vector._host import Buffers, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, State, VecSpec

__all__ = ["ShmVecEnv"]

log = logging.getLogger(__name__)

# Commands (parent -> worker, one byte). Sync steps (upper case) are answered by the last
# worker to finish only; async steps (lower case) and resets by every worker.
STEP, STEP_SAME, ASTEP, ASTEP_SAME, RESET, CLOSE = b"S", b"T", b"s", b"t", b"R", b"C"
SYNC_COMMANDS = {STEP: False, STEP_SAME: True}
ASYNC_COMMANDS = {ASTEP: False, ASTEP_SAME: True}
# Answers (worker -> parent): worker index, status, generation.
MSG = struct.Struct("<HBxI")
BOOTED, DONE, FAILED, ALL_DONE = 0, 1, 2, 3
# Sync-step flags in the control block, one per worker (slot 0 counts workers still busy).
BUSY, FINISHED, FINISHED_FAILED, RESTARTED = 0, 1, 2, 3


def _worker_main(
    index: int,
    generation: int,
    factory: Any,
    memory: Any,
    layout: Layout,
    first: int,
    count: int,
    reset_seeds: list | None,
    cmd: Any,
    results: Any,
    msgs: Any,
    control: Any,
    lock: Any,
    inherited: list,
    spin: float = 0.0,
) -> None:
    """Body of a worker process: build the envs, then serve commands until told to close."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    for conn in inherited:  # under fork: the parent's ends of other pipes (EOF detection)
        conn.close()
    out = results.fileno()

    def answer(status: int) -> None:
        os.write(out, MSG.pack(index, status, generation))

    try:
        bufs = Buffers(layout, memory)
        group = EnvGroup(factory, bufs, first, count, reset_seeds)
    except Exception as exc:
        import traceback

        msgs.send([("build", -1, type(exc).__name__, str(exc), traceback.format_exc())])
        answer(FAILED)
        return
    ctl = np.frombuffer(control, dtype=np.int64)
    answer(BOOTED)
    fd = cmd.fileno()
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    clock = time.perf_counter
    while True:
        if spin:
            # Poll for the next command for a moment before sleeping in read(): a worker
            # that sleeps costs a wake-up (tens of us) on every step of a light scenario.
            end = clock() + spin
            while not poller.poll(0) and clock() < end:
                pass
        try:
            command = os.read(fd, 1)
        except OSError:
            return
        same = SYNC_COMMANDS.get(command)
        if same is not None:
            # Sync step: count down; only the last worker wakes the parent (one wake-up per
            # batch step, whatever the number of workers). Failures wait in ``msgs``.
            failures = group.step(same)
            if failures:
                msgs.send(failures)
            with lock:
                ctl[1 + index] = FINISHED_FAILED if failures else FINISHED
                ctl[0] -= 1
                last = ctl[0] == 0
            if last:
                answer(ALL_DONE)
            continue
        same = ASYNC_COMMANDS.get(command)
        if same is not None:
            failures = group.step(same)
        elif command == RESET:
            failures = group.reset(msgs.recv())
        else:  # CLOSE, or EOF: the parent is gone
            group.close()
            return
        if failures:
            msgs.send(failures)
            answer(FAILED)
        else:
            answer(DONE)


class _Worker:
    """The parent's handle on one worker process."""

    def __init__(self, index: int, first: int, count: int, n: int):
        self.index = index
        self.first = first
        self.count = count
        self.rows = np.arange(first * n, (first + count) * n)
        self.generation = 0
        self.proc: Any = None
        self.cmd: Any = None
        self.msgs: Any = None
        self.cmd_fd = -1
        self.sentinel = -1

    @property
    def sims(self) -> range:
        return range(self.first, self.first + self.count)

    def describe(self) -> str:
        last = self.first + self.count - 1
        return f"worker {self.index} (pid {self.proc.pid}, envs {self.first}..{last})"


def _shutdown(workers: list[_Worker], conns: list, join_timeout: list[float]) -> None:
    """Stop every worker (politely, then by force) and close every pipe. Idempotent.

    ``join_timeout[0]`` is read at call time: it drops to almost nothing after a failure
    (a hung worker is not worth waiting for).
    """
    for w in workers:
        if w.proc is not None and w.proc.is_alive() and w.cmd is not None:
            try:
                os.write(w.cmd_fd, CLOSE)
            except OSError:
                pass
    deadline = time.monotonic() + join_timeout[0]
    for w in workers:
        if w.proc is not None:
            w.proc.join(max(0.0, deadline - time.monotonic()))
    for w in workers:
        if w.proc is not None:
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join(1.0)
            if not w.proc.is_alive():
                w.proc.close()
            w.proc = None
        for conn in (w.cmd, w.msgs):
            if conn is not None:
                conn.close()
        w.cmd = w.msgs = None
    for conn in conns:
        conn.close()
    conns.clear()


class ShmVecEnv(DeszooVecEnv):
    """Shared-memory multiprocess backend; see :func:`deszoo.vector.make_vec`.

    Args:
        spec: what to build.
        seed: seed of the first ``reset()`` (env ``i`` gets ``seed + i``).
        num_workers: worker processes (at most ``num_sims``).
        batch_size: envs per ``recv`` in async mode; ``None`` means all (sync mode).
        timeout: seconds to wait for any worker answer before raising.
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"`` (default: the platform's).
        close_timeout: seconds ``close`` waits for workers to exit before killing them.
        spin_us: microseconds an idle worker polls for the next command before it sleeps;
            ``None``: 300 when every worker can have a core of its own, else 0 (spinning
            workers that share cores slow each other down).
        **options: ``on_error``, ``autoreset_mode``, ``copy`` (see :class:`DeszooVecEnv`).
    """

    backend = "shm"

    def __init__(
        self,
        spec: VecSpec,
        seed: int | None = 0,
        num_workers: int = 1,
        batch_size: int | None = None,
        timeout: float = 60.0,
        start_method: str | None = None,
        close_timeout: float = 5.0,
        spin_us: float | None = None,
        **options: Any,
    ):
        import multiprocessing as mp

        from deszoo.vector import usable_cores

        super().__init__(spec, seed=seed, **options)
        num_workers = max(1, min(int(num_workers), self.num_sims))
        if not timeout > 0:
            raise ConfigError(f"timeout={timeout!r} must be positive (seconds)")
        sims = self.num_sims
        batch = sims if batch_size is None else int(batch_size)
        per = sims // num_workers
        if batch != sims and (sims % num_workers or not 0 < batch < sims or batch % per):
            raise ConfigError(
                f"async mode needs num_envs ({sims}) divisible by num_workers "
                f"({num_workers}) and batch_size ({batch}) a multiple of the envs per "
                f"worker ({per}) below num_envs"
            )
        self.num_workers = num_workers
        if spin_us is None:
            spin_us = 300.0 if num_workers <= usable_cores() else 0.0
        if not spin_us >= 0:
            raise ConfigError(f"spin_us={spin_us!r} must be >= 0 (microseconds)")
        self.spin_us = float(spin_us)
        self.batch_size = batch
        self.timeout = float(timeout)
        self._ctx = mp.get_context(start_method)
        self.start_method = self._ctx.get_start_method()
        self._batch_workers = batch // per if batch != sims else num_workers
        same = self.autoreset_mode.value == "SameStep"
        self._step_cmd = STEP_SAME if same else STEP
        self._astep_cmd = ASTEP_SAME if same else ASTEP
        self._memory = self._ctx.RawArray("B", self.layout.nbytes())
        self._control = self._ctx.RawArray("q", 1 + num_workers)
        self._ctl = np.frombuffer(self._control, dtype=np.int64)
        self._lock = self._ctx.Lock()
        self._sync_step = False  # a sync step is in flight
        self._sync_done = False
        self._bufs = Buffers(self.layout, self._memory)
        self._results_r, self._results_w = self._ctx.Pipe(duplex=False)
        self._results_fd = self._results_r.fileno()
        self._poller = select.poll()
        self._poller.register(self._results_fd, select.POLLIN)
        self._by_sentinel: dict[int, _Worker] = {}
        self._inflight: set[int] = set()
        self._ready: collections.deque[int] = collections.deque()
        self._booted: set[int] = set()
        self._failures: list = []
        self._restart_report: set[int] = set()
        self._last: list[int] | None = None
        self._last_rows: np.ndarray | None = None
        self._act_scratch: dict[int, np.ndarray] = {}
        self._any_restarted = False
        counts = [sims // num_workers + (w < sims % num_workers) for w in range(num_workers)]
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()
        n = self.agents_per_sim
        self._workers = [_Worker(w, firsts[w], counts[w], n) for w in range(num_workers)]
        self._all_workers = list(range(num_workers))
        self._conns = [self._results_r, self._results_w]
        self._close_timeout = [float(close_timeout)]
        self._finalizer = weakref.finalize(
            self, _shutdown, self._workers, self._conns, self._close_timeout
        )
        try:
            for w in self._workers:
                self._start(w, None)
            self._await_boot(self._workers)
        except BaseException:
            self._finalizer()
            self.closed = True
            self._state = State.CLOSED
            raise

    # ---- worker lifecycle -------------------------------------------------------------
    def _start(self, w: _Worker, reset_seeds: list | None) -> None:
        ctx = self._ctx
        w.generation += 1
        cmd_r, cmd_w = ctx.Pipe(duplex=False)
        msgs_parent, msgs_child = ctx.Pipe(duplex=True)
        inherited: list = []
        if self.start_method == "fork":
            inherited = [self._results_r, cmd_w, msgs_parent] + [
                c for o in self._workers if o.proc is not None for c in (o.cmd, o.msgs)
            ]
        proc = ctx.Process(
            target=_worker_main,
            name=f"deszoo-shm-{w.index}",
            args=(
                w.index, w.generation, self.sim_spec.factory, self._memory, self.layout,
                w.first, w.count, reset_seeds, cmd_r, self._results_w, msgs_child,
                self._control, self._lock, inherited, self.spin_us * 1e-6,
            ),
            daemon=True,
        )
        proc.start()
        cmd_r.close()
        msgs_child.close()
        w.proc, w.cmd, w.msgs, w.cmd_fd = proc, cmd_w, msgs_parent, cmd_w.fileno()
        w.sentinel = proc.sentinel
        self._by_sentinel[w.sentinel] = w
        self._poller.register(w.sentinel, select.POLLIN)

    def _stop(self, w: _Worker) -> None:
        """Kill worker ``w`` and forget it (used before a restart)."""
        self._poller.unregister(w.sentinel)
        del self._by_sentinel[w.sentinel]
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(5.0)
        if not w.proc.is_alive():
            w.proc.close()
        w.cmd.close()
        w.msgs.close()
        w.proc = w.cmd = w.msgs = None
        self._booted.discard(w.index)
        self._inflight.discard(w.index)

    def _await_boot(self, workers: list[_Worker]) -> None:
        want = {w.index for w in workers}
        deadline = time.monotonic() + self.timeout
        while not want <= self._booted:
            self._poll(deadline, booting=want - self._booted)
            if self._failures:
                failures, self._failures = self._failures, []
                w, info = failures[0]
                raise VectorEnvError(
                    f"{self._workers[w].describe()} could not build its envs: "
                    f"{info[0][2]}: {info[0][3]}\nworker traceback:\n{info[0][4]}"
                )

    def _restart(self, w: _Worker) -> None:
        """Rebuild worker ``w`` with fresh envs; their episodes report truncated."""
        self._stop(w)
        seeds = [self._restart_seed(s) for s in w.sims]
        log.warning("restarting %s", f"worker {w.index} (envs {w.first}..{w.first + w.count - 1})")
        self._start(w, seeds)
        self._await_boot([w])
        self._mark_restarted(self._bufs, list(w.sims))
        self._any_restarted = True

    # ---- waiting ----------------------------------------------------------------------
    def _poll(self, deadline: float, booting: set[int] = frozenset()) -> None:
        """Wait once for answers or deaths and handle them (may raise or restart)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self._on_timeout(booting)
            return
        events = self._poller.poll(remaining * 1000.0 + 1.0)
        dead = []
        for fd, _ in events:
            if fd == self._results_fd:
                self._read_answers()
            else:
                dead.append(self._by_sentinel[fd])
        for w in dead:
            if w.proc is not None and w.proc.is_alive():
                continue
            code = w.proc.exitcode if w.proc is not None else None
            if self.on_error == "restart" and w.index not in booting:
                was_busy = w.index in self._inflight
                self._restart(w)
                if was_busy:
                    self._finished_for(w.index)
                else:
                    self._restart_report.add(w.index)
                continue
            self._fail(WorkerDiedError(
                f"{w.describe()} died (exit code {code}"
                + (", killed by a signal" if code is not None and code < 0 else "")
                + "); the vector env cannot go on: close() it"
            ))

    def _read_answers(self) -> None:
        data = os.read(self._results_fd, MSG.size * 256)
        for index, status, generation in MSG.iter_unpack(data):
            w = self._workers[index]
            if generation != w.generation:
                continue  # from a worker that was replaced
            if status == BOOTED:
                self._booted.add(index)
                continue
            if status == ALL_DONE:
                self._sync_done = True
                continue
            if status == FAILED:
                info = w.msgs.recv()
                if index not in self._booted:
                    self._failures.append((index, info))
                    self._booted.add(index)
                    continue
                self._inflight.discard(index)
                if self.on_error == "restart":
                    self._restart(w)
                    self._ready.append(index)
                else:
                    self._failures.append((index, info))
                continue
            self._inflight.discard(index)
            self._ready.append(index)

    def _on_timeout(self, booting: set[int]) -> None:
        stuck = sorted(self._inflight | booting)
        names = ", ".join(self._workers[i].describe() for i in stuck)
        if self._sync_step:
            stuck = sorted(set(stuck) & {i for i in stuck if self._ctl[1 + i] == BUSY})
            names = ", ".join(self._workers[i].describe() for i in stuck)
        if self.on_error == "restart" and not booting:
            for i in stuck:
                self._restart(self._workers[i])
                self._finished_for(i)
            return
        self._fail(WorkerTimeoutError(
            f"no answer within timeout={self.timeout:g} s from {names}; "
            "the vector env cannot go on: close() it"
        ))

    def _finished_for(self, i: int) -> None:
        """Count worker ``i`` (just rebuilt) as done with the step in flight."""
        if not self._sync_step:
            self._inflight.discard(i)
            self._ready.append(i)
            return
        with self._lock:
            if self._ctl[1 + i] == BUSY:
                self._ctl[0] -= 1
            self._ctl[1 + i] = RESTARTED
            if self._ctl[0] == 0:
                self._sync_done = True

    def _wait_sync(self) -> None:
        """Wait for the last worker of a sync step, then collect failures by flag."""
        deadline = time.monotonic() + self.timeout
        while not self._sync_done:
            self._poll(deadline)
        self._sync_step = False
        self._inflight.clear()
        failures = []
        flags = self._ctl[1:]
        if (flags == FINISHED).all():
            return
        for w in self._workers:
            if flags[w.index] != FINISHED_FAILED:
                continue
            found = w.msgs.recv()
            if self.on_error == "restart":
                self._restart(w)
            else:
                failures.extend(found)
        if failures:
            self._raise_failures(failures)

    def _fail(self, exc: Exception) -> None:
        self._state = State.FAILED
        self._close_timeout[0] = 0.2
        raise exc

    def _wait(self, need: int) -> None:
        """Wait until ``need`` workers have answered and are ready to be read."""
        deadline = time.monotonic() + self.timeout
        while len(self._ready) + len(self._failures) < need and self._inflight:
            self._poll(deadline)
        if self._failures:
            failures, self._failures = self._failures, []
            # Raising leaves the other workers mid-flight; reset() drains them first.
            self._raise_failures([f for _, fs in failures for f in fs])
        if len(self._ready) < need:
            raise VectorEnvError("internal: waiting for workers that were never sent work")

    def _drain(self) -> None:
        """Wait for every in-flight worker and drop their answers (before a reset)."""
        deadline = time.monotonic() + self.timeout
        if self._sync_step:  # a sync step was interrupted: its workers answer as one
            while not self._sync_done:
                self._poll(deadline)
            self._sync_step = False
            self._inflight.clear()
            for w in self._workers:
                if self._ctl[1 + w.index] == FINISHED_FAILED:
                    w.msgs.recv()
        while self._inflight:
            self._poll(deadline)
        self._failures = []
        self._ready.clear()
        self._last = self._last_rows = None

    def _send(self, workers: list[int], command: bytes) -> None:
        if self._any_restarted:  # restart flags last one step
            for i in workers:
                w = self._workers[i]
                self._restarted[w.rows[0] : w.rows[-1] + 1] = False
            self._any_restarted = bool(self._restarted.any())
        write, inflight, report = os.write, self._inflight, self._restart_report
        for i in workers:
            w = self._workers[i]
            if report and i in report:  # died while idle: report its truncation now
                report.discard(i)
                self._mark_restarted(self._bufs, list(w.sims))
                self._any_restarted = True
                self._finished_for(i)
                continue
            inflight.add(i)
            try:
                write(w.cmd_fd, command)
            except OSError:  # it died meanwhile: the sentinel will tell
                pass

    # ---- Gymnasium API ----------------------------------------------------------------
    def _send_reset(self, seed: Any) -> None:
        self._check_state(stepping=False)
        self._drain()
        seeds = self._seeds(seed)
        self._restart_report.clear()
        self._restarted[:] = False
        for w in self._workers:
            w.msgs.send(seeds[w.first : w.first + w.count])
        self._send([w.index for w in self._workers], RESET)
        self._state = State.READY

    def reset(self, *, seed=None, options=None):
        """Reset every env (env ``i`` gets ``seed + i``); waits for all workers."""
        self._send_reset(seed)
        try:
            self._wait(self.num_workers)
        except BaseException:
            if self._state is State.READY:
                self._state = State.NEEDS_RESET
            raise
        self._ready.clear()
        obs, _, _, _, infos = self._results(self._bufs)
        return obs, infos

    def step(self, actions):
        """Step every env with ``actions`` (shape ``(num_envs,)``, integers)."""
        if self._state is not State.READY:
            self._check_state()
        if self.batch_size != self.num_sims:
            raise ConfigError(
                "step() needs sync mode (batch_size == num_envs); in async mode use send/recv"
            )
        if self._sync_step:  # the previous step was interrupted (Ctrl-C): let it finish
            self._wait_sync()  # before new actions overwrite the ones its workers read
        self._check_actions(actions, self._bufs.act)
        self._ctl[:] = BUSY
        self._ctl[0] = self.num_workers
        self._sync_step, self._sync_done = True, False
        self._send(self._all_workers, self._step_cmd)
        self._wait_sync()
        self._ready.clear()
        return self._results(self._bufs)

    # ---- async API (EnvPool style) ----------------------------------------------------
    def async_reset(self, seed: Any = None) -> None:
        """Start a reset of every env; results come from :meth:`recv`, a batch at a time."""
        self._send_reset(seed)

    def recv(self) -> tuple:
        """The next ``batch_size`` envs to finish: ``(obs, rew, term, trunc, infos)``.

        Rows are those of the ready workers' envs, in the order they finished;
        ``infos["env_id"]`` gives each row's index in the full batch (``0..num_envs-1``).
        """
        self._check_state()
        if self._last is not None:
            raise VectorEnvError("recv() twice without send(); send actions for the last batch")
        self._wait(self._batch_workers)
        ws = [self._ready.popleft() for _ in range(self._batch_workers)]
        rows = np.concatenate([self._workers[i].rows for i in ws])
        self._last, self._last_rows = ws, rows
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
            scratch = self._act_scratch[len(rows)] = np.zeros(len(rows), dtype=np.int64)
        self._check_actions(actions, scratch)
        self._bufs.act[rows] = scratch
        ws, self._last, self._last_rows = self._last, None, None
        self._send(ws, self._astep_cmd)

    # ---- extras ---------------------------------------------------------------------
    def worker_pids(self) -> list[int]:
        """Process ids of the workers, by worker index."""
        return [w.proc.pid for w in self._workers if w.proc is not None]

    def close_extras(self, **kwargs: Any) -> None:
        self._finalizer()
        # Under spawn the lock is a named semaphore in /dev/shm until its last reference
        # goes; drop ours so close() leaves nothing behind.
        self._lock = None
