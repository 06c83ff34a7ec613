"""Flexible job shop as a SimPy model (no RL concepts).

Jobs arrive as a Poisson stream. Each job is a chain of operations; each operation can
run on a random subset of the machines, with a machine-specific processing time. A
released operation is routed to the eligible machine with the least outstanding work
(ties to the lowest index) and waits in that machine's queue. When a machine is free and
its queue is not empty it asks ``choose(m)`` which queued operation to run next (the
event's value is the operation).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

WEIGHTS = (1.0, 2.0, 4.0)  # a job's weight is one of these, uniformly


@dataclass(eq=False)  # identity: the model finds the operation it is handed in its queue
class Job:
    id: int
    weight: float
    arrival: float
    due: float
    ops: list[dict[int, float]]
    work_left: float  # mean processing time of the operations not yet finished
    next_op: int = 0
    done_at: float | None = None


@dataclass(eq=False)
class Operation:
    job: Job
    index: int
    times: dict[int, float]
    ready: float = 0.0


class JobShopModel:
    """The job shop. ``p`` holds the parameters (``n_machines``, ``n_jobs``, ``max_ops``,
    ``flexibility``, ``utilization``, ``due_tightness``, ``ptime_range``); ``choose(m)``
    is the event a free machine with work queued waits on: its value is the queued
    operation to run next."""

    def __init__(
        self,
        sim: simpy.Environment,
        rng: np.random.Generator,
        p: Any,
        choose: Callable[[int], simpy.Event],
        on_route: Callable[[int, Operation], None] = lambda m, op: None,
        on_finish: Callable[[int, Operation], None] = lambda m, op: None,
        on_all_done: Callable[[], None] = lambda: None,
    ):
        self.sim, self.rng, self.p = sim, rng, p
        self.n_machines, self.n_jobs, self.max_ops = p.n_machines, p.n_jobs, p.max_ops
        self.ptime_range = tuple(p.ptime_range)
        self.choose, self.on_route, self.on_finish = choose, on_route, on_finish
        self.on_all_done = on_all_done
        self.queues: list[list[Operation]] = []
        self.busy_until: list[float] = []
        self.running: list[Operation | None] = []
        self.jobs: list[Job] = []
        self.finished = 0

    def start(self) -> None:
        m = self.n_machines
        self.queues = [[] for _ in range(m)]
        self.busy_until = [0.0] * m
        self.running = [None] * m
        self._wake: list[simpy.Event | None] = [None] * m
        for i in range(m):
            self.sim.process(self._machine(i))
        self.sim.process(self._arrivals())

    def outstanding(self, m: int) -> float:
        """Work queued at machine ``m`` plus what is left of its running operation."""
        left = max(0.0, self.busy_until[m] - self.sim.now)
        return left + sum(op.times[m] for op in self.queues[m])

    def _new_job(self, jid: int) -> Job:
        rng, lo, hi = self.rng, *self.ptime_range
        n, flexibility = self.n_machines, self.p.flexibility
        ops = []
        for _ in range(int(rng.integers(1, self.max_ops + 1))):
            draws = rng.random(n).tolist()
            always = int(rng.integers(n))  # one random machine is always eligible
            machines = [k for k in range(n) if draws[k] < flexibility or k == always]
            # one draw per eligible machine, in one call (the same numbers as one call each)
            times = rng.uniform(lo, hi, len(machines)).tolist()
            ops.append(dict(zip(machines, times, strict=True)))
        now = self.sim.now
        work = sum(sum(op.values()) / len(op) for op in ops)
        weight = WEIGHTS[rng.integers(len(WEIGHTS))]  # as rng.choice(WEIGHTS), without its cost
        return Job(jid, weight, now, now + self.p.due_tightness * work, ops, work)

    def _arrivals(self):
        mean_ops = (1 + self.max_ops) / 2
        mean_work = mean_ops * sum(self.ptime_range) / 2
        rate = self.p.utilization * self.n_machines / mean_work
        for jid in range(self.n_jobs):
            job = self._new_job(jid)
            self.jobs.append(job)
            self._release(job)
            if jid + 1 < self.n_jobs:
                yield self.sim.timeout(float(self.rng.exponential(1.0 / rate)))

    def _release(self, job: Job) -> None:
        times = job.ops[job.next_op]
        op = Operation(job, job.next_op, times, self.sim.now)
        m = min(times, key=lambda k: (self.outstanding(k), k))
        self.queues[m].append(op)
        self.on_route(m, op)
        wake = self._wake[m]
        if wake is not None:
            self._wake[m] = None
            wake.succeed()

    def _machine(self, m: int):
        sim = self.sim
        queue = self.queues[m]
        while True:
            if not queue:
                self._wake[m] = sim.event()
                yield self._wake[m]
                continue
            op = yield self.choose(m)
            queue.remove(op)
            self.running[m] = op
            self.busy_until[m] = sim.now + op.times[m]
            yield sim.timeout(op.times[m])
            self.running[m] = None
            self._complete(m, op)

    def _complete(self, m: int, op: Operation) -> None:
        job = op.job
        job.next_op += 1
        job.work_left -= sum(op.times.values()) / len(op.times)
        last = job.next_op == len(job.ops)
        if last:
            job.done_at = self.sim.now
        self.on_finish(m, op)
        if not last:
            self._release(job)
            return
        self.finished += 1
        if self.finished == self.n_jobs:
            self.on_all_done()
