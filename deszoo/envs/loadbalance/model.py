"""Multi-pool service system (call centre / server farm) as a SimPy model (no RL concepts).

Several sources (dispatchers) each receive a Poisson stream of requests of several types.
When a request arrives and at least one pool can take it, the source asks
``route(d, kind, open_pools)`` for a pool (``open_pools[k]``: pool ``k`` is not full); the
returned event's value is the index of the chosen pool. A pool has
``servers`` servers and a waiting room of ``queue_cap`` places, served first come, first
served as by a :class:`simpy.Resource`; a pool is *full* when every server is busy and the
waiting room is full. A request that finds every pool full is blocked (lost) without asking.
Service times are exponential with a mean that depends on the request type and the pool. A
waiting request abandons (reneges) after an exponential patience time; once service has
started it stays. Optionally a share of the load (``background_rate``) arrives directly at
the pools (proportional to their servers) and is never routed by a source. Arrivals stop at
``horizon``; ``on_all_done`` is called when the last request has left after that.

Per-request bookkeeping runs as event callbacks rather than one generator process per request:
a waiting request *is* the event that its pool succeeds when it gets a server (:class:`Call`),
which halves the events and allocations per request compared with a process that waits on
``request | timeout``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

__all__ = ["Call", "LoadBalanceModel", "Pool", "Uniforms"]


class Uniforms:
    """Uniform(0, 1) draws from ``rng``, fetched in blocks.

    One ``rng.random()`` call per draw costs about a microsecond; a block costs that once.
    """

    def __init__(self, rng: np.random.Generator, block: int = 2048):
        self.rng = rng
        self.block = block
        self.buf: list[float] = []

    def __call__(self) -> float:
        buf = self.buf
        if not buf:
            buf.extend(self.rng.random(self.block).tolist())
        return buf.pop()

    def exponential(self, mean: float) -> float:
        buf = self.buf  # (as in __call__: a call less per draw)
        if not buf:
            buf.extend(self.rng.random(self.block).tolist())
        return -mean * math.log(1.0 - buf.pop())


class Call(simpy.Event):
    """One request, with its data; the event succeeds when the request gets a server."""

    def __init__(self, pool: Pool, source: int, kind: int, mean: float, now: float):
        super().__init__(pool.sim)
        self.pool = pool
        self.source = source  # dispatcher index, -1 for background traffic
        self.kind = kind
        self.mean = mean  # mean service time of this kind at this pool
        self.arrived = now


class Pool:
    """``servers`` servers and a waiting room of ``queue_cap`` places, first come, first served.

    Requests get servers in the order and at the events that ``simpy.Resource(sim, servers)``
    gives them: a request that finds a server free and nobody waiting gets it at once; the
    head of the queue gets a server when a release is processed (one request per release, as
    SimPy's ``_trigger_put`` tries only the head), or when a later request arrives while a
    server is free. Unlike the ``Resource`` it schedules no event for a request served at
    once (nothing waits on it) and builds no ``Request``/``Release`` objects: a request and a
    release per call are most of this model's work.
    """

    __slots__ = ("sim", "index", "servers", "queue_cap", "times", "users", "queue",
                 "queue_work", "busy_work")

    def __init__(self, sim: simpy.Environment, index: int, servers: int, queue_cap: int,
                 times: list[float]):
        self.sim = sim
        self.index = index
        self.servers = servers
        self.queue_cap = queue_cap
        self.times = times  # mean service time per request type
        self.users: dict[Call, None] = {}  # in service, in the order they got a server
        self.queue: deque[Call] = deque()  # waiting
        self.queue_work = 0.0  # sum of mean service times of the waiting requests
        self.busy_work = 0.0  # sum of mean service times of the requests in service

    @property
    def busy(self) -> int:
        return len(self.users)

    @property
    def waiting(self) -> int:
        return len(self.queue)

    def full(self) -> bool:
        return len(self.users) >= self.servers and len(self.queue) >= self.queue_cap

    def expected_wait(self) -> float:
        """Mean wait of a request joining now: 0 with a free server, else the work ahead / c.

        Exact for exponential service with equal rates (``(q + 1) / (c mu)``); with
        type-dependent rates it uses the mean service time of each request ahead.
        """
        c = self.servers
        if len(self.users) < c:
            return 0.0
        return max(0.0, self.queue_work + self.busy_work / c) / c

    def request(self, call: Call) -> bool:
        """Join the pool; True if ``call`` got a server at once (its event is not used)."""
        if not self.queue and len(self.users) < self.servers:
            self.users[call] = None
            return True
        self.queue.append(call)
        self._grant()  # a server freed at this instant goes to the head of the queue
        return False

    def release(self, call: Call) -> None:
        """``call`` leaves its server; the head of the queue gets it when this is processed."""
        del self.users[call]
        done = simpy.Event(self.sim)
        done.callbacks.append(self._grant)
        done.succeed()

    def cancel(self, call: Call) -> None:
        """``call`` leaves the queue (it has not got a server)."""
        self.queue.remove(call)

    def _grant(self, _event: simpy.Event | None = None) -> None:
        if self.queue and len(self.users) < self.servers:
            call = self.queue.popleft()
            self.users[call] = None
            call.succeed()


class LoadBalanceModel:
    """The service system. ``p`` holds the parameters (``n_dispatchers``, ``n_pools``,
    ``n_types``, ``servers_range``, ``queue_capacity``, ``skill_spread``, ``load``,
    ``background``, ``patience``, ``horizon``); each episode draws the pools' servers, the
    mean service times per (type, pool) and each source's type mix from ``rng``."""

    def __init__(
        self,
        sim: simpy.Environment,
        rng: np.random.Generator,
        p: Any,
        route: Callable[[int, int, list[bool]], simpy.Event],
        on_wait: Callable[[int, int], None] = lambda d, delta: None,
        on_lost: Callable[[int, int], None] = lambda d, kind: None,
        on_all_done: Callable[[], None] = lambda: None,
    ):
        self.sim, self.rng, self.p = sim, rng, p
        n_d, n_p, n_t = p.n_dispatchers, p.n_pools, p.n_types
        lo, hi = p.servers_range
        servers = rng.integers(lo, hi + 1, size=n_p)
        self.service_time = np.exp(p.skill_spread * rng.standard_normal((n_t, n_p)))
        self.type_mix = rng.dirichlet(np.ones(n_t), size=n_d)  # (sources, types)
        # offered load: arrivals x (mean service time over the type mix and the servers)
        mean_time = float(self.type_mix.mean(axis=0) @ self.service_time @ servers) / servers.sum()
        total_rate = p.load * servers.sum() / mean_time
        self.servers: list[int] = servers.tolist()
        self.queue_cap = p.queue_capacity
        self.source_rate = (1 - p.background) * total_rate / n_d  # per source
        self.background_rate = p.background * total_rate  # straight at the pools
        self.patience = p.patience  # mean patience of a waiting request
        self.horizon = p.horizon  # arrivals stop then; the system drains
        self.route, self.on_wait, self.on_lost = route, on_wait, on_lost
        self.on_all_done = on_all_done
        self.pools: list[Pool] = []
        self.arrivals: list[int] = []
        self.served: list[int] = []
        self.blocked: list[int] = []
        self.abandoned: list[int] = []
        self.total_wait = 0.0
        self.in_system = 0  # requests waiting or in service
        self.arrivals_over = False

    def start(self) -> None:
        n_sources, n_types = self.type_mix.shape
        self.draw = Uniforms(self.rng)
        self.pools = [
            Pool(self.sim, k, c, self.queue_cap, [float(t) for t in self.service_time[:, k]])
            for k, c in enumerate(self.servers)
        ]
        # per source, plus one slot (index -1) for background traffic
        self.arrivals = [0] * (n_sources + 1)
        self.served = [0] * (n_sources + 1)
        self.blocked = [0] * (n_sources + 1)
        self.abandoned = [0] * (n_sources + 1)
        # bound methods created once, not once per request
        self._granted_cb = self._granted
        self._served_cb = self._served
        self._patience_cb = self._patience_over
        for d in range(n_sources):
            self.sim.process(self._source(d))
        if self.background_rate > 0:
            self.sim.process(self._background())
        self.sim.process(self._closing())

    # ---- arrival processes --------------------------------------------------------------
    def _closing(self):
        yield self.sim.timeout(self.horizon)
        self.arrivals_over = True
        self._check_done()

    def _check_done(self) -> None:
        if self.arrivals_over and not self.in_system:
            self.on_all_done()

    def _source(self, d: int):
        sim, draw, horizon = self.sim, self.draw, self.horizon
        cum = np.cumsum(self.type_mix[d]).tolist()
        cum[-1] = 1.0
        mean_gap = 1.0 / self.source_rate
        while True:
            yield sim.timeout(draw.exponential(mean_gap))
            if sim.now >= horizon:
                return
            kind = bisect_right(cum, draw())  # the first type whose cumulative share > u
            self.arrivals[d] += 1
            open_pools = [not pool.full() for pool in self.pools]
            if not any(open_pools):
                self.blocked[d] += 1
                self.on_lost(d, kind)
                continue
            pool = yield self.route(d, kind, open_pools)
            self.admit(d, kind, pool)

    def _background(self):
        sim, draw, horizon = self.sim, self.draw, self.horizon
        cum = np.cumsum(self.servers, dtype=np.float64)
        cum = (cum / cum[-1]).tolist()
        cum[-1] = 1.0
        n_types = self.service_time.shape[0]
        mean_gap = 1.0 / self.background_rate
        while True:
            yield sim.timeout(draw.exponential(mean_gap))
            if sim.now >= horizon:
                return
            k = bisect_right(cum, draw())  # pools in proportion to their servers
            kind = min(int(draw() * n_types), n_types - 1)
            self.arrivals[-1] += 1
            self.admit(-1, kind, k)

    # ---- request life cycle (event callbacks) -------------------------------------------
    def admit(self, source: int, kind: int, k: int) -> None:
        """Send a request of type ``kind`` from ``source`` (-1: background) to pool ``k``."""
        pool = self.pools[k]
        if pool.full():  # filled up at this very instant, after the decision was asked for
            self.blocked[source] += 1
            if source >= 0:
                self.on_lost(source, kind)
            return
        mean = pool.times[kind]
        call = Call(pool, source, kind, mean, self.sim.now)
        self.in_system += 1
        if pool.request(call):  # a free server
            self._start(call)
            return
        pool.queue_work += mean
        if source >= 0:
            self.on_wait(source, 1)
        call.callbacks.append(self._granted_cb)
        patience = self.sim.timeout(self.draw.exponential(self.patience), call)
        patience.callbacks.append(self._patience_cb)

    def _granted(self, call: Call) -> None:
        pool = call.pool
        pool.queue_work -= call.mean
        if not pool.queue:
            pool.queue_work = 0.0  # no float drift once the queue is empty
        self.total_wait += self.sim.now - call.arrived
        if call.source >= 0:
            self.on_wait(call.source, -1)
        self._start(call)

    def _start(self, call: Call) -> None:
        call.pool.busy_work += call.mean
        done = self.sim.timeout(self.draw.exponential(call.mean), call)
        done.callbacks.append(self._served_cb)

    def _served(self, event: simpy.Event) -> None:
        call = event.value
        pool = call.pool
        pool.busy_work -= call.mean
        pool.release(call)
        if not pool.users:
            pool.busy_work = 0.0
        self.served[call.source] += 1
        self.in_system -= 1
        if self.arrivals_over and not self.in_system:
            self.on_all_done()

    def _patience_over(self, event: simpy.Event) -> None:
        call = event.value
        if call.triggered:  # service has started (or is granted at this instant)
            return
        pool = call.pool
        pool.cancel(call)
        pool.queue_work -= call.mean
        if not pool.queue:
            pool.queue_work = 0.0
        self.total_wait += self.sim.now - call.arrived
        self.abandoned[call.source] += 1
        if call.source >= 0:
            self.on_wait(call.source, -1)
            self.on_lost(call.source, call.kind)
        self.in_system -= 1
        if self.arrivals_over and not self.in_system:
            self.on_all_done()
