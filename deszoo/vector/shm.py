"""``shm``: worker processes hosting several envs each, every buffer in one shared block,
a control slot per worker; idempotent posting and polling. Design: ``docs/vector.md``
("shm in detail").
"""

from __future__ import annotations

import logging
import os
import select
import struct
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from deszoo.core.params import integer, optional, real
from deszoo.vector import _procs
from deszoo.vector._host import Buffers, EnvGroup, Layout
from deszoo.vector.base import DeszooVecEnv, VecSpec
from deszoo.vector.options import MAX_SPIN_US, option
from deszoo.vector.pool import (
    IDLE,
    STEP,
    Reply,
    Transport,
    Worker,
    WorkerState,
    finish_hand_out,
    sigint_deferred,
    usable_cores,
)

__all__ = ["ShmTransport", "ShmVecEnv", "SHM_OPTIONS"]

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
# An idle worker's spin when each has a core: covers the wait for the slowest worker on a
# light scenario (jobshop_v0, 32 envs, 2 cores: shm/rr 1.58x at 300 us, 1.69-1.74x at 2000).
SPIN_US = 2000.0
# Longest sleep before the control block is read again: a safety net where the barrier
# (taking and releasing a private lock: a locked instruction on x86) is not a full one.
NET = 0.05

SHM_OPTIONS = (
    _procs.START_METHOD,
    _procs.CLOSE_TIMEOUT,
    option("spin_us", None, optional(real(0, MAX_SPIN_US)), "microseconds an idle worker "
           "polls for its next command before it sleeps (default: 2000 when each worker has "
           "a core, else 0)"),
)


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
    parent: int | None,
) -> None:
    """A worker process: build the envs, serve commands until told to close."""
    _procs.worker_begins(parent)
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

        # The answer before the data: a message larger than the pipe's buffer blocks until
        # the parent reads it, which it does once it sees the answer.
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
                # Spin before sleeping (a wake-up costs tens of us a step), yielding: the
                # parent, just woken, may be queued on this core.
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
    sent: int = 0  # the sequence number whose arguments were sent
    kept: tuple[int, Reply] | None = None  # an answer whose data was read: (expect, reply)
    dead: bool = False


class _Processes:
    """What the finalizer needs to stop the workers (no reference to the env)."""

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
            _procs.end(p.proc, p.doorbell, p.msgs)
        self.procs.clear()
        for conn in self.conns:
            conn.close()
        self.conns.clear()


class ShmTransport(Transport):
    """Worker processes over one shared block.

    Args:
        spec: what the workers build.
        workers: the vector env's workers.
        spin_us: how long an idle worker polls before it sleeps.
        start_method: the multiprocessing start method.
        timeout: longest wait between a worker's answer and its data.
        close_timeout: seconds :meth:`close` waits before killing workers.
        arm_always: workers die with this process even if started from another thread
            (Ray node actors).
    """

    idempotent = True

    def __init__(self, spec: VecSpec, workers: list[Worker], spin_us: float,
                 start_method: str | None, timeout: float, close_timeout: float,
                 arm_always: bool = False):
        self.ctx = _procs.context(start_method)
        self.start_method = self.ctx.get_start_method()
        self.factory = spec.factory
        self.layout = spec.layout
        self.workers = workers
        self.num_workers = len(workers)
        self.spin = float(spin_us) * 1e-6
        self.timeout = timeout
        self.arm_always = arm_always
        self.memory = self.ctx.RawArray("B", self.layout.nbytes())
        self.control = self.ctx.RawArray("B", 8 * SLOT * self.num_workers + 64)
        self.ctl = _control(self.control, self.num_workers)
        self.barrier = threading.Lock()
        self.bufs = Buffers(self.layout, self.memory)
        self.results_r, self.results_w = self.ctx.Pipe(duplex=False)
        self.results_fd = self.results_r.fileno()
        self.poller = select.poll()
        self.poller.register(self.results_fd, select.POLLIN)
        self.by_sentinel: dict[int, Worker] = {}
        self.ok = [Reply(i, "ok") for i in range(self.num_workers)]  # shared, never changed
        self.procs = _Processes(self.ctl, float(close_timeout))
        self.procs.conns += [self.results_r, self.results_w]
        self.finalizer = weakref.finalize(self, self.procs.stop)

    # ---- the contract ---------------------------------------------------------------
    def start(self, w: Worker, reset_seeds: list | None) -> None:
        ctx = self.ctx
        door_r, door_w = ctx.Pipe(duplex=False)
        msgs_parent, msgs_child = ctx.Pipe(duplex=True)
        inherited: list = []
        if self.start_method == "fork":
            inherited = [self.results_r, door_w, msgs_parent] + [
                c for p in self.procs.procs.values() for c in (p.doorbell, p.msgs)
            ]
        base = w.index * SLOT
        for slot_field in range(SLOT):
            self.ctl[base + slot_field] = -1 if slot_field == DONE else 0  # -1: no answer
        parent = _procs.parent_token(self.start_method, self.arm_always)
        proc = ctx.Process(
            target=_worker_main,
            name=f"deszoo-shm-{w.index}",
            args=(
                w.index, w.generation, self.factory, self.memory, self.control,
                self.num_workers, self.layout, w.first, w.count, reset_seeds, door_r,
                self.results_w, msgs_child, inherited, self.spin, parent,
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
        w.to(WorkerState.BOOT)
        self.procs.procs[w.index] = p
        self.by_sentinel[p.sentinel] = w
        self.poller.register(p.sentinel, select.POLLIN)

    def post(self, ws: Sequence[Worker], command: str, payloads: Any) -> None:
        if command == "step":
            code = STEP_SAME if payloads else CODES["step"]
            if len(ws) == self.num_workers:
                # The parent waits for every worker: only the last to finish need wake it.
                code |= LAST_ONLY
        else:
            code = CODES[command]
        self.hand_out(ws, WorkerState(command), code)
        if command in PAYLOAD:
            # After the doorbell (a large argument blocks until the worker reads it); a copy
            # sent twice (a hand-out done again) is skipped by the worker.
            per = isinstance(payloads, dict)
            for w in ws:
                p: _Proc = w.handle
                if p.dead or p.sent == p.seq:
                    continue
                with sigint_deferred():  # a message cut in half would garble the pipe
                    try:
                        p.msgs.send((p.seq, payloads[w.index] if per else payloads))
                    except OSError:  # it is gone: its sentinel tells how
                        p.proc.join(1.0)
                        p.dead = True
                    p.sent = p.seq

    def hand_out(self, ws: Sequence[Worker], state: WorkerState, code: int) -> None:
        """Write each worker's command into its slot (once: a hand-out done again keeps
        the sequence number), then ring the sleepers."""
        ctl = self.ctl
        for w in ws:
            p: _Proc = w.handle
            if w.state is IDLE:  # not handed out yet (IDLE -> state: WORKER_NEXT, inlined)
                w.state = state
                p.seq += 1
                p.expect = p.tag | p.seq
            if not p.dead:  # (a dead one is reported by poll)
                ctl[p.base + CODE] = code  # the code before the sequence number: a worker
                ctl[p.base + CMD] = p.seq  # that sees the new number sees the new code
        barrier = self.barrier
        if not barrier.acquire(False):  # left held by a Ctrl-C between acquire and release
            barrier = self.barrier = threading.Lock()  # (a blocking acquire hung for ever)
            barrier.acquire()
        barrier.release()
        hook = self.hook
        for w in ws:
            p = w.handle
            if ctl[p.base + ASLEEP] and not p.dead:  # a spinning one sees it by itself
                try:
                    os.write(p.fd, DOORBELL)
                except OSError:  # it died meanwhile: the sentinel will tell
                    pass
            if hook is not None and w is ws[0]:
                hook("handout")

    def step(self, ws: Sequence[Worker], same_step: bool, deadline: float) -> list[Reply] | None:
        # The hot path: one wake-up, the last worker's, usually finds every answer "ok";
        # anything else goes through poll. No Ctrl-C holding: a cut hand-out is redone
        # (finish_hand_out), answers stay in the control block until taken.
        code = (STEP_SAME if same_step else CODES["step"]) | LAST_ONLY
        self.handing = (ws, "step", same_step)
        try:
            self.hand_out(ws, STEP, code)
        except BaseException:
            finish_hand_out(self)
            raise
        self.handing = None
        hook, ctl = self.hook, self.ctl
        if hook is not None:
            hook("wait")
        results_fd = self.results_fd
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._answers()  # the lifecycle counts who is missing as hung
            for fd, _ in self.poller.poll(min(remaining, NET) * 1000.0 + 1.0):
                if fd == results_fd:
                    os.read(fd, 2048)  # wake-ups: the answers are in the control block
                else:
                    return self.poll(deadline, len(ws))  # a worker died
            ok = True
            for w in ws:
                p = w.handle
                if ctl[p.base + DONE] != p.expect:
                    break
                if ctl[p.base + STATUS] != OK:
                    ok = False
            else:
                break
        if hook is not None:
            hook("polled")
        if not ok:
            return self._answers()
        for w in ws:
            w.state = IDLE  # taken (STEP -> IDLE, inlined)
        if hook is not None:
            hook("taken")
        return None

    def poll(self, deadline: float, want: int) -> list[Reply]:
        remaining = max(0.0, deadline - time.monotonic())
        woken = b""
        for fd, _ in self.poller.poll(min(remaining, NET) * 1000.0):
            if fd == self.results_fd:
                woken = os.read(fd, 2048)  # wake-ups: the answers are in the control block
                continue
            w = self.by_sentinel.get(fd)
            if w is not None and not w.handle.proc.is_alive():
                w.handle.dead = True  # _answers reports it while it has a command
                self.poller.unregister(fd)
                del self.by_sentinel[fd]
        return self._answers(woken)

    def _answers(self, woken: bytes = b"") -> list[Reply]:
        """Replies (or deaths) of busy workers from the control block, again until taken:
        in wake-up order (``woken``: worker indices), then by index."""
        if len(woken) > 2:  # several wake-ups (not a sync step): keep their order
            order: Any = dict.fromkeys((*memoryview(woken).cast("H"),
                                        *range(self.num_workers)))
        else:
            order = range(self.num_workers)
        ctl = self.ctl
        out = []
        for i in order:
            w = self.workers[i]
            p: _Proc = w.handle
            if w.state is IDLE or p is None:
                continue
            if ctl[p.base + DONE] != p.expect:
                if p.dead:
                    out.append(Reply(i, "died", detail=_procs.exit_detail(p.proc)))
                continue
            status = ctl[p.base + STATUS]
            if status == OK:
                out.append(self.ok[i])
            elif status == BOOTED:
                out.append(Reply(i, "booted"))
            elif p.kept is not None and p.kept[0] == p.expect:
                out.append(p.kept[1])  # read before, then lost to a Ctrl-C
            else:
                out.append(self._read_data(w, p, status))
        return out

    def _read_data(self, w: Worker, p: _Proc, status: int) -> Reply:
        """An answer whose data (an error, a value) follows in ``p.msgs``; a worker stopped
        between the two counts as hung after ``timeout``."""
        try:
            if not p.msgs.poll(self.timeout):
                return Reply(w.index, "hung")
            # Read and kept as one: the pipe is not idempotent, the slot is.
            with sigint_deferred():
                if status == BOOT_FAILED:
                    reply = Reply(w.index, "boot_failed", detail=p.msgs.recv())
                else:
                    _, failures, value = p.msgs.recv()
                    reply = Reply(w.index, "ok", failures, value)
                p.kept = (p.expect, reply)
        except (EOFError, OSError):  # it died between its answer and its data
            return _procs.died(w.index, p.proc)
        return reply

    def stop(self, w: Worker) -> None:
        p: _Proc | None = w.handle
        if p is None:
            return
        if p.sentinel in self.by_sentinel:
            self.poller.unregister(p.sentinel)
            del self.by_sentinel[p.sentinel]
        self.procs.procs.pop(w.index, None)
        _procs.end(p.proc, p.doorbell, p.msgs)
        w.handle = None

    def close(self) -> None:
        self.finalizer()

    def describe(self, w: Worker) -> str:
        where = f"pid {w.handle.proc.pid}" if w.handle is not None else "not running"
        return f"worker {w.index} ({where}, envs {w.first}..{w.first + w.count - 1})"

    def pid(self, w: Worker) -> int | None:
        return None if w.handle is None else w.handle.proc.pid


class ShmVecEnv(DeszooVecEnv):
    """Shared-memory multiprocess backend; see :func:`deszoo.vector.make_vec`."""

    backend = "shm"
    options = (
        option("num_workers", None, optional(integer(1)), "worker processes (default: the "
               "usable cores, at most one per env)"),
        *SHM_OPTIONS,
    )

    @classmethod
    def build(cls, spec: VecSpec, seed: int | None, opts: dict[str, Any]) -> DeszooVecEnv:
        return cls(spec, seed, {**opts, "num_workers": cls.workers_for(spec, opts["num_workers"])})

    def make_transport(self, opts: dict[str, Any]) -> Transport:
        spin = opts["spin_us"]
        if spin is None:
            spin = SPIN_US if self.num_workers <= usable_cores() else 0.0
        self.spin_us = float(spin)
        t = ShmTransport(self.sim_spec, self.workers, self.spin_us, opts["start_method"],
                         self.timeout, opts["close_timeout"])
        self.start_method = t.start_method
        return t
