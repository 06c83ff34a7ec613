"""Multi-echelon supply chain (the beer game, generalised) as a SimPy model (no RL concepts).

Echelon 0 holds the retailers, the last echelon the factories; ``widths[l]`` nodes sit at
echelon ``l`` and widths do not grow upstream. Node ``j`` of echelon ``l`` buys from node
``j * widths[l+1] // widths[l]`` of echelon ``l + 1``; factories produce from unlimited raw
material. Customers arrive at each retailer as a Poisson process (rate per period
``demand_rate``, optionally seasonal) and take one unit each; unmet demand is backlogged.

Once per period each node places an order (:meth:`SupplyChainModel.place_order`). An order
reaches the supplier after ``order_delay`` periods (a factory's production order starts at
once); the supplier ships what it has on hand and backlogs the rest, which it ships first
(first come, first served) as stock comes in. Shipments travel ``ship_delay`` periods;
production takes ``production_delay`` periods. Holding and backlog costs accrue continuously
per unit and period.

All logistics happen at integer times (orders are placed at period boundaries, so receipts and
shipments land on them too); customers arrive in between. The chain starts in a steady state:
``initial_inventory`` periods of mean demand on hand and every pipeline filled with one period
of mean demand per period of lead time.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict, deque
from typing import Any

import numpy as np
import simpy
from simpy.events import URGENT

__all__ = ["SupplyChainModel", "FORECAST_ALPHA"]

FORECAST_ALPHA = 0.2  # smoothing of each node's demand forecast (exponential smoothing)
_INF = float("inf")


class _UrgentTimeout(simpy.Event):
    """A timeout that runs before the ordinary events of its instant (built as SimPy builds
    its ``Timeout`` and the stop event of ``run(until=...)``)."""

    def __init__(self, sim: simpy.Environment, delay: float):
        super().__init__(sim)
        self._ok, self._value = True, None
        sim.schedule(self, URGENT, delay)


class SupplyChainModel:
    """The chain. ``p`` holds the parameters (``widths``, ``demand_rate`` customers per
    period per retailer, ``seasonality`` amplitude of the seasonal factor ``1 + a sin(2 pi t /
    season)``, ``season``, ``order_delay``, ``ship_delay``, ``production_delay``,
    ``initial_inventory`` periods of mean demand on hand at the start, ``holding_cost`` per
    unit on hand and period, ``backlog_cost`` per unit backlogged and period). Per-node lists
    are indexed echelon-major, retailers first."""

    def __init__(self, sim: simpy.Environment, rng: np.random.Generator, p: Any):
        self.sim, self.rng, self.p = sim, rng, p
        # plain numbers, read on the hot path (the parameters may be ints)
        self.widths: tuple[int, ...] = tuple(p.widths)
        self.demand_rate = float(p.demand_rate)
        self.seasonality, self.season = float(p.seasonality), float(p.season)
        self.order_delay, self.ship_delay = p.order_delay, p.ship_delay
        self.production_delay = p.production_delay
        self.initial_inventory = float(p.initial_inventory)
        self.holding_cost, self.backlog_cost = float(p.holding_cost), float(p.backlog_cost)
        # per node, filled by start()
        self.level: list[int] = []
        self.supplier: list[int] = []  # -1 for factories
        self.mean: list[float] = []  # mean demand per period through the node
        self.lead: list[int] = []  # periods from order to delivery
        self.on_hand: list[int] = []
        self.backlog: list[int] = []  # units owed downstream / to customers
        self.on_order: list[int] = []  # ordered, not yet received
        self.last_order: list[int] = []
        self.last_demand: list[float] = []  # demand in the last period
        self.forecast: list[float] = []
        self.variance: list[float] = []  # smoothed squared forecast error
        self.orders_log: list[list[int]] = []
        self.demand_log: list[int] = []  # customer demand per period, chain
        self.period = 0

    def start(self) -> None:
        widths = self.widths
        n = sum(widths)
        offsets = np.concatenate([[0], np.cumsum(widths)]).tolist()
        self.n_nodes = n
        self.level, self.supplier = [], []
        for lvl, w in enumerate(widths):
            for j in range(w):
                self.level.append(lvl)
                if lvl + 1 < len(widths):
                    self.supplier.append(offsets[lvl + 1] + j * widths[lvl + 1] // w)
                else:
                    self.supplier.append(-1)
        retailers_below = [1 if lvl == 0 else 0 for lvl in self.level]
        for i in range(n):  # suppliers have higher indices: one pass accumulates the tree
            if self.supplier[i] >= 0:
                retailers_below[self.supplier[i]] += retailers_below[i]
        self.mean = [self.demand_rate * r for r in retailers_below]
        self.lead = [
            self.production_delay if s < 0 else self.order_delay + self.ship_delay
            for s in self.supplier
        ]
        self.on_hand = [int(round(self.initial_inventory * m)) for m in self.mean]
        self.backlog = [0] * n
        self.on_order = [0] * n
        self.owed: list[deque] = [deque() for _ in range(n)]  # FIFO of [buyer, units]
        self.last_order = [0] * n
        self.last_demand = list(self.mean)
        self.forecast = list(self.mean)
        self.variance = list(self.mean)  # Poisson-like start
        self.acc = [0] * n  # demand received in the running period
        self.orders_log = [[] for _ in range(n)]
        self.demand_log = []
        self.period = 0
        self.customers = [0] * n
        self.fill = [0] * n  # customers served from stock
        self._arrivals: list[list[float]] = []  # per retailer, the running period's customers
        # cost integrals (plain floats: this runs once per customer): each node's cost since
        # the last take_costs, up to cost_t; its cost rate follows from its state (_rate)
        self.cost_area = [0.0] * n
        self.cost_t = [0.0] * n
        self.boundary = 0  # the latest period boundary (the market's event runs first at each)
        # boundary -> the orders and shipments due then, in the order they were scheduled
        self._due: defaultdict[int, list[tuple]] = defaultdict(list)
        # steady-state pipelines: one period of mean demand per period of lead time
        for i in range(n):
            unit = int(round(self.mean[i]))
            s = self.supplier[i]
            transit = self.production_delay if s < 0 else self.ship_delay
            mail = 0 if s < 0 else self.order_delay
            for tau in range(1, transit):  # shipments (or production) under way
                self.on_order[i] += unit
                self._schedule(tau, self._receive, i, unit)
            for tau in range(mail):  # orders in the mail; tau = 0 is handled right now
                self.on_order[i] += unit
                if tau == 0:
                    self._order_arrives(i, unit, count=False)
                else:
                    self._schedule(tau, self._order_arrives, i, unit)
        self.sim.process(self._market())

    # ---- customers ------------------------------------------------------------------
    def _market(self):
        """Poisson customers at every retailer, drawn a period at a time; at each period's
        end, the logistics due then.

        A customer touches nothing but its retailer, and nothing else happens between two
        period boundaries (logistics run at integer times). So a period's customers are
        served together, each at its own arrival time and each retailer's in arrival order,
        by one SimPy event at the period's end that runs before the other events of that
        instant: the same result as one event per customer, at a fraction of the cost. (A
        customer drawn so close to a boundary that its arrival time rounds onto it, a chance
        of about 2**-47 per customer, is served before that instant's other events.)

        The same event then brings every node's cost integral up to the boundary (so the
        logistics, which all run at boundaries, need not) and runs the orders and shipments
        due at that boundary, in the order they were scheduled (:meth:`_schedule`). As one
        SimPy timeout each they would run right there too: after this event (SimPy runs an
        instant's urgent events first) and before the decision clock's timeout of that
        instant, which is scheduled after every one of them (at the previous boundary, once
        the round's orders are placed).
        """
        sim = self.sim
        k = 0
        while True:
            self._draw(k)
            k += 1
            yield _UrgentTimeout(sim, k - sim.now)
            self._serve(_INF)
            self._book_all(sim.now)
            self.boundary = k
            for handle, i, units in self._due.pop(k, ()):
                handle(i, units)

    def _draw(self, k: int) -> None:
        """Draw period ``k``'s customers: each retailer's arrival times, in order."""
        n_retail = self.widths[0]
        factor = 1.0 + self.seasonality * math.sin(2 * math.pi * (k + 0.5) / self.season)
        counts = self.rng.poisson(self.demand_rate * factor, size=n_retail).tolist()
        times = (k + self.rng.random(sum(counts))).tolist()  # retailer 0's, then 1's, ...
        self._arrivals = []
        end = 0
        for count in counts:
            start, end = end, end + count
            self._arrivals.append(sorted(times[start:end]))

    def _serve(self, until: float) -> None:
        """Serve the drawn customers who arrive before ``until``."""
        for r, times in enumerate(self._arrivals):
            if times and times[0] < until:
                j = bisect_left(times, until)  # (the customers before until)
                self._customers(r, times[:j])
                del times[:j]

    def _customers(self, r: int, times: list[float]) -> None:
        """Serve retailer ``r``'s customers arriving at ``times`` (in order), one unit each:
        from stock, else backlogged. (Each customer touches its retailer alone, so the
        retailers may be served one after the other; plain local variables in the loop.)"""
        h, b = self.holding_cost, self.backlog_cost
        on_hand, backlog = self.on_hand[r], self.backlog[r]
        area, last, rate = self.cost_area[r], self.cost_t[r], self._rate(r)
        for now in times:
            area += rate * (now - last)  # the cost integral up to this arrival
            last = now
            if on_hand > 0:
                on_hand -= 1
            else:
                backlog += 1
            rate = h * on_hand + b * backlog
        self.fill[r] += self.on_hand[r] - on_hand  # customers served from stock
        self.customers[r] += len(times)
        self.acc[r] += len(times)
        self.on_hand[r], self.backlog[r] = on_hand, backlog
        self.cost_area[r], self.cost_t[r] = area, last

    # ---- orders and shipments (at period boundaries: no cost to book, see _market) ----
    def place_order(self, i: int, units: int) -> None:
        """Node ``i`` orders ``units`` from its supplier (a factory starts production)."""
        self.last_order[i] = units
        self.orders_log[i].append(units)
        if units <= 0:
            return
        self.on_order[i] += units
        if self.supplier[i] < 0:
            self._schedule(self.production_delay, self._receive, i, units)
        elif self.order_delay == 0:
            self._order_arrives(i, units)
        else:
            self._schedule(self.order_delay, self._order_arrives, i, units)

    def _schedule(self, delay: int, handle, i: int, units: int) -> None:
        """``handle(i, units)`` at the boundary ``delay`` periods from now (run by _market)."""
        self._due[self.boundary + delay].append((handle, i, units))

    def _order_arrives(self, buyer: int, units: int, count: bool = True) -> None:
        """``buyer``'s order of ``units`` reaches its supplier."""
        s = self.supplier[buyer]
        if count:
            self.acc[s] += units
        ship = min(self.on_hand[s], units)  # on hand > 0 means nothing is owed
        if ship:
            self._ship(s, buyer, ship)
        if units > ship:
            self.owed[s].append([buyer, units - ship])
            self.backlog[s] += units - ship

    def _ship(self, s: int, buyer: int, units: int) -> None:
        self.on_hand[s] -= units
        self._schedule(self.ship_delay, self._receive, buyer, units)

    def _receive(self, i: int, units: int) -> None:
        """``units`` items (a shipment, or a factory's production) reach node ``i``."""
        self.on_order[i] -= units
        self.on_hand[i] += units
        if self.level[i] == 0:
            served = min(self.on_hand[i], self.backlog[i])
            self.on_hand[i] -= served
            self.backlog[i] -= served
        else:
            owed = self.owed[i]
            while owed and self.on_hand[i] > 0:
                entry = owed[0]
                ship = min(entry[1], self.on_hand[i])
                self._ship(i, entry[0], ship)
                self.backlog[i] -= ship
                entry[1] -= ship
                if not entry[1]:
                    owed.popleft()

    # ---- bookkeeping -----------------------------------------------------------------
    def _rate(self, i: int) -> float:
        """Node ``i``'s cost per period now."""
        return self.holding_cost * self.on_hand[i] + self.backlog_cost * self.backlog[i]

    def _book_all(self, now: float) -> None:
        """Bring every node's cost integral up to ``now``."""
        area, since = self.cost_area, self.cost_t
        for i in range(self.n_nodes):
            area[i] += self._rate(i) * (now - since[i])
            since[i] = now

    def take_costs(self, t: float) -> list[float]:
        """Each node's holding + backlog cost since the last call, up to time ``t`` (not
        before the latest period boundary)."""
        if t > self.boundary:  # inside a period: only when max_time ends the episode
            self._serve(t)
            self._book_all(t)
        # (at the boundary itself every integral is up to date: the market's event booked it)
        out, self.cost_area = self.cost_area, [0.0] * self.n_nodes
        return out

    def close_period(self) -> None:
        """End the running period: update every node's demand statistics and forecast."""
        a = FORECAST_ALPHA
        self.last_demand, self.acc = self.acc, [0] * self.n_nodes
        forecast, variance = self.forecast, self.variance
        for i, d in enumerate(self.last_demand):
            err = d - forecast[i]
            forecast[i] += a * err
            variance[i] = (1 - a) * variance[i] + a * err * err
        self.demand_log.append(sum(self.last_demand[: self.widths[0]]))
        self.period += 1

    def inventory_position(self, i: int) -> int:
        return self.on_hand[i] + self.on_order[i] - self.backlog[i]

    def inventory_positions(self) -> list[int]:
        """Every node's inventory position (on hand + on order - backlog)."""
        return [a + b - c
                for a, b, c in zip(self.on_hand, self.on_order, self.backlog, strict=True)]

    def bullwhip(self) -> list[float]:
        """Per echelon: variance of its total orders per period / variance of customer demand."""
        demand = np.asarray(self.demand_log, dtype=np.float64)
        periods = min(len(demand), min(len(log) for log in self.orders_log))
        if periods < 2 or demand[:periods].var() == 0:
            return [float("nan")] * len(self.widths)
        base = demand[:periods].var()
        out = []
        for lvl in range(len(self.widths)):
            rows = [
                self.orders_log[i][:periods] for i in range(self.n_nodes) if self.level[i] == lvl
            ]
            out.append(float(np.sum(rows, axis=0).var() / base))
        return out
