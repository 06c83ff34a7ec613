"""``shm``: worker processes hosting several envs each, results in shared memory.

Design (PufferLib and EnvPool style); the lifecycle (boot, faults, restarts, async) is the
base class's, this module is only the transport:

* One shared block (``multiprocessing.RawArray``) holds every batch buffer: observations,
  final observations, masks, actions, rewards, flags, per-env clocks and event counts.
  Each env's own per-agent arrays are views of its rows, so stepping an env writes the
  batch in place (no copy, no pickle).
* A small control block has one 64-byte slot per worker: the command (a sequence number
  and a code) written by the parent, the answer (the sequence number done, tagged with the
  worker's generation, and a status) written by the worker, and the worker's "asleep"
  flag. The worker runs a command once per new sequence number, so handing a batch out
  again after a Ctrl-C is harmless.
* An idle worker watches its slot for ``spin_us`` (yielding its core at each look), then
  raises its asleep flag and sleeps on its doorbell pipe; the parent writes a doorbell
  byte only to a worker whose flag is up.
* The parent reads the answers from the control block. A worker wakes it by writing its
  index to the one results pipe that all workers share (so replies keep the order in
  which workers finished), and only when the parent may be waiting for it: on a sync
  step only the last worker to finish does (each checks the others' slots), so the parent
  sleeps in one ``poll`` and wakes once per step. That ``poll`` also watches every
  worker's process sentinel, so a killed worker is seen at once.
* Both sides write their flag, then a memory barrier, then read the other's (Dekker
  style), so a wake-up is never missed on x86; elsewhere every sleep is also cut to 50 ms
  as a safety net. No lock is shared with the workers, so a worker killed at any moment
  cannot block the parent.
* Pickles go over a second, per-worker pipe only for rare things: reset seeds, calls,
  rebuilds, errors.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import struct
import threading
import time
import weakref
from collections.abc import Sequence
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
LAST_ONLY = 16  # code flag: wake the parent only if no other worker is still busy
PAYLOAD = {"reset", "call", "rebuild"}  # commands whose arguments travel pickled
# A worker's control slot (int64 fields; one cache line each, so workers never share one).
CMD, CODE, DONE, STATUS, ASLEEP = range(5)
SLOT = 8
SEQ_BITS = 40  # DONE holds generation << SEQ_BITS | sequence number
SEQ_MASK = (1 << SEQ_BITS) - 1
BOOTED, BOOT_FAILED, OK, OK_DATA = 0, 1, 2, 3
DOORBELL = b"\x01"
# Default spin of an idle worker when each worker has a core: it covers the usual wait for
# the slowest worker of a sync step on a light scenario (jobshop_v0, 32 envs, 2 workers on
# 2 cores: shm/roundrobin 1.58x with 300 us, 1.69-1.74x with 2000 us).
SPIN_US = 2000.0
# Longest sleep on either side before the control block is looked at again: a safety net
# for memory models where the barrier is not a full one (never needed on x86). The barrier
# is taking and releasing a private lock: that runs a locked instruction (x86), which
# orders this process's earlier stores before its later loads.
NET = 0.05


def _control(raw: Any, num_workers: int) -> memoryview:
    """The control block: ``num_workers`` slots of ``SLOT`` int64, 64-byte aligned."""
    mem = memoryview(raw).cast("B")
    offset = -np.frombuffer(raw, dtype=np.uint8).ctypes.data % 64
    return mem[offset : offset + 8 * SLOT * num_workers].cast("q")


def _all_done(ctl: memoryview, num_workers: int) -> bool:
    """No worker has a command it has not answered."""
    for j in range(0, num_workers * SLOT, SLOT):
        if ctl[j + CMD] != ctl[j + DONE] & SEQ_MASK:
            return False
    return True


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
    ctl = _control(control, num_workers)
    base = index * SLOT
    cmd = base + CMD
    tag = generation << SEQ_BITS
    out = results.fileno()
    barrier = threading.Lock()
    wake = struct.pack("=H", index)
    last = 0

    def answer(status: int, always: bool = True) -> None:
        ctl[base + STATUS] = status
        ctl[base + DONE] = tag | last
        if not always:
            barrier.acquire()
            barrier.release()
            if not _all_done(ctl, num_workers):
                return  # the parent waits for another worker, which wakes it
        os.write(out, wake)

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
    answer(BOOTED)
    fd = doorbell.fileno()
    bell = select.poll()
    bell.register(fd, select.POLLIN)
    clock = time.perf_counter
    sched_yield = os.sched_yield
    while True:
        if ctl[cmd] == last:
            if spin:
                # Watch the slot for a moment before sleeping: a worker that sleeps costs
                # a wake-up (tens of us) on every step of a light scenario. Yield while
                # watching: the parent, just woken by the last answer, may be queued on
                # this core, and would otherwise wait until the spin ends.
                end = clock() + spin
                while ctl[cmd] == last and clock() < end:
                    sched_yield()
            if ctl[cmd] == last:
                ctl[base + ASLEEP] = 1
                barrier.acquire()
                barrier.release()
                while ctl[cmd] == last:
                    if bell.poll(NET * 1000.0):
                        try:
                            ring = os.read(fd, 64)  # the doorbell (and any stale ones)
                        except OSError:
                            return
                        if not ring:  # EOF: the parent is gone
                            group.close()
                            return
                ctl[base + ASLEEP] = 0
        seq = ctl[cmd]
        last, code = seq, ctl[base + CODE]
        command = COMMANDS.get(code & ~LAST_ONLY)
        if command == "close" or command is None:
            group.close()
            return
        if command == "step":
            failures, value = group.step(code & ~LAST_ONLY == STEP_SAME), None
        else:
            while True:  # skip arguments of a command handed out twice
                sent, payload = msgs.recv()
                if sent == seq:
                    break
            failures, value = group.run(command, payload)
        if failures or value is not None:
            answer(OK_DATA, not code & LAST_ONLY)  # before the data, as above
            msgs.send((seq, failures, value))
        else:
            answer(OK, not code & LAST_ONLY)


@dataclass
class _Proc:
    """One worker process and its pipes (the parent's ends)."""

    proc: Any
    doorbell: Any  # Connection the parent writes doorbells to
    msgs: Any  # duplex Connection for pickled arguments and answers
    fd: int
    sentinel: int
    base: int  # index of its slot in the control block
    tag: int  # its generation, as in its answers
    seq: int = 0
    expect: int = -1  # the answer to the command in flight: tag | seq
    kept: tuple[int, Reply] | None = None  # an answer whose data was read: (expect, reply)
    dead: bool = False

    def describe(self) -> str:
        return f"pid {self.proc.pid}"


class _Processes:
    """Everything the finalizer needs to stop the workers (no reference to the env)."""

    def __init__(self, control: memoryview, close_timeout: float):
        self.procs: dict[int, _Proc] = {}
        self.conns: list = []
        self.control = control
        self.close_timeout = close_timeout

    def stop(self) -> None:
        """Ask every worker to close, wait ``close_timeout``, kill stragglers; idempotent."""
        for p in self.procs.values():
            if p.proc.is_alive():
                p.seq += 1
                self.control[p.base + CODE] = CODES["close"]
                self.control[p.base + CMD] = p.seq
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
            sleeps; ``None``: 2000 when every worker can have a core of its own, else 0
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
            spin_us = SPIN_US if self.num_workers <= usable_cores() else 0.0
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
        self._control = self._ctx.RawArray("B", 8 * SLOT * self.num_workers + 64)
        self._ctl = _control(self._control, self.num_workers)
        self._barrier = threading.Lock()
        self._bufs = Buffers(self.layout, self._memory)
        self._results_r, self._results_w = self._ctx.Pipe(duplex=False)
        self._results_fd = self._results_r.fileno()
        self._poller = select.poll()
        self._poller.register(self._results_fd, select.POLLIN)
        self._by_sentinel: dict[int, Worker] = {}
        self._early: dict[int, Reply] = {}  # replies known without waiting (dead on posting)
        # Replies "ok" of every worker, shared (replies are never changed).
        self._ok = [Reply(i, "ok") for i in range(self.num_workers)]
        self._all_ok = dict(enumerate(self._ok))
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
        base = w.index * SLOT
        for field in range(SLOT):
            self._ctl[base + field] = -1 if field == DONE else 0  # DONE -1: no answer yet
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
        tag = w.generation << SEQ_BITS
        p = _Proc(proc, door_w, msgs_parent, door_w.fileno(), proc.sentinel, base, tag,
                  expect=tag)
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
        p.expect = p.tag | p.seq
        self._ctl[p.base + CODE] = (
            STEP_SAME if command == "step" and payload else CODES[command])
        self._ctl[p.base + CMD] = p.seq
        self._barrier.acquire()
        self._barrier.release()
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
        """Wake worker ``p`` if it sleeps (after its new command and a barrier)."""
        if not self._ctl[p.base + ASLEEP]:
            return  # it is spinning and sees the command by itself
        try:
            os.write(p.fd, DOORBELL)
        except OSError:  # it died meanwhile: the sentinel will tell
            pass

    def _post_all(self, ws, command, payloads=None) -> None:
        if command != "step":
            super()._post_all(ws, command, payloads)
            return
        # The hot path: no pickles, so no need to hold off Ctrl-C; instead the hand-out is
        # idempotent (a worker gets its new sequence number once, when it stops being
        # idle) and is done again in full if it was cut short, so no worker is left
        # believed busy but never told.
        code = STEP_SAME if payloads else CODES["step"]
        if len(ws) == self.num_workers:
            # The parent waits for every worker, so only the last to finish need wake it.
            # (A worker found dead here died idle: its slot shows no command in flight.)
            code |= LAST_ONLY
        try:
            self._hand_out(ws, code)
        except BaseException:
            self._hand_out(ws, code)
            self._interrupted = True
            raise

    def _hand_out(self, ws: Sequence[Worker], code: int) -> None:
        ctl = self._ctl
        for w in ws:
            p: _Proc = w.handle
            if w.busy is None:  # not handed out yet (commands go to idle workers only)
                w.busy = "step"
                if p.dead:
                    self._early[w.index] = Reply(w.index, "died", detail=self._exit_detail(p))
                    continue
                p.seq += 1
                p.expect = p.tag | p.seq
            elif p.dead:
                continue
            ctl[p.base + CODE] = code  # the code before the sequence number: a worker that
            ctl[p.base + CMD] = p.seq  # sees the new number sees the new code (x86 order)
        self._barrier.acquire()
        self._barrier.release()
        for w in ws:
            p = w.handle
            if not p.dead:
                self._ring(p)

    def _collect(self, ws: Sequence[Worker], deadline: float | None = None) -> dict[int, Reply]:
        if deadline is None:
            deadline = self._deadline(ws)
        if len(ws) != self.num_workers or self._early or self._ready:
            return super()._collect(ws, deadline)
        # The hot path (a sync step): one wake-up, the last worker's, usually finds every
        # answer "ok" in the control block. Anything else (data, a death, a stale wake-up,
        # a long step) goes the general way. Ctrl-C needs no holding off here: the replies
        # are read again from the control block (and the workers' states) until taken.
        ready = self._ready
        try:
            for r in self._poll(deadline, len(ws)):
                self._take(r)
        except BaseException:
            self._interrupted = True
            raise
        if len(ready) == len(ws) and list(ready.values()) == self._ok:
            ready.clear()
            return self._all_ok.copy()
        return super()._collect(ws, deadline)

    def _poll(self, deadline: float, want: int = 1) -> list[Reply]:
        if self._early:
            out = list(self._early.values())
            self._early.clear()
            return out
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return []
        woken = b""
        for fd, _ in self._poller.poll(min(remaining, NET) * 1000.0 + 1.0):
            if fd == self._results_fd:
                woken = os.read(fd, 2048)  # wake-ups: the answers are in the control block
                continue
            w = self._by_sentinel.get(fd)
            if w is not None and not w.handle.proc.is_alive():
                w.handle.dead = True  # _answers reports it while it is busy
                self._poller.unregister(fd)
                del self._by_sentinel[fd]
        return self._answers(woken)

    def _answers(self, woken: bytes = b"") -> list[Reply]:
        """Replies of the busy workers, read from the control block (and a dead worker's
        death) each time until they are taken: in the order of their wake-ups (``woken``:
        worker indices, in the order they finished), then by index. A worker that
        answered, then died, is found dead when it is next given a command."""
        if len(woken) > 2:  # several wake-ups (not a sync step): keep their order
            order: Any = dict.fromkeys((*memoryview(woken).cast("H"),
                                        *range(self.num_workers)))
        else:
            order = range(self.num_workers)
        ctl = self._ctl
        out = []
        for i in order:
            w = self._workers[i]
            p: _Proc = w.handle
            if w.busy is None or p is None:
                continue
            if ctl[p.base + DONE] != p.expect:
                if p.dead:
                    out.append(Reply(i, "died", detail=self._exit_detail(p)))
                continue
            status = ctl[p.base + STATUS]
            if status == OK:
                out.append(self._ok[i])
            elif status == BOOTED:
                out.append(Reply(i, "booted"))
            elif p.kept is not None and p.kept[0] == p.expect:
                out.append(p.kept[1])  # read before, then lost to a Ctrl-C
            else:
                out.append(self._read_data(w, p, status))
        return out

    def _read_data(self, w: Worker, p: _Proc, status: int) -> Reply:
        """The answer whose data follows in ``p.msgs``: an error or a call's value. The data
        comes at once; a worker stopped between the two writes counts as hung after
        ``timeout`` (never blocks past that)."""
        try:
            if not p.msgs.poll(self.timeout):
                return Reply(w.index, "hung")
            if status == BOOT_FAILED:
                reply = Reply(w.index, "boot_failed", detail=p.msgs.recv())
            else:
                _, failures, value = p.msgs.recv()
                reply = Reply(w.index, "ok", failures, value)
        except (EOFError, OSError):  # it died between its answer and its data
            p.proc.join(1.0)
            return Reply(w.index, "died", detail=self._exit_detail(p))
        p.kept = (p.expect, reply)
        return reply

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
