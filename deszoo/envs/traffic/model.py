"""A grid of signalised intersections as a SimPy model (no RL concepts).

Geometry. ``rows x cols`` intersections ("nodes") on a grid, row 0 at the top. Headings
are indexed clockwise: ``0`` north, ``1`` east, ``2`` south, ``3`` west. Every node has
four incoming links, one per heading of the traffic on it (link ``4 * node + h`` carries
vehicles heading ``h`` into ``node``). Links on the edge of the grid are fed by a source
outside the network; traffic leaving the grid exits.

Traffic. Each source releases vehicles as a Poisson stream. A vehicle drives the link in
its free-flow time, picks its turn (left, straight or right, with fixed probabilities)
and joins the back of a lane at the stop line: the left-turn lane or the
through-and-right lane. A link stores at most ``link_capacity`` vehicles (moving and
queued): a vehicle may only cross the stop line when the link it turns into has room, so
queues spill back into upstream intersections and, at the edge, into a backlog of
vehicles waiting to enter (a spatial-queue model).

Signals. Four phases: ``0`` north-south through and right, ``1`` north-south protected
left, ``2`` east-west through and right, ``3`` east-west protected left. Each lane
discharges its queue one vehicle per ``headway`` seconds while its phase is green and
the downstream link has room. Changing phase starts a clearance interval (yellow plus
all-red) during which no lane discharges.

Events. Sources, vehicles and lanes are small state machines driven by callbacks on
SimPy events rather than SimPy processes (a process costs an event to start, another to
end and a generator switch per event, while a vehicle only waits for two events per
link). Each wait is still one event, created where a process would have created it: a
timeout per source arrival, per link driven and per headway; a zero timeout when a lane
lets a vehicle go (it crosses once the events already due at that instant have run; at
once when none is) and when an idle lane is poked (it looks at its queue likewise; a red
lane that cannot turn green at that instant is not poked).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import simpy

__all__ = ["TrafficModel", "HEADINGS", "N_PHASES", "phase_lanes"]

HEADINGS = ((-1, 0), (0, 1), (1, 0), (0, -1))  # (d_row, d_col) of N, E, S, W
N_PHASES = 4
THROUGH, LEFT = 0, 1
EXIT = -1
_RANDOM_BATCH = 4096


def phase_lanes(p: int) -> tuple[int, int]:
    """Lane slots (``2 * heading + kind``, 0..7) that phase ``p`` serves."""
    axis, kind = p // 2, p % 2
    return 2 * axis + kind, 2 * (axis + 2) + kind


class TrafficModel:
    """The network, its vehicles and its signals.

    ``on_queue(node, delta)`` is called whenever the number of vehicles waiting at a
    node's stop lines (or in the backlog of a source feeding it) changes.
    """

    def __init__(
        self,
        sim: simpy.Environment,
        rng: np.random.Generator,
        p: Any,
        on_queue: Callable[[int, int], None],
    ):
        """``p`` holds the parameters: ``rows``, ``cols``, ``demand``, ``demand_spread``,
        ``turn_probs``, ``link_time``, ``link_capacity``, ``headway``, ``clearance``,
        ``min_green``."""
        self.sim, self.rng, self.p = sim, rng, p
        rows, cols = p.rows, p.cols
        self.rows, self.cols = rows, cols
        self.n_nodes = n = rows * cols
        self.headway, self.clearance = float(p.headway), float(p.clearance)
        self.link_time = float(p.link_time)
        self.on_queue = on_queue
        left, straight, _ = (float(x) for x in p.turn_probs)
        self.p_left, self.p_left_straight = left, left + straight
        link_capacity, demand = int(p.link_capacity), float(p.demand)

        # Links: 4 * node + heading. ``out_link[4 * node + h]`` is the link a vehicle
        # leaving ``node`` with heading ``h`` enters, or EXIT.
        self.cap = [link_capacity] * (4 * n)
        self.count = [0] * (4 * n)  # vehicles on the link, moving or queued
        self.queued_on = [0] * (4 * n)  # of which queued at the stop line
        self.out_link = [EXIT] * (4 * n)
        self.sources: list[int] = []  # links fed from outside the grid
        for node in range(n):
            r, c = divmod(node, cols)
            for h, (dr, dc) in enumerate(HEADINGS):
                rr, cc = r + dr, c + dc
                if 0 <= rr < rows and 0 <= cc < cols:
                    self.out_link[4 * node + h] = 4 * (rr * cols + cc) + h
                ur, uc = r - dr, c - dc  # upstream of the incoming link with heading h
                if not (0 <= ur < rows and 0 <= uc < cols):
                    self.sources.append(4 * node + h)
        # Lanes: 8 * node + 2 * heading + kind.
        self.queues: list[deque] = [deque() for _ in range(8 * n)]
        self.green = [False] * (8 * n)
        self._idle = [True] * (8 * n)  # waiting for a poke (else a look is due)
        self._serve_cb = [partial(self._serve, lane) for lane in range(8 * n)]
        self._blocked: list[list[int]] = [[] for _ in range(4 * n)]  # lanes waiting for room
        # Signals.
        self.phase = [0] * n
        self.in_clearance = [False] * n
        self.green_since = [0.0] * n
        self.clear_until = [0.0] * n  # end of the current (or last) clearance interval
        self.switches = 0
        # Sources.
        spread = float(p.demand_spread)
        self.rates = [
            demand * float(m) for m in rng.uniform(1 - spread, 1 + spread, len(self.sources))
        ]
        self.backlog = {link: 0 for link in self.sources}
        self.entered = 0
        self.exited = 0
        self._u = rng.random(_RANDOM_BATCH)
        self._k = 0

    # ---- set-up --------------------------------------------------------------------
    def start(self) -> None:
        """Random first phases; every signal starts as if its phase had been green for
        ``min_green``, so that every signal may switch at once. Lanes start idle, every
        source draws its first gap."""
        phases = self.rng.integers(0, N_PHASES, self.n_nodes).tolist()
        green_since = -float(self.p.min_green)
        for node, ph in enumerate(phases):
            self.phase[node] = ph
            self.green_since[node] = green_since
            for slot in phase_lanes(ph):
                self.green[8 * node + slot] = True
        for link, rate in zip(self.sources, self.rates, strict=True):
            if rate > 0:
                _Source(self, link, rate)

    # ---- random numbers --------------------------------------------------------------
    def uniform(self) -> float:
        # Hot path: one numpy call per 4096 draws instead of one per draw.
        k = self._k
        if k == _RANDOM_BATCH:
            self._u = self.rng.random(_RANDOM_BATCH)
            k = 0
        self._k = k + 1
        return float(self._u[k])

    # ---- signals ---------------------------------------------------------------------
    def switch(self, node: int, p: int) -> None:
        """Start the clearance interval, then give phase ``p`` green."""
        if self.in_clearance[node] or p == self.phase[node]:
            return
        for slot in phase_lanes(self.phase[node]):
            self.green[8 * node + slot] = False
        self.phase[node] = p
        self.in_clearance[node] = True
        self.switches += 1
        self.clear_until[node] = self.sim.now + self.clearance  # (the timer's time)
        timer = self.sim.timeout(self.clearance)
        timer.callbacks.append(lambda _e, node=node: self._green(node))

    def _green(self, node: int) -> None:
        self.in_clearance[node] = False
        self.green_since[node] = self.sim.now
        for slot in phase_lanes(self.phase[node]):
            lane = 8 * node + slot
            self.green[lane] = True
            self.poke(lane)

    # ---- lanes -----------------------------------------------------------------------
    def poke(self, lane: int) -> None:
        """Something ``lane`` may be waiting for changed: if idle, it looks again once
        the events already due now have run."""
        if self._idle[lane]:
            if not self.green[lane] and self._red_for_now(lane // 8):
                return  # it would look (at this instant), find red and wait again
            self._idle[lane] = False
            simpy.Timeout(self.sim, 0).callbacks.append(self._serve_cb[lane])

    def _red_for_now(self, node: int) -> bool:
        """True if no lane of ``node`` can turn green at the current instant: its
        clearance interval (running, or started by a switch now) ends later."""
        now = self.sim.now
        clear_until = self.clear_until[node] if self.in_clearance[node] else now + self.clearance
        return clear_until > now

    def _serve(self, lane: int, _event: simpy.Event) -> None:
        """Let the first vehicle of ``lane`` go if the lane is green and the link it
        turns into has room (then look again after ``headway``); else go idle."""
        queue = self.queues[lane]
        if not queue or not self.green[lane]:
            self._idle[lane] = True
            return
        vehicle, out, _ = queue[0]
        if out != EXIT:
            count = self.count
            if count[out] >= self.cap[out]:
                self._blocked[out].append(lane)
                self._idle[lane] = True
                return
            count[out] += 1
        queue.popleft()
        self.on_queue(lane // 8, -1)
        sim = self.sim
        if sim.peek() > sim.now:
            # Nothing else is due now: its zero timeout would be the very next event
            # (this call is the last thing its event does), so it crosses at once, after
            # the next look is scheduled as before; one event fewer, same order.
            simpy.Timeout(sim, self.headway).callbacks.append(self._serve_cb[lane])
            vehicle.cross(None)
        else:
            simpy.Timeout(sim, 0).callbacks.append(vehicle.cross)
            simpy.Timeout(sim, self.headway).callbacks.append(self._serve_cb[lane])

    # ---- links -----------------------------------------------------------------------
    def leave(self, link: int) -> bool:
        """A vehicle crossed the stop line at the end of ``link``: free its place. True
        if a vehicle of the backlog feeding ``link`` takes it (it is counted here; the
        caller starts it)."""
        self.count[link] -= 1
        self.queued_on[link] -= 1
        if self.backlog.get(link):
            self.backlog[link] -= 1
            self.on_queue(link // 4, -1)
            self.count[link] += 1
            self.entered += 1
            return True
        blocked = self._blocked[link]
        if blocked:
            self._blocked[link] = []
            for lane in blocked:
                self.poke(lane)
        return False


class _Source:
    """Releases vehicles onto ``link`` as a Poisson stream of ``rate`` per second."""

    __slots__ = ("model", "link", "rate", "gaps", "k")

    def __init__(self, model: TrafficModel, link: int, rate: float):
        self.model, self.link, self.rate = model, link, rate
        self.gaps = model.rng.exponential(1.0 / rate, _RANDOM_BATCH)
        self.k = 0
        self._wait()

    def _wait(self) -> None:
        if self.k == _RANDOM_BATCH:
            self.gaps, self.k = self.model.rng.exponential(1.0 / self.rate, _RANDOM_BATCH), 0
        timer = simpy.Timeout(self.model.sim, float(self.gaps[self.k]))
        timer.callbacks.append(self._arrive)

    def _arrive(self, _event: simpy.Event) -> None:
        """A vehicle arrives: it enters if the link has room and nobody waits before it,
        else it joins the backlog."""
        model, link = self.model, self.link
        self.k += 1
        enters = model.backlog[link] == 0 and model.count[link] < model.cap[link]
        if enters:
            model.count[link] += 1
            model.entered += 1
        else:
            model.backlog[link] += 1
            model.on_queue(link // 4, 1)
        self._wait()
        if enters:  # (after the next arrival is scheduled, as when sources were processes)
            _Vehicle(model, link)


class _Vehicle:
    """A vehicle on ``link``; its methods are the callbacks of the events it waits for."""

    __slots__ = ("model", "link", "next_link", "speed")

    def __init__(self, model: TrafficModel, link: int):
        self.model, self.link, self.next_link = model, link, EXIT
        self.speed = 0.9 + 0.2 * model.uniform()  # drivers differ by +-10 % in free-flow time
        self._drive()

    def _drive(self) -> None:
        model = self.model
        timer = simpy.Timeout(model.sim, model.link_time * self.speed)
        timer.callbacks.append(self._arrive)

    def _arrive(self, _event: simpy.Event) -> None:
        """At the stop line: pick the turn and queue in its lane."""
        model = self.model
        node, h = divmod(self.link, 4)
        u = model.uniform()
        if u < model.p_left:
            kind, new_h = LEFT, (h + 3) % 4
        elif u < model.p_left_straight:
            kind, new_h = THROUGH, h
        else:
            kind, new_h = THROUGH, (h + 1) % 4
        lane = 8 * node + 2 * h + kind
        self.next_link = out = model.out_link[4 * node + new_h]
        model.queues[lane].append((self, out, model.sim.now))
        model.queued_on[self.link] += 1
        model.on_queue(node, 1)
        model.poke(lane)

    def cross(self, _event: simpy.Event) -> None:
        """Across the stop line: drive on into the next link, or leave the grid."""
        model, link = self.model, self.link
        backlog_enters = model.leave(link)
        self.link = self.next_link
        if self.link == EXIT:
            model.exited += 1
        else:
            self._drive()
        if backlog_enters:  # (after this one moved on, as when vehicles were processes)
            _Vehicle(model, link)
