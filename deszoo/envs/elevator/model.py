"""A bank of elevator cars serving a building, as a SimPy model (no RL concepts).

Passengers arrive as a Poisson process; each is an up-peak trip (lobby to an upper floor), a
down-peak trip (an upper floor to the lobby) or an inter-floor trip, in the proportions
``traffic``. A passenger waits in the up or down queue of the origin floor (first come, first
served) until a car going that way takes them.

Each car is a process. At a stop the riders for that floor leave, then the car asks
``choose(c)`` for its next target: the returned event's value is ``None`` to park (wait, doors
open, until a new passenger arrives anywhere in the building) or the target floor. The waiting
passengers of the chosen direction board (up to the capacity), the doors take ``door_time``
plus ``board_time`` per passenger in or out, and the car travels nonstop to the target, or to
the nearest destination of a rider if that comes first. Travel takes ``floor_time`` per floor
plus ``stop_time`` per trip (acceleration and braking); the position is updated at every floor
passed. Cars start parked on random floors. Arrivals stop at ``horizon``; parked cars are then
woken once, and the model reports ``on_all_done`` when every passenger has been delivered.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

__all__ = ["Car", "ElevatorModel", "Passenger"]

UP, DOWN = 0, 1  # hall queue index


class Passenger:
    __slots__ = ("origin", "dest", "arrived", "boarded")

    def __init__(self, origin: int, dest: int, arrived: float):
        self.origin = origin
        self.dest = dest
        self.arrived = arrived
        self.boarded = 0.0


class Car:
    __slots__ = (
        "index", "floor", "target", "direction", "moving", "parked", "wake", "riders",
        "calls", "load", "leaving",
    )  # fmt: skip

    def __init__(self, index: int, floor: int, calls: np.ndarray):
        self.index = index
        self.floor = floor
        self.target = floor  # next stop (the current floor when stopped)
        self.direction = 0  # +1 up, -1 down, 0 empty and stopped
        self.moving = False
        self.parked = False
        self.wake: simpy.Event | None = None
        self.riders: list[Passenger] = []
        self.calls = calls  # riders per destination floor (a row of the model's ``calls``)
        self.load = 0
        self.leaving = 0  # riders who left at the last stop (for the door time)

    def nearest_call(self, direction: int) -> int:
        """Nearest destination of a rider from the current floor in ``direction`` (-1 if none)."""
        calls, f = self.calls, self.floor
        if direction > 0:
            ahead = calls[f + 1 :].nonzero()[0]
            return f + 1 + int(ahead[0]) if len(ahead) else -1
        behind = calls[:f].nonzero()[0]
        return int(behind[-1]) if len(behind) else -1


class ElevatorModel:
    """The building. ``p`` holds the parameters (``n_floors``, ``n_cars``, ``capacity``,
    ``arrival_rate`` passengers per second in the whole building, ``traffic`` shares of
    up-peak, down-peak and inter-floor trips, ``floor_time``, ``stop_time``, ``door_time``,
    ``board_time``, ``horizon``); ``choose(c)`` is the event a stopped or woken car waits on:
    its value is the target floor, or ``None`` to park."""

    def __init__(
        self,
        sim: simpy.Environment,
        rng: np.random.Generator,
        p: Any,
        choose: Callable[[int], simpy.Event],
        on_all_done: Callable[[], None] = lambda: None,
    ):
        self.sim, self.rng, self.p = sim, rng, p
        self.n_floors, self.n_cars, self.capacity = p.n_floors, p.n_cars, p.capacity
        # plain floats, read on the hot path (the parameters may be ints)
        self.arrival_rate = float(p.arrival_rate)
        self.traffic = tuple(float(v) for v in p.traffic)
        self.floor_time, self.stop_time = float(p.floor_time), float(p.stop_time)
        self.door_time, self.board_time = float(p.door_time), float(p.board_time)
        self.horizon = float(p.horizon)
        self.choose, self.on_all_done = choose, on_all_done
        self.cars: list[Car] = []
        self.hall: list[tuple[deque, deque]] = []
        self.waiting = 0
        self.arrived = 0
        self.delivered = 0
        self.total_wait = 0.0
        self.total_journey = 0.0
        self.arrivals_over = False

    def start(self) -> None:
        n_f = self.n_floors
        floors = self.rng.integers(0, n_f, size=self.n_cars).tolist()
        # riders per car and destination floor, one array: observers read every car at once
        self.calls = np.zeros((self.n_cars, n_f), dtype=np.int64)
        self.cars = [Car(c, floors[c], self.calls[c]) for c in range(self.n_cars)]
        self.hall = [(deque(), deque()) for _ in range(n_f)]
        self.hall_count = [[0, 0] for _ in range(n_f)]
        # passenger-seconds waiting (building) and riding (per car), plain floats
        self.wait_area = 0.0
        self.wait_t = 0.0
        self.ride_area = [0.0] * self.n_cars
        self.ride_t = [0.0] * self.n_cars
        for car in self.cars:
            self.sim.process(self._car(car))
        self.sim.process(self._arrivals())

    # ---- bookkeeping ----------------------------------------------------------------
    def _book_wait(self) -> None:
        now = self.sim.now
        self.wait_area += self.waiting * (now - self.wait_t)
        self.wait_t = now

    def _book_ride(self, car: Car) -> None:
        now = self.sim.now
        c = car.index
        self.ride_area[c] += car.load * (now - self.ride_t[c])
        self.ride_t[c] = now

    def take_areas(self, t: float) -> tuple[float, list[float]]:
        """Passenger-seconds waiting and riding (per car) since the last call, up to ``t``."""
        wait = self.wait_area + self.waiting * (t - self.wait_t)
        self.wait_area, self.wait_t = 0.0, t
        ride = [area + car.load * (t - since)
                for car, area, since in zip(self.cars, self.ride_area, self.ride_t, strict=True)]
        self.ride_area = [0.0] * self.n_cars
        self.ride_t = [t] * self.n_cars
        return wait, ride

    def may_park(self, car: Car) -> bool:
        """An empty car may park unless people wait on its floor, or arrivals are over and
        anyone waits anywhere (so the building always empties)."""
        if car.load:
            return False
        if self.hall_count[car.floor][UP] or self.hall_count[car.floor][DOWN]:
            return False
        return not (self.arrivals_over and self.waiting)

    def _check_done(self) -> None:
        if self.arrivals_over and not self.waiting and not any(car.load for car in self.cars):
            self.on_all_done()

    def _wake_parked(self) -> None:
        for car in self.cars:
            wake = car.wake
            if wake is not None and not wake.triggered:
                wake.succeed()

    # ---- passengers -----------------------------------------------------------------
    def _arrivals(self):
        sim, rng = self.sim, self.rng
        n_f = self.n_floors
        up, down, _ = self.traffic
        total = sum(self.traffic)
        p_up, p_down = up / total, (up + down) / total
        mean_gap = 1.0 / self.arrival_rate
        block: list[float] = []
        while True:
            if len(block) < 4:
                block = rng.random(1024).tolist()
            gap = -mean_gap * math.log(1.0 - block.pop())
            if sim.now + gap > self.horizon:
                break
            yield sim.timeout(gap)
            u = block.pop()
            if u < p_up:
                origin, dest = 0, 1 + min(int(block.pop() * (n_f - 1)), n_f - 2)
            elif u < p_down:
                origin, dest = 1 + min(int(block.pop() * (n_f - 1)), n_f - 2), 0
            else:
                origin = min(int(block.pop() * n_f), n_f - 1)
                dest = min(int(block.pop() * (n_f - 1)), n_f - 2)
                dest += dest >= origin  # any floor but the origin
            way = UP if dest > origin else DOWN
            self._book_wait()
            self.hall[origin][way].append(Passenger(origin, dest, sim.now))
            self.hall_count[origin][way] += 1
            self.waiting += 1
            self.arrived += 1
            self._wake_parked()
        if self.horizon > sim.now:
            yield sim.timeout(self.horizon - sim.now)
        self.arrivals_over = True
        self._wake_parked()
        self._check_done()

    # ---- cars -----------------------------------------------------------------------
    def _park(self, car: Car):
        car.parked = True
        car.direction = 0
        car.wake = self.sim.event()
        yield car.wake
        car.wake = None
        car.parked = False

    def _board(self, car: Car, direction: int) -> int:
        way = UP if direction > 0 else DOWN
        queue = self.hall[car.floor][way]
        room = self.capacity - car.load
        if not queue or room <= 0:
            return 0
        now = self.sim.now
        self._book_wait()
        self._book_ride(car)
        n = 0
        while queue and n < room:
            p = queue.popleft()
            p.boarded = now
            self.total_wait += now - p.arrived
            car.riders.append(p)
            car.calls[p.dest] += 1
            n += 1
        self.hall_count[car.floor][way] -= n
        self.waiting -= n
        car.load += n
        return n

    def _unload(self, car: Car) -> int:
        f = car.floor
        n = int(car.calls[f])
        if not n:
            return 0
        self._book_ride(car)
        now = self.sim.now
        stay = []
        for p in car.riders:
            if p.dest == f:
                self.total_journey += now - p.arrived
            else:
                stay.append(p)
        car.riders = stay
        car.calls[f] = 0
        car.load -= n
        self.delivered += n
        return n

    def _car(self, car: Car):
        sim = self.sim
        yield from self._park(car)
        while True:
            target = yield self.choose(car.index)
            if target is None:
                car.leaving = 0
                yield from self._park(car)
                continue
            d = 1 if target > car.floor else -1
            boarded = self._board(car, d)
            car.direction = d
            dwell = self.door_time + self.board_time * (boarded + car.leaving)
            car.leaving = 0
            call = car.nearest_call(d)
            stop = target if call < 0 or (call - target) * d > 0 else call
            car.target = stop
            yield sim.timeout(dwell)
            car.moving = True
            step = self.floor_time + self.stop_time
            while car.floor != stop:
                yield sim.timeout(step)
                step = self.floor_time
                car.floor += d
            car.moving = False
            car.leaving = self._unload(car)
            if not car.load:
                car.direction = 0
            if car.leaving:
                self._check_done()
