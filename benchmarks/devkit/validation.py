"""Checks of the scenarios against queueing and scheduling theory (``docs/validation.md``).

Each check builds a *reduced* scenario through :func:`deszoo.make` (one pool, one machine,
one stock point), drives it with a fixed policy through the array API, measures from the
SimPy model's own state and compares with a closed form:

==========================  ===============================================================
``loadbalance_run``         one pool of ``c`` servers: M/M/c (Erlang C) or, with patience,
                            M/M/c+M (Erlang A); Little's law from the model's counters
``elevator_little``         Little's law for waiting and for time in the building
``ridehail_little``         Little's law for the open (not yet accepted) requests
``jobshop_single_machine``  one machine, jobs released at (about) time 0: Smith's rule
``supplychain_base_stock``  one stock point, Poisson demand, fixed lead time, order-up-to
                            ``S`` reviewed every period: fill rate, mean on hand, backlog
==========================  ===============================================================

Measuring never changes a model: :class:`EventHook` runs a function after every SimPy event
(it wraps ``env.sim.step``, the one call the bridge makes to advance the clock), and the
measures read the model's queues, pools, counters and per-entity timestamps.

Statistics: a check runs independent replications (one seed each) and compares the theory with
``mean +- k standard errors`` of the per-replication estimates (:class:`Estimate`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import permutations

import numpy as np

from deszoo.registry import env_module, make

__all__ = [
    "Estimate",
    "EventHook",
    "base_stock",
    "elevator_little",
    "erlang_a",
    "erlang_b",
    "erlang_c",
    "estimate",
    "jobshop_single_machine",
    "loadbalance_run",
    "poisson_cdf",
    "ridehail_little",
    "supplychain_base_stock",
    "weighted_completion",
    "wspt_order",
]


# ---- statistics ------------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """Mean and standard error of ``n`` independent replications."""

    mean: float
    se: float
    n: int

    def interval(self, k: float = 4.0) -> tuple[float, float]:
        return self.mean - k * self.se, self.mean + k * self.se

    def covers(self, value: float, k: float = 4.0) -> bool:
        lo, hi = self.interval(k)
        return lo <= value <= hi

    def __str__(self) -> str:
        return f"{self.mean:.4f} ± {4 * self.se:.4f}"


def estimate(samples: Iterable[float]) -> Estimate:
    """:class:`Estimate` of independent samples (sample standard deviation / sqrt(n))."""
    x = np.asarray(list(samples), dtype=np.float64)
    if len(x) < 2:
        raise ValueError(f"need at least 2 replications for a standard error, got {len(x)}")
    return Estimate(float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))), len(x))


# ---- theory ------------------------------------------------------------------------------
def erlang_b(c: int, a: float) -> float:
    """Blocking probability of M/M/c/c with offered load ``a = lambda / mu``."""
    b = 1.0
    for k in range(1, c + 1):
        b = a * b / (k + a * b)
    return b


def erlang_c(c: int, lam: float, mu: float = 1.0) -> tuple[float, float]:
    """M/M/c: ``(P(wait), E[wait])`` of an arriving customer (1.0, inf when unstable)."""
    a = lam / mu
    if a >= c:
        return 1.0, math.inf
    b = erlang_b(c, a)
    p_wait = c * b / (c - a * (1.0 - b))
    return p_wait, p_wait / (c * mu - lam)


def erlang_a(c: int, lam: float, mu: float, theta: float) -> tuple[float, float, float]:
    """M/M/c+M (exponential patience, rate ``theta``): ``(P(wait), P(abandon), E[wait])``.

    From the birth-death chain of the number in system (death rate ``min(n, c) mu +
    max(n - c, 0) theta``), summed until the terms are below 1e-17 of the total. PASTA gives
    ``P(wait) = P(N >= c)``; abandonments happen at rate ``theta E[queue]``, so ``P(abandon) =
    theta E[queue] / lambda``; Little gives ``E[wait] = E[queue] / lambda`` (over every
    arrival, an abandoning one counted with its time until it left).
    """
    if theta <= 0:
        raise ValueError(f"theta={theta!r} must be > 0 (theta -> 0 is Erlang C)")
    term, total, at_least_c, queue = 1.0, 1.0, 1.0 if c == 0 else 0.0, 0.0
    n = 0
    while True:
        n += 1
        term *= lam / (min(n, c) * mu + max(n - c, 0) * theta)
        total += term
        if n >= c:
            at_least_c += term
            queue += (n - c) * term
        if n > c and term < 1e-17 * total:
            break
    p_wait = at_least_c / total
    mean_queue = queue / total
    return p_wait, theta * mean_queue / lam, mean_queue / lam


def poisson_cdf(k: int, m: float) -> float:
    """``P(N <= k)`` for ``N ~ Poisson(m)``."""
    if k < 0:
        return 0.0
    term = total = math.exp(-m)
    for j in range(1, k + 1):
        term *= m / j
        total += term
    return min(1.0, total)


def base_stock(S: int, lam: float, lead: int) -> dict[str, float]:
    """Order-up-to ``S``, reviewed every period, Poisson demand ``lam`` per period spread
    uniformly over the period, lead time ``lead`` periods, backorders.

    A unit of demand at time ``t + lead + u`` (``0 <= u < 1``) sees net stock ``S - N``, where
    ``N ~ Poisson(lam (lead + u))`` is the demand since the order placed at ``t`` (every
    earlier order has arrived, no later one has). Averaging over ``u`` with
    ``int_a^b P(N(m) <= j) dm = sum_{i <= j} [F(i; a) - F(i; b)]`` (F: Poisson cdf):

    * fill rate (demand served from stock) ``= (1 / lam) sum_{j < S} [F(j; lam lead) -
      F(j; lam (lead + 1))]``;
    * mean on hand ``= int_0^1 E[(S - N)^+] du``, mean backlog ``= on hand - S + lam (lead +
      1/2)``.
    """
    a, b = lam * lead, lam * (lead + 1)
    diff = [poisson_cdf(j, a) - poisson_cdf(j, b) for j in range(S)]
    fill = sum(diff) / lam
    on_hand = sum(np.cumsum(diff)) / lam if S > 0 else 0.0
    backlog = on_hand - S + lam * (lead + 0.5)
    return {"fill_rate": float(fill), "on_hand": float(on_hand), "backlog": float(backlog)}


def weighted_completion(order: Sequence[int], p: Sequence[float], w: Sequence[float]) -> float:
    """Total weighted completion time of running ``order`` back to back from time 0."""
    t = total = 0.0
    for j in order:
        t += p[j]
        total += w[j] * t
    return total


def wspt_order(p: Sequence[float], w: Sequence[float], jobs: Iterable[int] | None = None):
    """Jobs by decreasing ``w / p`` (Smith's rule), ties by index."""
    jobs = range(len(p)) if jobs is None else jobs
    return sorted(jobs, key=lambda j: (-w[j] / p[j], j))


def best_order(p: Sequence[float], w: Sequence[float], first: int | None = None):
    """Brute force: ``(value, order)`` minimising :func:`weighted_completion` (n <= 8)."""
    rest = [j for j in range(len(p)) if j != first]
    head = [] if first is None else [first]
    return min(
        (weighted_completion(head + list(o), p, w), head + list(o)) for o in permutations(rest)
    )


# ---- measuring -----------------------------------------------------------------------------
class EventHook:
    """Call ``fn()`` after every SimPy event of ``env.sim``, until :meth:`remove`.

    Wraps ``env.sim.step`` (``Environment.run`` calls it too), so it must be attached after
    ``reset`` (which builds a new ``simpy.Environment``).
    """

    def __init__(self, env, fn: Callable[[], None]):
        self.sim = env.sim
        inner = self.sim.step

        def step() -> None:
            inner()
            fn()

        self.sim.step = step

    def remove(self) -> None:
        del self.sim.step  # back to the class's method


class TimeAverage:
    """Integral over time of a piecewise-constant value, fed the value after every event."""

    def __init__(self, now: float, value: float, area: float = 0.0):
        self.t, self.value, self.area = now, value, area

    def update(self, now: float, value: float) -> None:
        self.area += self.value * (now - self.t)
        self.t, self.value = now, value


def _drive(env, act: Callable[[int], int]) -> None:
    """Step ``env`` (array API) until the episode ends; ``act(i)`` for each deciding agent."""
    acts = np.zeros(len(env.possible_agents), dtype=np.int64)
    while not env.episode_over:
        acts[:] = 0
        for i in np.flatnonzero(env.needs_buf):
            acts[i] = act(int(i))
        env.step_arrays(acts)


# ---- loadbalance: one pool ------------------------------------------------------------------
LB_QUEUE = 100_000  # waiting places: never reached, so nothing is blocked (M/M/c, not M/M/c/K)


def loadbalance_run(
    seed: int,
    *,
    servers: int,
    load: float,
    patience: float,
    horizon: float,
    warmup: float,
    background: float = 0.0,
) -> dict[str, float]:
    """One replication of ``loadbalance_v0`` reduced to one pool of ``servers`` servers.

    One dispatcher, one request type, ``skill_spread=0`` (every mean service time is 1), so
    requests arrive as a Poisson stream of rate ``load * servers`` (the dispatcher's stream
    plus the ``background`` share, superposed), are served FCFS by exponential(1) servers and,
    while waiting, abandon after an exponential patience of mean ``patience``. The dispatcher
    always routes to the pool.

    Every request is followed from the pool's ``queue`` and ``users``:
    arrival (``Call.arrived``), start of service, departure or abandonment. Per-request
    measures are taken over the requests arriving in ``[warmup, horizon)``; FCFS makes a
    request's wait depend on earlier requests only, so there is no end effect. Little's law
    is taken over the whole run, from the empty start to the empty end.
    """
    env = make(
        "loadbalance_v0", n_dispatchers=1, n_pools=1, n_types=1, servers_range=(servers, servers),
        queue_capacity=LB_QUEUE, skill_spread=0.0, load=load, background=background,
        patience=patience, horizon=horizon, invalid_action="raise",
    )  # fmt: skip
    env.reset_arrays(seed)
    model, sim = env.model, env.sim
    pool = model.pools[0]
    start = sim.now
    if start >= warmup:
        raise ValueError(f"the first decision came at t={start}, after the warm-up {warmup}")
    first_seen = sum(model.served) + sum(model.abandoned) == 0  # nobody left before the hook
    rec: dict = {}  # call -> [arrived, service start or None, end or None, abandoned]
    for call in pool.users:
        rec[call] = [call.arrived, None, None, False]  # start unknown (before the hook)
    for call in pool.queue:
        rec[call] = [call.arrived, None, None, False]
    queue_area = TimeAverage(start, len(pool.queue))
    system_area = TimeAverage(start, model.in_system)
    # the queue's integral before the hook: waits already booked + waits so far of those queued
    queue_area.area = model.total_wait + sum(start - c.arrived for c in pool.queue)
    system_area.area = sum(start - c.arrived for c in (*pool.users, *pool.queue))
    state = {"queue": set(pool.queue), "users": set(pool.users), "mismatch": 0}

    def after_event() -> None:
        now = sim.now
        queue, users = set(pool.queue), set(pool.users)
        for call in queue - state["queue"]:
            if call not in rec:
                rec[call] = [call.arrived, None, None, False]
        for call in users - state["users"]:
            r = rec.get(call)
            if r is None:  # served at once
                rec[call] = [call.arrived, now, None, False]
            else:
                r[1] = now
        for call in state["users"] - users:
            rec[call][2] = now
        for call in state["queue"] - queue - users:
            r = rec[call]
            r[2], r[3] = now, True
        state["queue"], state["users"] = queue, users
        if model.in_system != len(queue) + len(users):
            state["mismatch"] += 1
        queue_area.update(now, len(queue))
        system_area.update(now, model.in_system)

    hook = EventHook(env, after_event)
    _drive(env, lambda i: 1)  # action 1: pool 0, the only pool
    hook.remove()
    end = sim.now
    queue_area.update(end, 0)
    system_area.update(end, 0)

    window = [r for r in rec.values() if warmup <= r[0] < horizon]
    waits = [(r[2] if r[3] else r[1]) - r[0] for r in window]
    arrivals = sum(model.arrivals)
    sojourn = sum(r[2] - r[0] for r in rec.values())
    return {
        "p_wait": float(np.mean([w > 0 for w in waits])),
        "mean_wait": float(np.mean(waits)),
        "p_abandon": float(np.mean([r[3] for r in window])),
        "requests": len(window),
        # Little's law, whole run: L = lambda W for the queue and for the system
        "time": end,
        "arrivals": arrivals,
        "blocked": sum(model.blocked),
        "queue_area": queue_area.area,
        "total_wait": model.total_wait,  # the model's own counter
        "system_area": system_area.area,
        "total_sojourn": sojourn if first_seen else math.nan,
        "abandoned_seen": sum(r[3] for r in rec.values()),
        "abandoned": sum(model.abandoned),
        "served": sum(model.served),
        "in_system_mismatches": state["mismatch"],
    }


# ---- elevator ------------------------------------------------------------------------------
def elevator_little(seed: int, **params) -> dict[str, float]:
    """Little's law in ``elevator_v0`` (heuristic policy, run until everyone is delivered).

    ``L`` is the time average of ``model.waiting`` (and of waiting + riding: ``waiting +
    sum(car.load)``), sampled after every event; ``lambda W`` is ``model.total_wait`` (and
    ``model.total_journey``) over the run's length. Both integrals start empty at t = 0 and
    end empty, so they agree up to rounding. Passengers present when the hook is attached (at
    the first decision) are counted from their ``arrived`` timestamps.
    """
    env = make("elevator_v0", invalid_action="raise", **params)
    env.reset_arrays(seed)
    model, sim = env.model, env.sim
    heuristic = env_module("elevator_v0").heuristic
    now = sim.now
    waiting = [p for f in model.hall for q in f for p in q]
    riding = [p for car in model.cars for p in car.riders]
    wait = TimeAverage(now, model.waiting, model.total_wait + sum(now - p.arrived for p in waiting))
    inside = TimeAverage(
        now,
        model.waiting + sum(car.load for car in model.cars),
        model.total_journey + sum(now - p.arrived for p in (*waiting, *riding)),
    )

    def after_event() -> None:
        t = sim.now
        wait.update(t, model.waiting)
        inside.update(t, model.waiting + sum(car.load for car in model.cars))

    hook = EventHook(env, after_event)
    _drive(env, lambda i: heuristic(env.obs_buf[i], env.mask_buf[i]))
    hook.remove()
    end = sim.now
    wait.update(end, 0)
    inside.update(end, 0)
    return {
        "time": end,
        "arrived": model.arrived,
        "delivered": model.delivered,
        "wait_area": wait.area,
        "total_wait": model.total_wait,
        "system_area": inside.area,
        "total_journey": model.total_journey,
    }


# ---- ridehail ------------------------------------------------------------------------------
def ridehail_little(seed: int, **params) -> dict[str, float]:
    """Little's law for the open (not yet accepted) requests of ``ridehail_v0``.

    ``L`` is the time average of ``len(model.open)``, sampled after every event. ``W`` is each
    request's time open: from ``Request.time`` to its ``deadline`` if it cancelled (the
    model's own timestamps; the time it left ``open`` is observed too, and must equal the
    deadline), or to the event at which a driver accepted it (observed). The run is driven by
    the heuristic until every driver has logged off; requests still open then are counted up
    to the end (the edge effect, reported as ``open_at_end``).
    """
    env = make("ridehail_v0", invalid_action="raise", **params)
    env.reset_arrays(seed)
    model, sim = env.model, env.sim
    heuristic = env_module("ridehail_v0").heuristic
    start = sim.now
    if model.n_requests != len(model.open):
        raise ValueError("a request left before the hook was attached; its exit time is unknown")
    known = dict(model.open)  # id -> Request, every request seen so far
    exits: dict[int, float] = {}
    area = TimeAverage(start, len(model.open), sum(start - r.time for r in known.values()))
    last = [len(model.open), model.n_requests]

    def after_event() -> None:
        now, open_ = sim.now, model.open
        if len(open_) != last[0] or model.n_requests != last[1]:
            # an event adds a request or removes one (never both), so a change of either count
            # flags every change of the open set
            for rid, req in open_.items():
                if rid not in known:
                    known[rid] = req
            for rid in known.keys() - open_.keys() - exits.keys():
                exits[rid] = now
            last[0], last[1] = len(open_), model.n_requests
        area.update(now, len(open_))

    hook = EventHook(env, after_event)
    _drive(env, lambda i: heuristic(env.obs_buf[i], env.mask_buf[i]))
    hook.remove()
    end = sim.now
    area.update(end, len(model.open))
    cancelled = [r for r in known.values() if r.id in exits and not r.open and
                 exits[r.id] == r.deadline]
    total = sum(min(exits.get(r.id, end), end) - r.time for r in known.values())
    return {
        "time": end,
        "requests": model.n_requests,
        "seen": len(known),
        "open_area": area.area,
        "total_open_time": total,
        "cancelled": model.cancelled,
        "cancelled_at_deadline": len(cancelled),
        "served": model.served,
        "open_at_end": len(model.open),
    }


# ---- jobshop: one machine ---------------------------------------------------------------------
def jobshop_single_machine(seed: int, n_jobs: int, utilization: float = 0.95,
                           at_zero: bool = False) -> dict:
    """``jobshop_v0`` reduced to one machine and single-operation jobs, run with its heuristic.

    With a huge ``utilization`` the jobs arrive within about ``1e-9`` of time 0; with
    ``at_zero`` every job is released at exactly t = 0 (the model's arrival process is
    replaced for this run). Returns the processing times and weights, the order the machine
    ran them in (by ``done_at``) and the model's total weighted completion time
    ``sum w_j done_at_j``.
    """
    from deszoo.envs.jobshop.model import JobShopModel

    def all_at_zero(model):
        for jid in range(model.n_jobs):
            job = model._new_job(jid)
            model.jobs.append(job)
            model._release(job)
        yield model.sim.timeout(0)

    env = make(
        "jobshop_v0", n_machines=1, n_jobs=n_jobs, max_ops=1, flexibility=1.0,
        utilization=utilization, queue_slots=max(8, n_jobs), invalid_action="raise",
    )  # fmt: skip
    original = JobShopModel._arrivals
    if at_zero:
        JobShopModel._arrivals = all_at_zero
    try:
        env.reset_arrays(seed)
    finally:
        JobShopModel._arrivals = original
    heuristic = env_module("jobshop_v0").heuristic
    _drive(env, lambda i: heuristic(env.obs_buf[i], env.mask_buf[i]))
    jobs = env.model.jobs
    p = [job.ops[0][0] for job in jobs]
    w = [job.weight for job in jobs]
    order = sorted(range(len(jobs)), key=lambda j: jobs[j].done_at)
    return {
        "p": p,
        "w": w,
        "order": order,
        "value": sum(job.weight * job.done_at for job in jobs),
        "last_release": max(job.arrival for job in jobs),
    }


# ---- supply chain: one stock point ---------------------------------------------------------------
def supplychain_base_stock(
    seed: int, *, S: int, demand_rate: int, lead: int, periods: int, warmup: int
) -> dict[str, float]:
    """``supplychain_v0`` reduced to one node (``widths=(1,)``) under order-up-to ``S``.

    The node is a factory with production delay ``lead`` periods; demand is Poisson
    ``demand_rate`` per period with no seasonality. ``max_order`` and ``order_levels`` make
    action ``a`` order exactly ``a`` items; every period the policy orders ``S - inventory
    position`` (read from the model). The fill rate is ``model.fill / model.customers`` over
    the periods from ``warmup`` on; on hand and backlog are time averages, sampled after every
    event and every customer (a period's customers are served in one event, each at its own
    arrival time) over the same periods.
    """
    levels = 6 * demand_rate + 1  # order unit max_order * rate / (levels - 1) = 1 item
    env = make(
        "supplychain_v0", widths=(1,), demand_rate=float(demand_rate), seasonality=0.0,
        production_delay=lead, initial_inventory=0.0, order_levels=levels, max_order=6.0,
        position_cap=float(S), max_steps=periods, invalid_action="raise",
    )  # fmt: skip
    env.reset_arrays(seed)
    model, sim = env.model, env.sim
    if model.inventory_position(0) > S:
        raise ValueError(f"initial inventory position {model.inventory_position(0)} > S={S}")
    clipped = 0
    on_hand = backlog = None

    def after_event() -> None:
        if on_hand is not None:
            on_hand.update(sim.now, model.on_hand[0])
            backlog.update(sim.now, model.backlog[0])

    hook = EventHook(env, after_event)
    serve = model._customers

    def customers(r: int, times: list[float]) -> None:
        for now in times:  # one at a time, sampled after each
            serve(r, [now])
            if on_hand is not None:
                on_hand.update(now, model.on_hand[0])
                backlog.update(now, model.backlog[0])

    model._customers = customers
    acts = np.zeros(1, dtype=np.int64)
    start = None
    while not env.episode_over:
        if on_hand is None and sim.now >= warmup:
            start = (sim.now, model.customers[0], model.fill[0])
            on_hand = TimeAverage(sim.now, model.on_hand[0])
            backlog = TimeAverage(sim.now, model.backlog[0])
        want = S - model.inventory_position(0)
        acts[0] = min(max(want, 0), levels - 1)
        clipped += acts[0] != max(want, 0) or not env.mask_buf[0, acts[0]]
        env.step_arrays(acts)
    hook.remove()
    end = sim.now
    on_hand.update(end, model.on_hand[0])
    backlog.update(end, model.backlog[0])
    span = end - start[0]
    customers = model.customers[0] - start[1]
    return {
        "fill_rate": (model.fill[0] - start[2]) / customers,
        "on_hand": on_hand.area / span,
        "backlog": backlog.area / span,
        "customers": customers,
        "clipped": int(clipped),
    }


# ---- the checks of docs/validation.md ----------------------------------------------------
SEEDS = tuple(range(10))  # independent replications (one seed each)
K = 4.0  # the interval is mean +- K standard errors
ERLANG_C = {"servers": 5, "load": 0.7, "patience": 1e9, "horizon": 2500.0, "warmup": 100.0,
            "background": 0.9}
ERLANG_A = {**ERLANG_C, "load": 1.0, "patience": 2.0, "horizon": 1500.0}
LITTLE = {**ERLANG_A, "horizon": 500.0, "warmup": 50.0, "background": 0.0}
BASE_STOCK = {"S": 14, "demand_rate": 4, "lead": 2, "periods": 1500, "warmup": 10}
SMITH = {"n_jobs": 7, "utilization": 1e9}


def replicate(fn: Callable[..., dict], config: dict, seeds: Iterable[int] = SEEDS) -> list[dict]:
    """``fn(seed, **config)`` for every seed."""
    return [fn(seed, **config) for seed in seeds]


def loadbalance_theory(config: dict, servers: int | None = None) -> dict[str, float]:
    """Erlang C (``patience >= 1e6``) or Erlang A for a :func:`loadbalance_run` config.

    ``servers`` overrides the pool size (to show that a wrong theory is rejected).
    """
    c = config["servers"] if servers is None else servers
    lam = config["load"] * config["servers"]
    if config["patience"] >= 1e6:  # abandonment is negligible: P(abandon) ~ E[wait] / patience
        p_wait, wait = erlang_c(c, lam)
        return {"arrival_rate": lam, "p_wait": p_wait, "mean_wait": wait}
    p_wait, p_abandon, wait = erlang_a(c, lam, 1.0, 1.0 / config["patience"])
    return {"arrival_rate": lam, "p_wait": p_wait, "p_abandon": p_abandon, "mean_wait": wait}


def run_checks(seeds: Iterable[int] = SEEDS) -> list[dict]:
    """Every statistical check of ``docs/validation.md``: one row per measured quantity."""
    seeds = list(seeds)
    rows = []

    def add(check: str, quantity: str, theory: float, samples: Iterable[float], test: str):
        est = estimate(samples)
        rows.append({"check": check, "quantity": quantity, "theory": theory, "estimate": est,
                     "pass": est.covers(theory, K), "test": test})

    for name, config, test in (
        ("Erlang C", ERLANG_C, "test_loadbalance_one_pool_is_erlang_c"),
        ("Erlang A", ERLANG_A, "test_loadbalance_one_pool_with_patience_is_erlang_a"),
    ):
        runs = replicate(loadbalance_run, config, seeds)
        theory = loadbalance_theory(config)
        add(name, "arrival_rate", theory["arrival_rate"],
            [r["arrivals"] / config["horizon"] for r in runs], test)
        for q in ("p_wait", "p_abandon", "mean_wait"):
            if q in theory:
                add(name, q, theory[q], [r[q] for r in runs], test)
    runs = replicate(supplychain_base_stock, BASE_STOCK, seeds)
    theory = base_stock(BASE_STOCK["S"], BASE_STOCK["demand_rate"], BASE_STOCK["lead"])
    for q in ("fill_rate", "on_hand", "backlog"):
        test = "test_supplychain_one_node_base_stock"
        add("base stock", q, theory[q], [r[q] for r in runs], test)
    return rows


def markdown_table(rows: list[dict]) -> str:
    """``rows`` of :func:`run_checks` as a Markdown table."""
    lines = [
        "| check | quantity | theory | simulation ± 4 SE | pass | test |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        est = r["estimate"]
        lines.append(
            f"| {r['check']} | {r['quantity']} | {r['theory']:.4f} | {est.mean:.4f} ± "
            f"{K * est.se:.4f} | {'yes' if r['pass'] else 'NO'} | `{r['test']}` |"
        )
    return "\n".join(lines)
