"""Elevator bank: each car chooses its next stop when it stops or is idle.

A building of ``n_floors`` floors (floor 0 is the lobby) served by ``n_cars`` cars of
``capacity`` passengers (see :mod:`deszoo.envs.elevator.model`). Passengers arrive as a Poisson
process (``arrival_rate`` per second) with a mix of up-peak, down-peak and inter-floor trips
(``traffic``), and wait in the up or down queue of their floor. A car is at a decision point
when it has stopped at a floor (its riders for that floor have left) and when it is parked and
a new passenger arrives anywhere (event-driven, no clock). It picks a target floor; the waiting
passengers of that direction board and the car travels to the target, or to the nearest
destination of a rider if that comes first. Riders are never carried away from their
destinations: while a car has riders it may only target floors up to the nearest destination in
its direction. Arrivals stop at ``horizon``; the episode ends when everyone is delivered, or
is truncated at ``max_time`` (3 x ``horizon`` by default): after the arrivals stop, cars that
shuttle between floors while someone waits elsewhere would otherwise never end it.

``soft_k(x) = x / (x + k)`` maps counts (``k = 4``) and waiting times in seconds (``k = 60``)
into ``[0, 1)``.

=================  ======================================================================
Import             ``from deszoo.envs import elevator_v2`` / ``deszoo.make("elevator_v2")``
Agents             ``car_0`` .. ``car_{n_cars-1}``
Action space       ``Discrete(n_floors + 1)``: ``0`` no-op (at a decision point: park here
                   until the next passenger arrives), ``k`` targets floor ``k-1``
Action mask        with riders: floors beyond the current one in the riders' direction, up
                   to the nearest rider destination; empty: every other floor, plus ``0``
                   unless people wait on this floor (or arrivals are over and anyone waits
                   anywhere); not deciding: only ``0``
Observation space  ``Box(0, 1, (8 + 7 * n_floors,), float32)``
Observation        ``[floor / (n_floors - 1), moving, going up, going down, load / capacity,
                   parked, deciding, min(t / horizon, 1)]``, then per floor ``[soft_4(waiting
                   up), soft_4(waiting down), soft_60(longest wait up), soft_60(longest wait
                   down), soft_4(own riders for the floor), other cars whose next stop is the
                   floor / (n_cars - 1), free cars nearer than this car / (n_cars - 1)]``;
                   a free car is empty and not moving (ties go to the lower index)
State              ``Box(0, 1, (2 + 8 * n_cars + 5 * n_floors,), float32)``: ``[min(t /
                   horizon, 1), arrivals over]``, then per car ``[floor / (n_floors - 1),
                   next stop / (n_floors - 1), moving, going up, going down, load /
                   capacity, parked, deciding]``, then per floor ``[soft_4(waiting up),
                   soft_4(waiting down), soft_60(longest wait up), soft_60(longest wait
                   down), soft_4(riders of every car for the floor)]``
Reward             shared: every car gets minus (passengers waiting in the building +
                   ``ride_weight`` x passengers riding in any car) / ``n_cars``, integrated
                   over the step's simulated interval, in passenger-minutes; with
                   ``ride_weight = 1`` (the default) the cars' rewards sum to minus the
                   passengers' total journey time (wait + ride)
Termination        arrivals are over and every passenger has been delivered
Truncation         ``max_time`` simulated seconds (default 3 x ``horizon``: 5400, 3600 on
                   `small`; set it with ``horizon``) or ``max_steps`` env steps (default
                   20000). The heuristic ends by about 1.03 x ``horizon`` on `small` and
                   `default` (1.4 x on `large`); a policy that shuttles empty cars between
                   floors while someone waits is truncated
Heuristic          ``heuristic(obs, mask)``: collective control. With riders: the nearest
                   rider destination or same-direction hall call on the way. Empty: serve
                   this floor's queue (the longer-waiting direction), else the nearest floor
                   with waiting passengers that no other car is heading to and for which
                   this car is the nearest free car, else park
=================  ======================================================================

Presets: `small` (6 floors, 2 cars, 0.08 passengers per second for 20 minutes), `default`
(12 floors, 4 cars, 0.2 per second for 30 minutes), `large` (120 floors, 64 cars, 3 per
second for 30 minutes; ``max_steps`` 50000; about 11x the work per step of `small`).
``max_time`` is 3 x ``horizon`` on each.

Version History:
    v2: episodes end in bounded simulated time on every policy: ``max_time`` defaults to 3 x
    ``horizon`` (5400 s; 3600 s on `small`), was ``None``. In v1, after the arrivals stopped,
    cars sent back and forth between floors while someone waited elsewhere ran an episode to
    ``max_steps`` (on `small` and `default`, 20000 steps: 38,000 to 135,000 simulated seconds
    under a no-op, a fixed-action or a ping-pong policy, against about 1,200 s and 1,850 s for
    the heuristic; on `large`, 50000 steps: up to 152,000 s against about 2,400 s). Same
    model, actions, observations and rewards as v1, and the same trajectories up to
    ``max_time``.
    v1: a shared reward: each car pays 1/n_cars of every passenger-minute in the building,
    waiting or riding (``ride_weight`` default 1). In v0 a car paid ``ride_weight`` (0.5)
    per minute of its own riders but only 1/n_cars of each waiting passenger-minute, so
    picking people up gained a car nothing on small and lost on default, and independent
    learners had to train on ``ride_weight=0`` (docs/training.md). Same model, actions,
    observations and trajectories as v0.
    v0: initial release (each car: minus waiting passengers / n_cars + ``ride_weight`` x
    its own riders; ``ride_weight`` default 0.5).
"""

from __future__ import annotations

import warnings

import numpy as np
from gymnasium import spaces

from deszoo.core import NOOP, SimPyParallelEnv
from deszoo.core.groups import discrete
from deszoo.core.params import COMMON, Param, integer, real, shares
from deszoo.envs.elevator.model import ElevatorModel

__all__ = ["ElevatorEnv", "heuristic"]

GLOBAL = 8  # car features
FLOOR = 7  # features per floor
CAR = 8  # state features per car
STATE_FLOOR = 5  # state features per floor
K_COUNT, K_WAIT = 4.0, 60.0  # soft scaling of passenger counts and waiting seconds
MINUTE = 60.0


class ElevatorEnv(SimPyParallelEnv):
    """Elevator bank with event-driven car decisions; see the module docstring."""

    metadata = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "elevator_v2",
        "render_fps": 8,
    }
    params = {
        "n_floors": Param(12, integer(2, 500), "floors, lobby included"),
        "n_cars": Param(4, integer(1, 512), "cars, one agent each"),
        "capacity": Param(12, integer(1, 1000), "passengers per car"),
        "arrival_rate": Param(0.2, real(0, 100, open_min=True),
                              "passengers per second in the whole building"),
        "traffic": Param((0.4, 0.4, 0.2), shares(3),
                         "shares of up-peak (lobby to an upper floor), down-peak (an upper "
                         "floor to the lobby) and inter-floor trips"),
        "floor_time": Param(1.5, real(0, 3600, open_min=True), "seconds to travel one floor"),
        "stop_time": Param(2.0, real(0, 3600),
                           "extra seconds per trip for acceleration and braking"),
        "door_time": Param(4.0, real(0, 3600), "seconds to open and close the doors at a stop"),
        "board_time": Param(1.0, real(0, 3600), "seconds per passenger boarding or leaving"),
        "horizon": Param(1800.0, real(0, 1e7, open_min=True),
                         "seconds during which passengers arrive"),
        "ride_weight": Param(1.0, real(0, 1e6),
                             "weight of riding time against waiting time in the reward"),
        "max_steps": COMMON["max_steps"].with_default(20000),
        "max_time": COMMON["max_time"].with_default(5400.0),  # 3 x horizon
    }
    presets = {
        "small": {"n_floors": 6, "n_cars": 2, "capacity": 8, "arrival_rate": 0.08,
                  "horizon": 1200.0, "max_time": 3600.0},
        "default": {},
        "large": {"n_floors": 120, "n_cars": 64, "capacity": 20, "arrival_rate": 3.0,
                  "max_steps": 50000},
    }  # fmt: skip

    def _setup(self):
        p = self.p
        if p.max_time is not None and p.max_time < p.horizon:
            warnings.warn(
                f"{self.metadata['name']}: max_time={p.max_time:g} is shorter than "
                f"horizon={p.horizon:g}: every episode is truncated while passengers still "
                f"arrive (max_time defaults to 3 x the default horizon, not to 3 x yours: "
                f"give max_time={3 * p.horizon:g})", stacklevel=2)
        size = GLOBAL + FLOOR * p.n_floors
        names = [f"car_{i}" for i in range(p.n_cars)]
        return discrete(names, np.zeros(size), np.ones(size), p.n_floors + 1)

    def _state_setup(self) -> spaces.Box:
        size = 2 + CAR * self.p.n_cars + STATE_FLOOR * self.p.n_floors
        return spaces.Box(0.0, 1.0, (size,), dtype=np.float32)

    def _build(self):
        p = self.p
        self.model = ElevatorModel(
            self.sim, self.rng, p, self._choose, on_all_done=self.end_episode
        )
        n, n_f = p.n_cars, p.n_floors
        self._targets = [None, *range(n_f)]  # action k: park (0) or floor k - 1
        self._mask = np.zeros(self.n_actions, dtype=np.int8)
        floors = np.arange(n_f)
        self._distance_n = np.abs(floors[:, None] - floors) * n  # (floor, floor) distance x n
        self._car_index = np.arange(n)[:, None]  # a column: one index per row of cars
        self._others = 1.0 / max(1, n - 1)
        # Lookup tables, faster than arithmetic on a few small arrays: soft_4 of a rider count
        # (at most the capacity), and k cars / (n_cars - 1) for k = 0 .. n_cars.
        riders = np.arange(p.capacity + 1)
        self._soft_riders = riders / (riders + K_COUNT)
        self._cars_share = np.arange(n + 1) * self._others
        self.model.start()

    # ---- model callbacks ------------------------------------------------------------
    def _choose(self, c: int):
        model = self.model
        car = model.cars[c]
        mask = self._mask
        mask[:] = 0
        f = car.floor
        if car.load:  # committed: no further than the nearest rider destination
            d = car.direction
            call = car.nearest_call(d)
            if d > 0:
                mask[f + 2 : call + 2] = 1
            else:
                mask[call + 1 : f + 1] = 1
        else:
            mask[1:] = 1
            mask[f + 1] = 0
            mask[NOOP] = model.may_park(car)
        return self.decide(c, mask, values=self._targets)

    def _flush(self, until: float) -> None:
        wait, ride = self.model.take_areas(until)
        self.rew_buf -= np.float32((wait + self.p.ride_weight * sum(ride)) / len(ride) / MINUTE)

    # ---- observations ---------------------------------------------------------------
    def _observe_all(self, obs: np.ndarray) -> None:
        """Every car's observation at once (vectorised over cars and floors)."""
        model, p = self.model, self.p
        cars = model.cars
        n, n_f = len(cars), p.n_floors
        now, top, capacity = self.sim.now, n_f - 1, p.capacity
        clock = min(1.0, now / p.horizon)
        # A few cars: the per-car features as plain Python rows, written in one call.
        obs[:, :GLOBAL] = [
            (car.floor / top, car.moving, car.direction > 0, car.direction < 0,
             car.load / capacity, car.parked, deciding, clock)
            for car, deciding in zip(cars, self.needs_buf.tolist(), strict=True)
        ]
        # The floor features. What the cars share (hall queues, cars whose next stop is the
        # floor) is built as one flat row, zero where nobody waits or heads, written into the
        # first car's block and copied whole to the others; then the features of each car are
        # written over it (a strided broadcast of the shared columns cost about 50 us a step on
        # large, 64 cars and 120 floors; converting one flat list is cheaper than a list of
        # per-floor tuples).
        stops = [car.target if car.moving else car.floor for car in cars]
        heading = [0] * n_f
        for stop in stops:
            heading[stop] += 1
        others = self._others
        shared = [0.0] * (FLOOR * n_f)
        for f, (up, down) in enumerate(model.hall):
            if up or down:
                n_up, n_down = model.hall_count[f]
                old_up = now - up[0].arrived if up else 0.0
                old_down = now - down[0].arrived if down else 0.0
                shared[FLOOR * f : FLOOR * f + 4] = (
                    n_up / (n_up + K_COUNT), n_down / (n_down + K_COUNT),
                    old_up / (old_up + K_WAIT), old_down / (old_down + K_WAIT))
        for stop in stops:
            shared[FLOOR * stop + 5] = heading[stop] * others
        obs[0, GLOBAL:] = shared
        obs[1:, GLOBAL:] = obs[0, GLOBAL:]
        floor_block = obs[:, GLOBAL:].reshape(n, n_f, FLOOR)  # a view: rows are contiguous
        floor_block[:, :, 4] = self._soft_riders[model.calls]
        # other cars whose next stop is the floor: not the car itself
        for i, stop in enumerate(stops):
            floor_block[i, stop, 5] = (heading[stop] - 1) * others
        # free cars nearer to the floor than this car (ties to the lower index); 0 if none
        free = [i for i, car in enumerate(cars) if not car.load and not car.moving]
        if free:
            # distance ranks with ties broken by index: key = distance * n + index
            # (take and an in-place add: faster than fancy indexing and a new array here)
            key = self._distance_n.take([car.floor for car in cars], axis=0)
            key += self._car_index
            # [car, floor], one free car at a time (adding a bool array to an int one is slow:
            # each comparison is cast first)
            nearer = (key[free[0]] < key).astype(np.intp)
            for j in free[1:]:
                nearer += (key[j] < key).astype(np.intp)
            floor_block[:, :, 6] = self._cars_share[nearer]

    def _state_all(self, out: np.ndarray) -> None:
        model, p, now = self.model, self.p, self.sim.now
        cars, n_f = model.cars, p.n_floors
        top = n_f - 1
        out[0] = min(1.0, now / p.horizon)
        out[1] = model.arrivals_over
        car = out[2 : 2 + CAR * len(cars)].reshape(len(cars), CAR)
        car[:, 0] = [c.floor / top for c in cars]
        car[:, 1] = [(c.target if c.moving else c.floor) / top for c in cars]
        car[:, 2] = [c.moving for c in cars]
        car[:, 3] = [c.direction > 0 for c in cars]
        car[:, 4] = [c.direction < 0 for c in cars]
        car[:, 5] = [c.load / p.capacity for c in cars]
        car[:, 6] = [c.parked for c in cars]
        car[:, 7] = self.needs_buf
        floor = out[2 + CAR * len(cars) :].reshape(n_f, STATE_FLOOR)
        counts = np.array(model.hall_count, dtype=np.float64)
        oldest = np.array([[now - q[0].arrived if q else 0.0 for q in hall]
                           for hall in model.hall])
        riders = model.calls.sum(axis=0)
        floor[:, 0:2] = counts / (counts + K_COUNT)
        floor[:, 2:4] = oldest / (oldest + K_WAIT)
        floor[:, 4] = riders / (riders + K_COUNT)

    def _render_text(self) -> str:
        m = self.model
        lines = [
            f"elevator t={self.now:8.1f}  waiting {m.waiting}  delivered {m.delivered}/{m.arrived}"
        ]
        for f in range(m.n_floors - 1, -1, -1):
            cars = "".join(
                ("^" if car.direction > 0 else "v" if car.direction < 0 else "o") + f"{car.index}"
                if car.floor == f
                else "  "
                for car in m.cars
            )
            up, down = m.hall_count[f]
            lines.append(f"  {f:3d} | {cars} | up {up:3d}  down {down:3d}")
        return "\n".join(lines)

    def _render_rgb(self) -> np.ndarray:
        from deszoo.envs.elevator import render  # matplotlib is needed only for pictures

        return render.draw(self)



def heuristic(obs: np.ndarray, mask: np.ndarray) -> int:
    """Collective control with nearest-free-car assignment of hall calls (see the docstring)."""
    mask = np.asarray(mask)
    if not mask[1:].any():
        return NOOP
    n_f = len(mask) - 1
    floor = int(round(float(obs[0]) * (n_f - 1)))
    table = np.asarray(obs[GLOBAL:]).reshape(n_f, FLOOR)
    up, down, calls = table[:, 0] > 0, table[:, 1] > 0, table[:, 4] > 0
    allowed = mask[1:] > 0
    offset = np.arange(n_f) - floor
    if calls.any():  # riders aboard: all their destinations lie one way
        d = 1 if calls[floor + 1 :].any() else -1
        hall = (up if d > 0 else down) if obs[4] < 1 else np.zeros(n_f, dtype=bool)
        return _nearest(allowed & (offset * d > 0) & (calls | hall), offset, allowed)
    if up[floor] or down[floor]:  # serve this floor, the longer-waiting direction first
        d = 1 if up[floor] and (not down[floor] or table[floor, 2] >= table[floor, 3]) else -1
        ahead = allowed & (offset * d > 0)
        same = ahead & (up if d > 0 else down)
        if same.any():  # pick up more on the way
            return _nearest(same, offset, allowed)
        far = np.flatnonzero(ahead)  # else run to the end; riders' stops cut the trip short
        return int(far[-1] if d > 0 else far[0]) + 1
    waiting = (up | down) & allowed
    mine = waiting & (table[:, 5] == 0) & (table[:, 6] == 0)
    if mine.any():  # nobody heads there and no free car is nearer
        return _nearest(mine, offset, allowed)
    if mask[NOOP]:
        return NOOP
    return _nearest(waiting, offset, allowed)


def _nearest(pick: np.ndarray, offset: np.ndarray, allowed: np.ndarray) -> int:
    """Action of the nearest floor in ``pick`` (else of the nearest allowed floor)."""
    cand = np.flatnonzero(pick)
    if not len(cand):
        cand = np.flatnonzero(allowed)
    return int(cand[np.argmin(np.abs(offset[cand]))]) + 1
