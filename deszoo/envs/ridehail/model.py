"""A ride-hailing city as a SimPy model (no RL concepts).

City. ``zones_x x zones_y`` square zones; the mean driving time between zones ``a`` and
``b`` is ``zone_time * (manhattan(a, b) + 0.5)`` and each drive takes that times a random
factor in ``[0.85, 1.25]`` (traffic).

Demand. Ride requests arrive as one Poisson stream of ``demand * n_drivers`` requests per
hour, modulated over the day by ``0.7 + 0.6 sin(pi t / horizon)`` (a mid-day peak), and
stop at ``horizon``. Origins and destinations mix a residential pattern (outer zones) and
a downtown pattern (a Gaussian around the centre): early in the day riders travel from
the outskirts to downtown, late in the day back out (the mix shifts linearly with
``t / horizon``). A request waits at most its patience (uniform on 0.5..1.5 ``patience``)
for a driver to accept it, then cancels.

Drivers. Driver ``i`` logs on at ``shift_start[i]`` in a random zone and wants to log off
at ``shift_end[i]`` (both drawn per episode; every shift ends by ``horizon``). While
logged on a driver is idle in a zone, driving to a pickup and then to the destination,
or repositioning to another zone. Only idle drivers take new work (``assign``: a request
or a zone). A driver whose shift is over logs off as soon as it is idle (at once if
it is idle, else when its trip or repositioning ends) and does not come back.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

__all__ = ["RideHailModel", "Request", "OFF", "IDLE", "BUSY", "MOVING", "GONE"]

OFF, IDLE, BUSY, MOVING, GONE = range(5)
_BATCH = 1024


@dataclass(slots=True)
class Request:
    id: int
    origin: int
    dest: int
    time: float  # when it was made
    deadline: float  # when it cancels
    trip_time: float  # mean driving time origin -> destination
    fare: float  # expected fare
    open: bool = True


class RideHailModel:
    """Zones, requests and drivers.

    Callbacks: ``on_fare(i, amount)`` when driver ``i`` drops a rider off,
    ``on_driving(i, flag)`` when it starts or stops driving, ``on_logon(i)``,
    ``on_logoff(i)`` (for good), ``on_all_gone()`` once every driver has logged off.
    """

    def __init__(
        self,
        sim: simpy.Environment,
        rng: np.random.Generator,
        p: Any,
        on_fare: Callable[[int, float], None] = lambda i, amount: None,
        on_driving: Callable[[int, bool], None] = lambda i, flag: None,
        on_logon: Callable[[int], None] = lambda i: None,
        on_logoff: Callable[[int], None] = lambda i: None,
        on_all_gone: Callable[[], None] = lambda: None,
    ):
        """``p`` holds the parameters: ``zones_x``, ``zones_y``, ``n_drivers``, ``horizon``,
        ``demand``, ``zone_time``, ``patience``, ``base_fare``, ``fare_per_minute``."""
        self.sim, self.rng, self.p = sim, rng, p
        zones_x, zones_y, n_drivers = p.zones_x, p.zones_y, p.n_drivers
        # plain floats, read on the hot path (the parameters may be ints)
        horizon, zone_time = float(p.horizon), float(p.zone_time)
        self.zx, self.zy, self.n_zones = zones_x, zones_y, zones_x * zones_y
        self.n_drivers, self.horizon = n_drivers, horizon
        self.zone_time, self.patience = zone_time, float(p.patience)
        self.base_fare, self.fare_per_minute = float(p.base_fare), float(p.fare_per_minute)
        self.on_fare, self.on_driving = on_fare, on_driving
        self.on_logon, self.on_logoff, self.on_all_gone = on_logon, on_logoff, on_all_gone
        Z = self.n_zones
        zx = np.arange(Z) % zones_x
        zy = np.arange(Z) // zones_x
        self.zone_xy = np.stack([zx, zy], axis=1).astype(np.float64)
        manhattan = np.abs(zx[:, None] - zx[None, :]) + np.abs(zy[:, None] - zy[None, :])
        self.travel = zone_time * (manhattan + 0.5)  # mean driving times, Z x Z
        self._travel = self.travel.tolist()  # the same, as lists: read once per drive
        self.manhattan = manhattan
        cx, cy = (zones_x - 1) / 2, (zones_y - 1) / 2
        d = np.hypot(zx - cx, zy - cy)
        sigma = 0.25 * max(zones_x, zones_y)
        downtown = np.exp(-(d**2) / (2 * sigma**2))
        residential = 0.2 + d / max(d.max(), 1e-9)
        # as lists: one bisect per draw (np.searchsorted's result, without its call cost)
        self._cdf_down = np.cumsum(downtown / downtown.sum()).tolist()
        self._cdf_res = np.cumsum(residential / residential.sum()).tolist()
        self.p_down, self.p_res = downtown / downtown.sum(), residential / residential.sum()
        self.mean_rate = float(p.demand) * n_drivers / 3600.0  # requests per second, day average
        # Shifts: a third of the drivers start at t = 0, the others within the first half.
        start = rng.uniform(0.0, 0.5 * horizon, n_drivers)
        start[rng.random(n_drivers) < 1 / 3] = 0.0
        length = rng.uniform(0.4, 0.8, n_drivers) * horizon
        self.shift_start = start
        self.shift_end = np.minimum(start + length, horizon)
        self.home = rng.integers(0, Z, n_drivers)
        # State, read by observers.
        self.state = [OFF] * n_drivers
        self.zone = self.home.tolist()  # current zone (destination while driving)
        self.free_at = [0.0] * n_drivers  # expected end of the current drive
        self.wants_off = [False] * n_drivers
        self.open: dict[int, Request] = {}
        self.n_requests = self.served = self.cancelled = 0
        self.gone = 0
        self._u = rng.random(_BATCH).tolist()
        self._k = 0

    # ---- helpers ------------------------------------------------------------------------
    def _uniform(self) -> float:
        # Hot path: one numpy call per 1024 draws instead of one per draw (as a list: its
        # items are Python floats already).
        if self._k == _BATCH:
            self._u, self._k = self.rng.random(_BATCH).tolist(), 0
        self._k += 1
        return self._u[self._k - 1]

    def rate_factor(self, t: float) -> float:
        """Demand intensity at time ``t`` relative to the day average (0 after horizon)."""
        if t >= self.horizon:
            return 0.0
        return 0.7 + 0.6 * np.sin(np.pi * t / self.horizon)

    def origin_weights(self, t: float) -> np.ndarray:
        """Probability that a request made at ``t`` starts in each zone."""
        phi = min(1.0, t / self.horizon)
        return (1 - phi) * self.p_res + phi * self.p_down

    def fare(self, trip_time: float) -> float:
        return self.base_fare + self.fare_per_minute * trip_time / 60.0

    # ---- processes ---------------------------------------------------------------------
    def start(self) -> None:
        sim = self.sim
        for i in range(self.n_drivers):
            sim.process(self._shift(i))
        sim.process(self._requests())

    def _shift(self, i: int):
        sim = self.sim
        start, end = float(self.shift_start[i]), float(self.shift_end[i])
        if start > 0:
            yield sim.timeout(start)
        self.state[i] = IDLE
        self.on_logon(i)
        yield sim.timeout(end - start)
        self.wants_off[i] = True
        if self.state[i] == IDLE:
            self._log_off(i)

    def _log_off(self, i: int) -> None:
        self.state[i] = GONE
        self.gone += 1
        self.on_logoff(i)
        if self.gone == self.n_drivers:
            self.on_all_gone()

    def _requests(self):
        sim, rng = self.sim, self.rng
        peak = self.mean_rate * 1.3  # thinning bound: the rate factor is at most 1.3
        if peak <= 0:
            return
        gaps = rng.exponential(1.0 / peak, _BATCH)
        k = 0
        rid = 0
        while True:
            if k == _BATCH:
                gaps, k = rng.exponential(1.0 / peak, _BATCH), 0
            yield sim.timeout(float(gaps[k]))
            k += 1
            now = sim.now
            if now >= self.horizon:
                return
            if self._uniform() * 1.3 > self.rate_factor(now):
                continue
            phi = now / self.horizon
            # Morning: outskirts -> downtown; evening: downtown -> outskirts.
            origin_cdf = self._cdf_down if self._uniform() < phi else self._cdf_res
            dest_cdf = self._cdf_res if self._uniform() < phi else self._cdf_down
            origin = min(bisect_left(origin_cdf, self._uniform()), self.n_zones - 1)
            dest = min(bisect_left(dest_cdf, self._uniform()), self.n_zones - 1)
            trip = self._travel[origin][dest]
            wait = self.patience * (0.5 + self._uniform())
            req = Request(rid, origin, dest, now, now + wait, trip, self.fare(trip))
            rid += 1
            self.n_requests += 1
            self.open[req.id] = req
            timer = sim.timeout(wait)
            timer.callbacks.append(lambda _e, req=req: self._expire(req))

    def _expire(self, req: Request) -> None:
        if req.open:
            req.open = False
            del self.open[req.id]
            self.cancelled += 1

    def _drive(self, a: int, b: int) -> float:
        return self._travel[a][b] * (0.85 + 0.4 * self._uniform())

    def assign(self, i: int, job: Request | int | None) -> bool:
        """Idle driver ``i`` accepts request ``job``, drives empty to zone ``job`` (an int) or
        stays (``None``); False if that is not possible."""
        if job is None:
            return False
        if isinstance(job, Request):
            return self.dispatch(i, job)
        return self.reposition(i, job)

    def dispatch(self, i: int, req: Request) -> bool:
        """Idle driver ``i`` accepts open request ``req``; False if that is not possible."""
        if self.state[i] != IDLE or not req.open:
            return False
        req.open = False
        del self.open[req.id]
        self.state[i] = BUSY
        pickup = self._drive(self.zone[i], req.origin)
        ride = self._drive(req.origin, req.dest)
        self.zone[i] = req.dest
        self.free_at[i] = self.sim.now + pickup + ride
        self.on_driving(i, True)
        self._after(pickup, lambda: self._after(ride, lambda: self._drop_off(i, ride)))
        return True

    def reposition(self, i: int, zone: int) -> bool:
        """Idle driver ``i`` drives empty to ``zone``."""
        if self.state[i] != IDLE or zone == self.zone[i]:
            return False
        self.state[i] = MOVING
        t = self._drive(self.zone[i], zone)
        self.zone[i] = zone
        self.free_at[i] = self.sim.now + t
        self.on_driving(i, True)
        self._after(t, lambda: self._arrive(i))
        return True

    def _after(self, delay: float, then: Callable[[], None]) -> None:
        # Hot path: a drive is timeouts with callbacks, not a process (a process adds a start
        # and an end event per drive; the timeouts, their order and their times are the same).
        self.sim.timeout(delay).callbacks.append(lambda _event: then())

    def _drop_off(self, i: int, ride: float) -> None:
        self.on_driving(i, False)
        self.served += 1
        self.on_fare(i, self.fare(ride))
        self._idle(i)

    def _arrive(self, i: int) -> None:
        self.on_driving(i, False)
        self._idle(i)

    def _idle(self, i: int) -> None:
        self.state[i] = IDLE
        if self.wants_off[i]:
            self._log_off(i)
