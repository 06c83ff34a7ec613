"""``shm``: worker processes hosting several envs each, results in shared memory.

Design (PufferLib and EnvPool style); the lifecycle (boot, faults, restarts, async) is the
base class's, this module is only the transport:

* One shared block (``multiprocessing.RawArray``) holds every batch buffer: observations,
  final observations, masks, actions, rewards, flags, per-env clocks and event counts.
  Each env's own per-agent arrays are views of its rows, so stepping an env writes the
  batch in place (no copy, no pickle).
* A command is a sequence number and a code in a small shared control block, plus one
  doorbell byte down the worker's pipe. The worker runs a command once per new sequence
  number, so handing a batch out again after a Ctrl-C is harmless. An idle worker polls
  its control slot for ``spin_us`` before it sleeps on the doorbell.
* Each worker answers with one 12-byte message on a results pipe that all workers share,
  so the parent waits with a single ``poll``, which also watches every worker's process
  sentinel: a killed worker is seen at once. No lock is shared with the workers, so a
  worker killed at any moment cannot block the parent.
* Pickles go over a second, per-worker pipe only for rare things: reset seeds, calls,
  rebuilds, errors.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import struct
import time
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from deszoo.errors import ConfigError
from deszoo.vector._host import Buffers, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, Reply, VecSpec, Worker

__all__ = ["ShmVecEnv"]

log = logging.getLogger(__name__)

# Command codes (control block) and the commands they stand for.
CODES = {"step": 1, "reset": 2, "call": 3, "rebuild": 4, "close": 5}
STEP_SAME = 6  # "step" with same-step autoreset
COMMANDS = {1: "step", 2: "reset", 3: "call", 4: "rebuild", 5: "close", 6: "step"}
PAYLOAD = {"reset", "call", "rebuild"}  # commands whose arguments travel pickled
# Answers (worker -> parent): worker index, status, generation, sequence number.
MSG = struct.Struct("<HBxII")
BOOTED, BOOT_FAILED, OK, OK_DATA = 0, 1, 2, 3
DOORBELL = b"\x01"


def _worker_main(
    index: int,
    generation: int,
    factory: Any,
    memory: Any,
    control: Any,
    num_workers: int,
    layout: Layout,
    first: int,
    count: int,
    reset_seeds: list | None,
    doorbell: Any,
    results: Any,
    msgs: Any,
    inherited: list,
    spin: float,
) -> None:
    """Body of a worker process: build the envs, then serve commands until told to close."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    for conn in inherited:  # under fork: the parent's ends of other pipes (EOF detection)
        conn.close()
    out = results.fileno()
    last = 0

    def answer(status: int) -> None:
        os.write(out, MSG.pack(index, status, generation, last))

    try:
        bufs = Buffers(layout, memory, fresh=False)  # only this worker's rows are written
        group = EnvGroup(factory, bufs, first, count, reset_seeds)
    except Exception as exc:
        import traceback

        # The answer first, then the data: the parent reads the data only once it has the
        # answer, and a message larger than the pipe's buffer would block until then.
        answer(BOOT_FAILED)
        msgs.send(f"{type(exc).__name__}: {exc}\nworker traceback:\n{traceback.format_exc()}")
        return
    ctl = np.frombuffer(control, dtype=np.int64).reshape(num_workers, 2)[index]
    answer(BOOTED)
    fd = doorbell.fileno()
    clock = time.perf_counter
    while True:
        if spin:
            # Watch the control slot for a moment before sleeping in read(): a worker that
            # sleeps costs a wake-up (tens of us) on every step of a light scenario.
            end = clock() + spin
            while ctl[0] == last and clock() < end:
                pass
        try:
            ring = os.read(fd, 64)  # the doorbell (and any duplicates of it)
        except OSError:
            return
        if not ring:  # EOF: the parent is gone
            group.close()
            return
        seq = int(ctl[0])
        if seq == last:
            continue  # a duplicate doorbell of a command already run
        last, code = seq, int(ctl[1])
        command = COMMANDS.get(code)
        if command == "close" or command is None:
            group.close()
            return
        if command == "step":
            failures, value = group.step(code == STEP_SAME), None
        else:
            while True:  # skip arguments of a command handed out twice
                tag, payload = msgs.recv()
                if tag == seq:
                    break
            failures, value = group.run(command, payload)
        if failures or value is not None:
            answer(OK_DATA)  # before the data, as above
            msgs.send((seq, failures, value))
        else:
            answer(OK)


class _NoData(Exception):
    """A worker's answer came without the data that goes with it."""


@dataclass
class _Proc:
    """One worker process and its pipes (the parent's ends)."""

    proc: Any
    doorbell: Any  # Connection the parent writes doorbells to
    msgs: Any  # duplex Connection for pickled arguments and answers
    fd: int
    sentinel: int
    seq: int = 0
    dead: bool = False

    def describe(self) -> str:
        return f"pid {self.proc.pid}"


class _Processes:
    """Everything the finalizer needs to stop the workers (no reference to the env)."""

    def __init__(self, control: np.ndarray, close_timeout: float):
        self.procs: dict[int, _Proc] = {}
        self.conns: list = []
        self.control = control
        self.close_timeout = close_timeout

    def stop(self) -> None:
        """Ask every worker to close, wait ``close_timeout``, kill stragglers; idempotent."""
        for w, p in self.procs.items():
            if p.proc.is_alive():
                p.seq += 1
                self.control[w, 1] = CODES["close"]
                self.control[w, 0] = p.seq
                try:
                    os.write(p.fd, DOORBELL)
                except OSError:
                    pass
        deadline = time.monotonic() + self.close_timeout
        for p in self.procs.values():
            p.proc.join(max(0.0, deadline - time.monotonic()))
        for p in list(self.procs.values()):
            _end(p)
        self.procs.clear()
        for conn in self.conns:
            conn.close()
        self.conns.clear()


def _end(p: _Proc) -> None:
    """Kill (if needed), reap and close one worker's process and pipes."""
    if p.proc.is_alive():
        p.proc.kill()
        p.proc.join(5.0)
    if not p.proc.is_alive():
        p.proc.close()
    p.doorbell.close()
    p.msgs.close()


class ShmVecEnv(DeszooVecEnv):
    """Shared-memory multiprocess backend; see :func:`deszoo.vector.make_vec`.

    Args:
        spec: what to build.
        seed: seed of the first ``reset()`` (env ``i`` gets ``seed + i``).
        num_workers: worker processes (at most ``num_sims``).
        batch_size: envs per ``recv`` in async mode; ``None`` means all (sync mode).
        timeout: seconds to wait for any worker answer before it counts as hung.
        start_method: ``"fork"``, ``"spawn"`` or ``"forkserver"`` (default: the platform's).
        close_timeout: seconds ``close`` waits for workers to exit before killing them.
        spin_us: microseconds an idle worker watches for the next command before it
            sleeps; ``None``: 300 when every worker can have a core of its own, else 0
            (spinning workers that share cores slow each other down).
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

        super().__init__(spec, seed=seed, num_workers=num_workers, batch_size=batch_size,
                         timeout=timeout, **options)
        if spin_us is None:
            spin_us = 300.0 if self.num_workers <= usable_cores() else 0.0
        if not (isinstance(spin_us, (int, float)) and 0 <= spin_us < float("inf")):
            raise ConfigError(f"spin_us={spin_us!r} must be a number >= 0 (microseconds)")
        self.spin_us = float(spin_us)
        try:
            self._ctx = mp.get_context(start_method)
        except ValueError:
            raise ConfigError(
                f"start_method={start_method!r}; valid: None or one of "
                f"{mp.get_all_start_methods()}"
            ) from None
        self.start_method = self._ctx.get_start_method()
        self._memory = self._ctx.RawArray("B", self.layout.nbytes())
        self._control = self._ctx.RawArray("q", 2 * self.num_workers)
        self._ctl = np.frombuffer(self._control, dtype=np.int64).reshape(self.num_workers, 2)
        self._bufs = Buffers(self.layout, self._memory)
        self._results_r, self._results_w = self._ctx.Pipe(duplex=False)
        self._results_fd = self._results_r.fileno()
        self._poller = select.poll()
        self._poller.register(self._results_fd, select.POLLIN)
        self._by_sentinel: dict[int, Worker] = {}
        self._early: dict[int, Reply] = {}  # replies known without waiting (dead on posting)
        self._procs = _Processes(self._ctl, float(close_timeout))
        self._procs.conns += [self._results_r, self._results_w]
        self._finalizer = weakref.finalize(self, self._procs.stop)
        self._boot()

    # ---- transport ------------------------------------------------------------------
    def _launch(self, w: Worker, reset_seeds: list | None) -> None:
        ctx = self._ctx
        door_r, door_w = ctx.Pipe(duplex=False)
        msgs_parent, msgs_child = ctx.Pipe(duplex=True)
        inherited: list = []
        if self.start_method == "fork":
            inherited = [self._results_r, door_w, msgs_parent] + [
                c for p in self._procs.procs.values() for c in (p.doorbell, p.msgs)
            ]
        self._ctl[w.index] = (0, 0)
        proc = ctx.Process(
            target=_worker_main,
            name=f"deszoo-shm-{w.index}",
            args=(
                w.index, w.generation, self.sim_spec.factory, self._memory, self._control,
                self.num_workers, self.layout, w.first, w.count, reset_seeds, door_r,
                self._results_w, msgs_child, inherited, self.spin_us * 1e-6,
            ),
            daemon=True,
        )
        proc.start()
        door_r.close()
        msgs_child.close()
        p = _Proc(proc, door_w, msgs_parent, door_w.fileno(), proc.sentinel)
        w.handle = p
        self._procs.procs[w.index] = p
        self._by_sentinel[p.sentinel] = w
        self._poller.register(p.sentinel, select.POLLIN)

    def _post(self, w: Worker, command: str, payload: Any) -> None:
        p: _Proc = w.handle
        if p.dead:
            self._early[w.index] = Reply(w.index, "died", detail=self._exit_detail(p))
            return
        p.seq += 1
        self._ctl[w.index, 1] = STEP_SAME if command == "step" and payload else CODES[command]
        self._ctl[w.index, 0] = p.seq
        self._ring(p)
        if command in PAYLOAD:
            # After the doorbell: the worker reads the arguments once it is woken, and an
            # argument larger than the pipe's buffer would block the parent until then.
            try:
                p.msgs.send((p.seq, payload))
            except OSError:  # it is gone (its sentinel tells how)
                p.proc.join(1.0)
                self._early[w.index] = Reply(w.index, "died", detail=self._exit_detail(p))

    def _ring(self, p: _Proc) -> None:
        try:
            os.write(p.fd, DOORBELL)
        except OSError:  # it died meanwhile: the sentinel will tell
            pass

    def _post_all(self, ws, command, payloads=None) -> None:
        if command != "step":
            super()._post_all(ws, command, payloads)
            return
        # The hot path: no pickles, so no need to hold off Ctrl-C; instead the hand-out is
        # idempotent (the sequence numbers are fixed first) and is done again in full if
        # it was cut short, so no worker is left believed busy but never told.
        code = STEP_SAME if payloads else CODES["step"]
        seqs = [w.handle.seq + 1 for w in ws]
        try:
            self._hand_out(ws, seqs, code)
        except BaseException:
            self._hand_out(ws, seqs, code)
            self._interrupted = True
            raise

    def _hand_out(self, ws, seqs: list[int], code: int) -> None:
        ctl = self._ctl
        for w, seq in zip(ws, seqs, strict=True):
            w.busy = "step"
            p: _Proc = w.handle
            if p.dead:
                self._early[w.index] = Reply(w.index, "died", detail=self._exit_detail(p))
                continue
            p.seq = seq
            ctl[w.index, 1] = code  # the code before the sequence number: a worker that
            ctl[w.index, 0] = seq  # sees the new number sees the new code (x86 store order)
        for w in ws:
            if not w.handle.dead:
                self._ring(w.handle)

    def _poll(self, deadline: float, want: int = 1) -> list[Reply]:
        if self._early:
            out = list(self._early.values())
            self._early.clear()
            return out
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return []
        out = []
        for fd, _ in self._poller.poll(remaining * 1000.0 + 1.0):
            if fd == self._results_fd:
                out += self._read_answers()
                continue
            w = self._by_sentinel.get(fd)
            if w is None:
                continue
            p: _Proc = w.handle
            if p.proc.is_alive():
                continue
            p.dead = True
            self._poller.unregister(fd)
            del self._by_sentinel[fd]
            if w.busy:
                out.append(Reply(w.index, "died", detail=self._exit_detail(p)))
        return out

    def _read_answers(self) -> list[Reply]:
        data = os.read(self._results_fd, MSG.size * 256)
        out = []
        for index, status, generation, seq in MSG.iter_unpack(data):
            w = self._workers[index]
            p: _Proc = w.handle
            if generation != w.generation or p is None:
                continue  # from a worker that was replaced
            try:
                if status == BOOTED:
                    out.append(Reply(index, "booted"))
                elif status == BOOT_FAILED:
                    out.append(Reply(index, "boot_failed", detail=self._data(p)))
                elif seq != p.seq:
                    if status == OK_DATA:
                        self._data(p)  # the answer to a command given up on
                elif status == OK:
                    out.append(Reply(index, "ok"))
                else:
                    tag, failures, value = self._data(p)
                    out.append(Reply(index, "ok", failures, value))
            except _NoData:  # stopped or stuck between its answer and its data
                if not w.busy:
                    p.proc.kill()  # no one waits for it: seen dead when next asked
                out.append(Reply(index, "hung"))
            except (EOFError, OSError):  # it died between its answer and its data
                p.proc.join(1.0)
                out.append(Reply(index, "died", detail=self._exit_detail(p)))
        return out

    def _data(self, p: _Proc) -> Any:
        """The data a worker sends after its answer. It comes at once; if it does not
        come within ``timeout`` (a worker stopped between the two writes), the worker
        counts as hung: :class:`_NoData`. Never blocks past that."""
        if not p.msgs.poll(self.timeout):
            raise _NoData
        return p.msgs.recv()

    @staticmethod
    def _exit_detail(p: _Proc) -> str:
        code = p.proc.exitcode
        signal_note = ", killed by a signal" if code is not None and code < 0 else ""
        return f" (exit code {code}{signal_note}); its envs were lost"

    def _kill(self, w: Worker) -> None:
        p: _Proc | None = w.handle
        if p is None:
            return
        if p.sentinel in self._by_sentinel:
            self._poller.unregister(p.sentinel)
            del self._by_sentinel[p.sentinel]
        self._procs.procs.pop(w.index, None)
        _end(p)
        w.handle = None

    def _shutdown(self) -> None:
        finalizer = getattr(self, "_finalizer", None)  # absent if __init__ failed early
        if finalizer is not None:
            finalizer()

    def describe(self, w: Worker) -> str:
        where = w.handle.describe() if w.handle is not None else "not running"
        return f"worker {w.index} ({where}, envs {w.first}..{w.first + w.count - 1})"

    def worker_pids(self) -> list[int]:
        """Process ids of the workers, by worker index."""
        return [w.handle.proc.pid for w in self._workers if w.handle is not None]
