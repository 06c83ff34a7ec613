"""A robotic picking warehouse as a SimPy model (no RL concepts).

Layout. ``n_aisles`` narrow aisles side by side (aisle ``a`` at ``x = a``), each
``aisle_length`` cells deep, between a wide front cross-aisle (``y = -1``) and a wide back
cross-aisle (``y = aisle_length``). Aisles are one-way, alternating: even aisles are
entered at the front and left at the back, odd aisles the other way round, so robots in an
aisle never meet head-on. Every cell of a narrow aisle is a resource of capacity one
(:class:`Spot`): a robot moves into the next cell only when it is free, and a robot picking
in a cell blocks the robots behind it (picker blocking). The cross-aisles are wide (no
blocking); moving one aisle sideways takes ``pitch_time``. ``n_stations`` drop-off stations
on the front cross-aisle are ``Spot``s too.

Orders. ``n_orders`` orders are generated at the start; ``initial_orders`` of them are open
at ``t = 0`` and the rest arrive as a Poisson stream. An order has 1..``max_lines`` lines,
each at a random cell; the aisle is drawn with weights ``(a + 1) ** -skew`` (fast movers
near aisle 0).

Robots. A free robot builds a batch of up to ``capacity`` orders: it asks
``choose(r, batch)`` for an order to add until it gets ``None`` (start the tour; with an
empty batch: wait ``wait_time``), the batch is full or no open order is left; ``WAIT``
waits ``wait_time`` and asks again, keeping a partial batch (with an empty batch it is
``None``'s wait). It then
visits the aisles holding lines of the batch in a sweep (ascending or descending ``x``,
whichever is shorter), traverses each in its one-way direction picking at the cells,
passes through an aisle of the opposite direction when it must change cross-aisle,
returns to the front and drops the batch at the station with the least expected delay
(``drop_time`` per order).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

__all__ = ["WarehouseModel", "Order", "Spot", "FRONT", "BACK", "WAIT"]

WAIT = "wait"  # choose's answer: wait wait_time, keep the batch, then choose again

FRONT, BACK = 0, 1
TRAVEL_MEMO = 4096


@dataclass
class Order:
    id: int
    lines: int
    picks: dict[int, dict[int, int]]  # aisle -> {cell y: items}
    lo: int  # first and last aisle with a line
    hi: int
    base_asc: float = 0.0  # estimated tour time when swept upwards from the front of lo
    base_desc: float = 0.0  # ... swept downwards from the front of hi
    arrival: float = float("inf")
    taken: bool = False
    aisles: list[int] = field(default_factory=list)


class Spot:
    """A place for one robot at a time (an aisle cell, a station), first come, first served.

    ``request`` and ``release`` order robots as ``simpy.Resource(sim, 1)`` does (a waiting
    robot gets the spot when the release is processed) at a fraction of the cost: a request
    and a release per robot and cell are the bulk of the warehouse's work. ``take_now``
    spares the request's event where it cannot change the order of events.
    """

    __slots__ = ("sim", "taken", "waiting")

    def __init__(self, sim: simpy.Environment):
        self.sim = sim
        self.taken = False
        self.waiting: deque[simpy.Event] = deque()

    def request(self) -> simpy.Event:
        """An event that succeeds once the spot is the caller's."""
        event = self.sim.event()
        self.waiting.append(event)
        self._grant()
        return event

    def take_now(self) -> bool:
        """Take the spot without an event if it is free and nothing else is due at this
        instant (a request's event would be the next one processed); else return False."""
        if self.taken or self.waiting or self.sim.peek() <= self.sim.now:
            return False
        self.taken = True
        return True

    def release(self) -> None:
        self.taken = False
        if self.waiting:  # the next robot in line gets it when the release is processed
            done = self.sim.event()
            done.callbacks.append(self._grant)
            done.succeed()

    def _grant(self, _event: simpy.Event | None = None) -> None:
        if not self.taken and self.waiting:
            self.taken = True
            self.waiting.popleft().succeed()


def merge(orders: list[Order]) -> dict[int, dict[int, int]]:
    """The pick lists of several orders as one: aisle -> {cell: items}."""
    picks: dict[int, dict[int, int]] = {}
    for order in orders:
        for a, cells in order.picks.items():
            spot = picks.setdefault(a, {})
            for y, items in cells.items():
                spot[y] = spot.get(y, 0) + items
    return picks


class WarehouseModel:
    """Robots, aisles, stations and orders.

    ``choose(r, batch)`` returns an event whose value is the :class:`Order` (one of
    :attr:`open`) robot ``r`` adds to ``batch``, or ``None`` to stop adding. Callbacks:
    ``on_count(delta)`` when the number of orders in the system changes,
    ``on_all_done()`` when the last order is delivered.
    """

    def __init__(
        self,
        sim: simpy.Environment,
        rng: np.random.Generator,
        p: Any,
        choose: Callable[[int, list[Order]], simpy.Event],
        on_count: Callable[[int], None] = lambda d: None,
        on_all_done: Callable[[], None] = lambda: None,
    ):
        """``p`` holds the parameters: ``n_robots``, ``n_aisles``, ``aisle_length``,
        ``n_stations``, ``n_orders``, ``max_lines``, ``skew``, ``utilization``,
        ``initial_orders``, ``capacity``, ``cell_time``, ``pitch_time``, ``pick_time``,
        ``drop_time``, ``wait_time``."""
        self.sim, self.rng, self.p = sim, rng, p
        n_robots, n_aisles, aisle_length = p.n_robots, p.n_aisles, p.aisle_length
        n_stations, n_orders = p.n_stations, p.n_orders
        self.n_robots, self.n_aisles, self.length = n_robots, n_aisles, aisle_length
        self.n_stations, self.n_orders, self.max_lines = n_stations, n_orders, p.max_lines
        # plain floats, read on the hot path (the parameters may be ints)
        self.cell_time, self.pitch_time = float(p.cell_time), float(p.pitch_time)
        self.pick_time, self.drop_time = float(p.pick_time), float(p.drop_time)
        self.wait_time = float(p.wait_time)
        self.initial_orders = min(p.initial_orders, n_orders)
        self.capacity = p.capacity
        self.choose, self.on_count, self.on_all_done = choose, on_count, on_all_done
        A, L = n_aisles, aisle_length
        self.cells = [[Spot(sim) for _ in range(L)] for _ in range(A)]
        self.path = [list(range(L)) if a % 2 == 0 else list(range(L - 1, -1, -1)) for a in range(A)]
        self.stations = [Spot(sim) for _ in range(n_stations)]
        self.station_x = [min(A - 1, int((s + 0.5) * A / n_stations)) for s in range(n_stations)]
        # via[end][x][a]: aisle to pass through from cross-aisle ``end`` at ``x`` to reach
        # the entry of aisle ``a`` (-1: ``a`` is entered from ``end``).
        self.via = [[[self._via(end, x, a) for a in range(A)] for x in range(A)] for end in (0, 1)]
        self.home = [self._home(x) for x in range(A)]  # aisle back to the front from x
        # aisles from x to the nearest station
        self.to_station = [min(abs(x - sx) for sx in self.station_x) for x in range(A)]
        self.aisle_load = [0] * A  # robots in an aisle or waiting at its entry
        self.station_load = [0] * n_stations  # robots dropping or waiting at a station
        # Robot state, read by observers.
        self.x = [float(self.station_x[r % n_stations]) for r in range(n_robots)]
        self.y = [-1.0] * n_robots  # -1 front cross-aisle, L back cross-aisle
        self.busy = [False] * n_robots
        self.lines_left = [0] * n_robots
        self.batch: list[list[Order]] = [[] for _ in range(n_robots)]
        # Orders.
        weights = (np.arange(A) + 1.0) ** -float(p.skew)
        p_aisle = weights / weights.sum()
        # Aisles are drawn by inverse CDF, the CDF computed once (rng.choice(p=...) draws
        # the same way, but checks p and builds the CDF again on every call).
        self._aisle_cdf = p_aisle.cumsum()
        self._aisle_cdf /= self._aisle_cdf[-1]
        self.orders = [self._new_order(k) for k in range(n_orders)]
        mean_tour = float(np.mean([self.estimate(o, self.station_x[0]) for o in self.orders]))
        self.mean_tour = mean_tour
        self.rate = float(p.utilization) * n_robots / mean_tour
        self.open: list[Order] = []
        self._travel: dict[tuple[frozenset[int], int], float] = {}  # see travel_time
        self.released = 0
        self.delivered = 0
        self._order_event: simpy.Event | None = None

    # ---- geometry ----------------------------------------------------------------------
    def _via(self, end: int, x: int, a: int) -> int:
        if a % 2 == end:  # even aisles are entered from the front (0), odd from the back
            return -1
        # The aisle b of parity ``end`` with the least (|x - b| + |b - a|, |b - a|, b): the
        # neighbour of ``a`` on the side of ``x`` (no detour), the lower one when x == a
        # (one exists: ``a`` has the other parity and there are at least 2 aisles). The
        # search over every such b that this replaces cost O(n_aisles^3) a reset (20 s at
        # 300 aisles); tests/test_fuzz_params.py checks that both agree.
        return a + 1 if x > a or a == 0 else a - 1

    @staticmethod
    def _via_search(n_aisles: int, end: int, x: int, a: int) -> int:
        """:meth:`_via` by search over every aisle (the definition, for the tests)."""
        if a % 2 == end:
            return -1
        cands = [b for b in range(n_aisles) if b % 2 == end]
        return min(cands, key=lambda b: (abs(x - b) + abs(b - a), abs(b - a), b))

    def _home(self, x: int) -> int:
        """Aisle leading from the back cross-aisle to the front, nearest to ``x``."""
        return min(range(1, self.n_aisles, 2), key=lambda b: (abs(x - b), b))

    def plan(
        self, aisles: Iterable[int], x0: int, ascending: bool
    ) -> tuple[list[tuple[int, bool]], float]:
        """Aisles to traverse from the front at ``x0``, each with a pick flag, and travel time.

        The ``aisles`` with lines (a pick list's keys will do) are visited in a sweep; when
        the next one is entered from the other cross-aisle the robot passes through the best
        aisle of the opposite direction (picking there too if it holds lines) and finally
        returns to the front.
        """
        remaining = sorted(aisles, reverse=not ascending)
        end, x, t, route = FRONT, x0, 0.0, []
        traverse = self.length * self.cell_time
        pitch, via = self.pitch_time, self.via
        while remaining:
            b = via[end][x][remaining[0]]
            if b < 0:
                b = remaining[0]
            pick = b in remaining
            if pick:
                remaining.remove(b)
            t += abs(x - b) * pitch + traverse
            route.append((b, pick))
            end, x = 1 - end, b
        if end == BACK:
            b = self.home[x]
            t += abs(x - b) * pitch + traverse
            route.append((b, False))
            x = b
        t += self.to_station[x] * pitch
        return route, t

    def best_plan(
        self, aisles: Iterable[int], x0: int
    ) -> tuple[list[tuple[int, bool]], float]:
        """The shorter of the two sweeps from ``x0``."""
        up, down = self.plan(aisles, x0, True), self.plan(aisles, x0, False)
        return up if up[1] <= down[1] else down

    def tour_time(self, orders: list[Order], x0: int) -> float:
        """Expected time to pick and drop ``orders`` in one tour from ``x0`` (no blocking)."""
        if not orders:
            return 0.0
        aisles = frozenset().union(*(o.aisles for o in orders))
        return self._tour_time(aisles, sum(o.lines for o in orders), len(orders), x0)

    def added_times(self, batch: list[Order], x0: int, orders: list[Order]) -> list[float]:
        """For each of ``orders``: what adding it to ``batch`` adds to ``tour_time``."""
        aisles = frozenset().union(*(o.aisles for o in batch))
        lines, count = sum(o.lines for o in batch), len(batch)
        base = self._tour_time(aisles, lines, count, x0)
        return [
            # (an order within the batch's aisles adds no travel: no new set to hash)
            self._tour_time(aisles if aisles.issuperset(o.aisles) else aisles.union(o.aisles),
                            lines + o.lines, count + 1, x0) - base
            for o in orders
        ]

    def _tour_time(self, aisles: frozenset[int], lines: int, count: int, x0: int) -> float:
        travel = self.travel_time(aisles, x0)
        return travel + lines * self.pick_time + count * self.drop_time

    def travel_time(self, aisles: frozenset[int], x0: int) -> float:
        """Travel time of the shorter sweep through ``aisles`` from ``x0``.

        Remembered (up to ``TRAVEL_MEMO`` tours at a time): robots price the same aisles
        from the same station again and again.
        """
        key = (aisles, x0)
        t = self._travel.get(key)
        if t is None:
            if len(self._travel) >= TRAVEL_MEMO:
                self._travel.clear()
            t = self._travel[key] = self.best_plan(aisles, x0)[1]
        return t

    def estimate(self, order: Order, x0: float) -> float:
        """Expected time of a tour for ``order`` alone from ``x0`` (approximate, cheap)."""
        return min(
            abs(x0 - order.lo) * self.pitch_time + order.base_asc,
            abs(x0 - order.hi) * self.pitch_time + order.base_desc,
        )

    def _new_order(self, k: int) -> Order:
        rng, L = self.rng, self.length
        n = int(rng.integers(1, self.max_lines + 1))
        aisles = self._aisle_cdf.searchsorted(rng.random(n), side="right")
        cells = rng.integers(0, L, size=n)
        picks: dict[int, dict[int, int]] = {}
        for a, y in zip(aisles.tolist(), cells.tolist(), strict=True):
            spot = picks.setdefault(a, {})
            spot[y] = spot.get(y, 0) + 1
        order = Order(k, n, picks, min(picks), max(picks), aisles=sorted(picks))
        fixed = n * self.pick_time + self.drop_time
        order.base_asc = self.plan(picks, order.lo, True)[1] + fixed
        order.base_desc = self.plan(picks, order.hi, False)[1] + fixed
        return order

    # ---- processes -----------------------------------------------------------------------
    def start(self) -> None:
        for r in range(self.n_robots):
            self.sim.process(self._robot(r))
        self.sim.process(self._arrivals())

    def _release(self, order: Order) -> None:
        order.arrival = self.sim.now
        self.open.append(order)
        self.released += 1
        self.on_count(1)
        event = self._order_event
        if event is not None:
            self._order_event = None
            event.succeed()

    def _arrivals(self):
        for order in self.orders[: self.initial_orders]:
            self._release(order)
        rest = self.orders[self.initial_orders :]
        gaps = self.rng.exponential(1.0 / self.rate, len(rest))
        for order, gap in zip(rest, gaps.tolist(), strict=True):
            yield self.sim.timeout(gap)
            self._release(order)

    def _robot(self, r: int):
        sim = self.sim
        batch = self.batch[r]
        while True:
            if not self.open:
                if self._order_event is None:
                    self._order_event = sim.event()
                yield self._order_event
                continue
            while self.open and len(batch) < self.capacity:
                order = yield self.choose(r, batch)
                if order is WAIT and batch:
                    yield sim.timeout(self.wait_time)
                    continue
                if order is None or order is WAIT:
                    break
                if order.taken:  # another robot took it at the same instant
                    continue
                order.taken = True
                self.open.remove(order)
                batch.append(order)
            if not batch:
                yield sim.timeout(self.wait_time)
                continue
            yield from self._tour(r, batch)
            batch.clear()

    def _tour(self, r: int, batch: list[Order]):
        sim, rng = self.sim, self.rng
        x = int(self.x[r])
        picks = merge(batch)
        route, _ = self.best_plan(picks, x)
        self.busy[r] = True
        self.lines_left[r] = sum(o.lines for o in batch)
        for a, pick in route:
            if a != x:
                yield sim.timeout(abs(a - x) * self.pitch_time)
                x = a
                self.x[r] = float(a)
            yield from self._traverse(r, a, picks[a] if pick else None)
        station = min(
            range(self.n_stations),
            key=lambda s: (
                abs(self.station_x[s] - x) * self.pitch_time
                + self.station_load[s] * self.drop_time,
                s,
            ),
        )
        sx = self.station_x[station]
        if sx != x:
            yield sim.timeout(abs(sx - x) * self.pitch_time)
            self.x[r] = float(sx)
        self.station_load[station] += 1
        spot = self.stations[station]
        if not spot.take_now():
            yield spot.request()
        for _ in batch:
            yield sim.timeout(self.drop_time * float(rng.uniform(0.8, 1.2)))
            self.delivered += 1
            self.on_count(-1)
        spot.release()
        self.station_load[station] -= 1
        self.busy[r] = False
        if self.delivered == self.n_orders:
            self.on_all_done()

    def _traverse(self, r: int, a: int, picks: dict[int, int] | None):
        """Drive aisle ``a`` in its one-way direction, picking at the cells in ``picks``."""
        sim, rng = self.sim, self.rng
        cells, path = self.cells[a], self.path[a]
        cell_time = self.cell_time
        self.aisle_load[a] += 1
        if not cells[path[0]].take_now():
            yield cells[path[0]].request()
        last = len(path) - 1
        for k, y in enumerate(path):
            self.y[r] = float(y)
            if picks is not None and y in picks:
                items = picks[y]
                yield sim.timeout(items * self.pick_time * float(rng.uniform(0.5, 1.5)))
                self.lines_left[r] -= items
            if k < last and not cells[path[k + 1]].take_now():
                yield cells[path[k + 1]].request()  # hold this cell until the next is free
            yield sim.timeout(cell_time)  # move on (from the last cell: onto the cross-aisle)
            cells[y].release()
        self.aisle_load[a] -= 1
        self.y[r] = -1.0 if a % 2 == 1 else float(self.length)
