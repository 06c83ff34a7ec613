"""Robotic order picking: a fleet of robots chooses which open orders to pick next.

``n_robots`` robots pick ``n_orders`` orders in a warehouse of ``n_aisles`` one-way narrow
aisles and drop them at ``n_stations`` stations on the front cross-aisle; see ``model.py``.
Every aisle cell and every station is a SimPy ``Resource`` of capacity one, so robots
queue behind each other in an aisle, a picking robot blocks the robots behind it, and
robots queue at stations. Orders arrive as a Poisson stream. A free robot builds a batch
of up to ``capacity`` orders, one decision per order, then picks the whole batch in one
tour. A robot is at a decision point when it is free (at the start, after a drop-off,
after waiting, or after adding an order to a batch that is not full) and at least one
order is open; it picks one of the first ``order_slots`` open orders (arrival order) or
takes the no-op. Decisions are event-driven and asynchronous. The episode length varies:
it terminates when every order has been delivered, or is truncated at ``max_time`` (about
3 x the heuristic's episode by default), since robots that keep waiting never end it.

=================  ======================================================================
Import             ``from deszoo.envs import warehouse_v2`` / ``deszoo.make("warehouse_v2")``
Agents             ``robot_0`` .. ``robot_{n_robots-1}``
Action space       ``Discrete(order_slots + 2)``: ``0`` wait (no-op): wait ``wait_time``
                   seconds, keeping the batch, then decide again; ``1`` go: start the
                   tour with the batch; ``k >= 2`` add the open order in slot ``k-2`` to
                   the batch
Action mask        deciding: ``0``, ``1`` if the batch holds an order, and the occupied
                   slots; not deciding (on a tour, at a station, waiting, or no open
                   order): only ``0``. A robot with a partial batch and no open order
                   left starts its tour
Conflicts          if several robots take the same order in one step, the first robot
                   processed gets it and the others decide again at once (if orders remain)
Observation space  ``Box(0, 1, (9 + n_aisles + n_stations + 7 * order_slots,), float32)``
Observation        ``[busy, x / (n_aisles - 1), depth (0 front cross-aisle .. 1 back),
                   in an aisle, lines left on the tour / (capacity max_lines), orders in
                   its batch / capacity, open orders / order_slots, orders not yet
                   arrived / n_orders, delivered / n_orders]``; per aisle: robots in it or
                   waiting at its entry / min(n_robots, aisle_length); per station: robots
                   dropping or waiting there / n_robots; per order slot: ``[present, lines
                   / max_lines, age / 900 s, estimated time of a tour for the order alone
                   from the robot / est_ref, time it adds to the robot's batch / est_ref
                   (equal to the previous feature when the batch is empty or the robot
                   is not deciding), aisles with lines / max_lines, robots in those aisles
                   / n_robots]``. ``est_ref = 2 n_aisles pitch_time + 2 max_lines
                   (aisle_length cell_time + pitch_time) + max_lines pick_time +
                   drop_time``. Every feature is capped to [0, 1]
State              ``Box(0, 1, (3 + 7 * n_robots + n_aisles + n_stations + 5 * order_slots,),
                   float32)``: ``[open orders / order_slots, orders not yet arrived /
                   n_orders, delivered / n_orders]``, then per robot ``[busy, x /
                   (n_aisles - 1), depth, in an aisle, lines left on the tour / (capacity
                   max_lines), orders in its batch / capacity, deciding]``, the aisle and
                   station loads as observed, then per order slot ``[present, lines /
                   max_lines, age / 900 s, aisles with lines / max_lines, robots in those
                   aisles / n_robots]`` (capped to [0, 1])
Reward             shared: minus the order-minutes in the system (orders arrived and not
                   yet delivered, integrated over the step's simulated interval, / 60),
                   split equally among the robots; summed over robots and the episode it
                   is minus the total order cycle time in minutes
Termination        every order has been delivered
Truncation         ``max_time`` simulated seconds (default 3600; `small` 1200, `large`
                   18000: about 3 x the heuristic's mean episode of 1290 s on `default`,
                   420 s on `small`, 6200 s on `large`; set it with ``n_orders`` or
                   ``utilization``) or ``max_steps`` env steps (default 3000). A policy
                   that keeps waiting is truncated
Heuristic          ``heuristic(obs, mask)``: with an empty batch the shortest estimated
                   tour (congested aisles penalised, old orders favoured), never waiting;
                   with a partial batch add the order that adds least time if that is at
                   most 60 % of its tour alone, else start the tour
=================  ======================================================================

Presets: `small` (3 robots, 4 aisles of 8 cells, 30 orders), `default` (6 robots, 8 aisles
of 12, 120 orders), `large` (96 robots, 64 aisles of 40, 16 stations, 1600 orders, up to 8
lines per order: about 10x the work per step of `small`). ``max_time`` is 1200 s, 3600 s and
18000 s.

Version History:
    v2: episodes end in bounded simulated time on every policy: ``max_time`` defaults to about
    3 x the heuristic's episode (3600 s; 1200 s on `small`, 18000 s on `large`), was
    ``None``. In v1 robots that kept waiting ran an episode to ``max_steps`` (3000 steps,
    30,000 simulated seconds, against about 420 s on `small` and 1,290 s on `default` for
    the heuristic; 40000 steps, 400,000 s, against about 6,200 s on `large`). Same model,
    actions, observations and reward as v1, and the same trajectories up to ``max_time``.
    v1: distinct actions for wait (``0``) and go (``1``). In v0 the no-op meant "wait" for
    a robot with an empty batch but "start the tour" for one with a partial batch, so one
    action had two meanings and a robot could not wait for a better order to add. Same
    model, observations and reward as v0; the action space has one more action.
    v0: initial release (``Discrete(order_slots + 1)``: ``0`` waits with an empty batch,
    starts the tour with a partial one).
"""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
from gymnasium import spaces

from deszoo.core import NOOP, SimPyParallelEnv
from deszoo.core.groups import discrete
from deszoo.core.params import COMMON, Param, integer, real
from deszoo.envs.warehouse.model import WAIT, Order, WarehouseModel
from deszoo.errors import ConfigError

__all__ = ["WarehouseEnv", "heuristic"]

HEAD = 9
SLOT = 7
ROBOT = 7  # state features per robot
ORDER = 5  # state features per order slot
AGE_REF = 900.0  # seconds: order age feature scale


class WarehouseEnv(SimPyParallelEnv):
    """Robot fleet picking orders; see the module docstring."""

    metadata = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "warehouse_v2",
        "render_fps": 8,
    }
    params = {
        "n_robots": Param(6, integer(1, 1024), "robots, one agent each"),
        "n_aisles": Param(8, integer(2, 512),
                          "narrow aisles (one-way, so at least one of each direction)"),
        "aisle_length": Param(12, integer(1, 1000), "cells per aisle"),
        "n_stations": Param(2, integer(1, 256),
                            "drop-off stations on the front cross-aisle (at most n_aisles)"),
        "n_orders": Param(120, integer(1, 100_000), "orders in an episode"),
        "max_lines": Param(4, integer(1, 64), "an order has 1..max_lines lines (uniform)"),
        "skew": Param(0.5, real(0, 10),
                      "aisle popularity: aisle a has weight (a + 1)^(-skew) (0: uniform)"),
        "utilization": Param(1.2, real(0.001, 100),
                             "arrival rate relative to the fleet's capacity when it picks one "
                             "order per tour without blocking; above 1 the robots must batch "
                             "(at least 0.001: orders arrive within finite, bounded time)"),
        "initial_orders": Param(12, integer(0, 100_000),
                                "orders already open at t = 0 (at most n_orders)"),
        "capacity": Param(3, integer(1, 64), "orders a robot carries in one tour"),
        "cell_time": Param(1.0, real(0, 3600, open_min=True),
                           "seconds to move one cell along an aisle"),
        "pitch_time": Param(2.0, real(0, 3600, open_min=True),
                            "seconds to move one aisle sideways on a cross-aisle"),
        "pick_time": Param(5.0, real(0, 3600, open_min=True),
                           "mean seconds per item picked (uniform on 0.5x..1.5x)"),
        "drop_time": Param(10.0, real(0, 3600, open_min=True),
                           "mean seconds to drop one order at a station (uniform 0.8x..1.2x)"),
        "wait_time": Param(10.0, real(0, 3600, open_min=True),
                           "seconds a robot with an empty batch waits on the no-op"),
        "order_slots": Param(8, integer(1, 256), "open orders a robot sees and can choose from"),
        "max_steps": COMMON["max_steps"].with_default(3000),
        "max_time": COMMON["max_time"].with_default(3600.0),  # ~3 x the heuristic's episode
    }
    presets = {
        "small": {
            "n_robots": 3,
            "n_aisles": 4,
            "aisle_length": 8,
            "n_orders": 30,
            "max_lines": 3,
            "initial_orders": 6,
            "max_time": 1200.0,
        },
        "default": {},
        "large": {
            "n_robots": 96,
            "n_aisles": 64,
            "aisle_length": 40,
            "n_stations": 16,
            "n_orders": 1600,
            "max_lines": 8,
            "initial_orders": 192,
            "max_steps": 40000,
            "max_time": 18000.0,
        },
    }

    def _setup(self):
        p = self.p
        if p.n_stations > p.n_aisles:
            raise ConfigError(
                f"{self.metadata['name']}: n_stations={p.n_stations} must not exceed "
                f"n_aisles={p.n_aisles}"
            )
        A, S, K = p.n_aisles, p.n_stations, p.order_slots
        self._est_ref = (
            2 * A * p.pitch_time
            + 2 * p.max_lines * (p.aisle_length * p.cell_time + p.pitch_time)
            + p.max_lines * p.pick_time
            + p.drop_time
        )
        self._slot0 = HEAD + A + S
        dim = self._slot0 + SLOT * K
        # what every robot observes alike, written here and then copied to every row
        self._common = np.zeros(dim)
        self._common_slots = self._common[self._slot0 :].reshape(K, SLOT)
        # _slot_masks[go, m]: the no-op, go (v1, with a partial batch) and the first m slots
        slots = np.tril(np.ones((K + 1, K + 1), dtype=np.int8))
        if self.GO:
            self._slot_masks = np.stack([np.insert(slots, 1, go, axis=1) for go in (0, 1)])
        else:
            self._slot_masks = np.stack([slots, slots])
        self._masks_of = (partial(self._observed_slots, 0), partial(self._observed_slots, 1))
        names = [f"robot_{r}" for r in range(p.n_robots)]
        return discrete(names, np.zeros(dim), np.ones(dim), K + 1 + self.GO)

    def _state_setup(self) -> spaces.Box:
        p = self.p
        size = 3 + ROBOT * p.n_robots + p.n_aisles + p.n_stations + ORDER * p.order_slots
        return spaces.Box(0.0, 1.0, (size,), dtype=np.float32)

    def _build(self):
        # orders in the system and their integral over time (plain floats: _on_count runs
        # at every arrival and delivery)
        self._count, self._area, self._since = 0.0, 0.0, 0.0
        self._snapshot: list[Order] = []
        self.model = model = WarehouseModel(
            self.sim, self.rng, self.p, self._choose, on_count=self._on_count,
            on_all_done=self.end_episode,
        )
        span = (model.n_orders - model.initial_orders) / model.rate  # expected last arrival
        max_time = self.p.max_time
        if max_time is not None and span > max_time and not getattr(self, "_told", False):
            self._told = True
            warnings.warn(
                f"{self.metadata['name']}: the orders arrive over about {span:.0f} s "
                f"(n_orders={model.n_orders}, utilization={self.p.utilization:g}), longer "
                f"than max_time={max_time:g}: episodes are truncated before every order "
                f"arrives; give max_time={3 * span:.0f}, about 3 x that", stacklevel=2)
        # per order, what its slot shows that never changes: where it lies (first and last
        # aisle), its tours alone, and lines and aisles / max_lines
        self._order_rows = np.array([
            [o.lo, o.hi, o.base_asc, o.base_desc, o.lines / model.max_lines,
             len(o.aisles) / model.max_lines]
            for o in model.orders
        ])
        model.start()

    # ---- decisions -------------------------------------------------------------------
    GO = 1  # the go action (v1); slot k is action 1 + GO + k

    def _choose(self, r: int, batch: list[Order]):
        # Action 1 + GO + k means slot k of the open orders as observed at the end of the
        # step (see _observe_all), so the mask is taken then too.
        return self.decide(r, self._masks_of[bool(batch)], values=self._slot_value)

    def _observed_slots(self, go: int) -> np.ndarray:
        return self._slot_masks[go, min(len(self.model.open), self.p.order_slots)]

    def _slot_value(self, action: int) -> Order | str | None:
        if action == NOOP:
            return WAIT if self.GO else None
        if action == self.GO:
            return None
        return self._snapshot[action - 1 - self.GO]

    def _on_count(self, delta: int) -> None:
        now = self.sim.now
        self._area += self._count * (now - self._since)
        self._count += delta
        self._since = now

    def _flush(self, until: float) -> None:
        area = self._area + self._count * (until - self._since)
        self._area, self._since = 0.0, until
        self.rew_buf[self.live] -= np.float32(area / (60.0 * len(self.possible_agents)))

    # ---- observations ----------------------------------------------------------------
    def _observe_all(self, obs: np.ndarray) -> None:
        model, now = self.model, self.sim.now
        n, A, L, K = model.n_robots, model.n_aisles, model.length, self.p.order_slots
        cap, lines_max = model.capacity, model.max_lines
        snap = model.open[:K]
        m = len(snap)
        self._snapshot = snap
        # What every robot sees alike: the orders, the loads, the open orders' slots.
        common, slots = self._common, self._common_slots
        common[6] = min(1.0, len(model.open) / K)
        common[7] = (model.n_orders - model.released) / model.n_orders
        common[8] = model.delivered / model.n_orders
        common[HEAD : HEAD + A] = np.minimum(1.0, np.divide(model.aisle_load, min(n, L)))
        common[HEAD + A : self._slot0] = np.minimum(1.0, np.divide(model.station_load, n))
        slots[:] = 0.0
        if m:
            rows = self._order_rows[[o.id for o in snap]]
            load = model.aisle_load
            slots[:m, 0] = 1.0
            slots[:m, 1] = rows[:, 4]
            slots[:m, 2] = [min(1.0, (now - o.arrival) / AGE_REF) for o in snap]
            slots[:m, 5] = rows[:, 5]
            slots[:m, 6] = [min(1.0, sum(map(load.__getitem__, o.aisles)) / n) for o in snap]
        obs[:] = common
        # Each robot's own state, and each order's tour time from where the robot is.
        x = np.array(model.x)
        y = np.array(model.y)
        obs[:, 0] = model.busy
        obs[:, 1] = x / (A - 1)
        obs[:, 2] = (y + 1.0) / (L + 1.0)
        obs[:, 3] = (y >= 0) & (y < L)
        obs[:, 4] = np.minimum(1.0, np.divide(model.lines_left, cap * lines_max))
        obs[:, 5] = [len(b) / cap for b in model.batch]
        if m:
            ref, pitch = self._est_ref, model.pitch_time
            est = np.minimum(np.abs(x[:, None] - rows[:, 0]) * pitch + rows[:, 2],
                             np.abs(x[:, None] - rows[:, 1]) * pitch + rows[:, 3])
            table = obs[:, self._slot0 :].reshape(n, K, SLOT)
            table[:, :m, 3] = table[:, :m, 4] = np.minimum(1.0, est / ref)
            # Robots building a batch see the extra time each order would add to it.
            for r in self.needs_buf.nonzero()[0].tolist():
                batch = model.batch[r]
                if batch:
                    extra = model.added_times(batch, int(model.x[r]), snap)
                    table[r, :m, 4] = [min(1.0, max(0.0, e / ref)) for e in extra]

    def _state_all(self, out: np.ndarray) -> None:
        model, now = self.model, self.sim.now
        n, A, L, K = model.n_robots, model.n_aisles, model.length, self.p.order_slots
        cap = model.capacity
        out[:3] = (min(1.0, len(model.open) / K), (model.n_orders - model.released)
                   / model.n_orders, model.delivered / model.n_orders)
        robots = out[3 : 3 + ROBOT * n].reshape(n, ROBOT)
        x, y = np.array(model.x), np.array(model.y)
        robots[:, 0] = model.busy
        robots[:, 1] = x / (A - 1)
        robots[:, 2] = (y + 1.0) / (L + 1.0)
        robots[:, 3] = (y >= 0) & (y < L)
        robots[:, 4] = np.minimum(1.0, np.divide(model.lines_left, cap * model.max_lines))
        robots[:, 5] = [len(b) / cap for b in model.batch]
        robots[:, 6] = self.needs_buf
        lo = 3 + ROBOT * n
        out[lo : lo + A] = np.minimum(1.0, np.divide(model.aisle_load, min(n, L)))
        out[lo + A : lo + A + len(model.station_load)] = np.minimum(
            1.0, np.divide(model.station_load, n))
        slots = out[lo + A + len(model.station_load) :].reshape(K, ORDER)
        slots[:] = 0.0
        snap = model.open[:K]
        if snap:
            m, load = len(snap), model.aisle_load
            rows = self._order_rows[[o.id for o in snap]]
            slots[:m, 0] = 1.0
            slots[:m, 1] = rows[:, 4]
            slots[:m, 2] = [min(1.0, (now - o.arrival) / AGE_REF) for o in snap]
            slots[:m, 3] = rows[:, 5]
            slots[:m, 4] = [min(1.0, sum(load[a] for a in o.aisles) / n) for o in snap]

    def _render_text(self) -> str:
        model = self.model
        lines = [
            f"warehouse t={self.now:8.1f}  open {len(model.open)}  delivered "
            f"{model.delivered}/{model.n_orders}"
        ]
        lines.append("  aisles  " + " ".join(f"{v:d}" for v in model.aisle_load))
        lines.append("  station " + " ".join(f"{v:d}" for v in model.station_load))
        for r in range(model.n_robots):
            state = "busy" if model.busy[r] else "free"
            lines.append(f"  robot_{r}: {state} x={model.x[r]:4.0f} y={model.y[r]:4.0f}")
        return "\n".join(lines)

    def _render_rgb(self) -> np.ndarray:
        from deszoo.envs.warehouse import render  # matplotlib is needed only for pictures

        return render.draw(self)



def heuristic(obs: np.ndarray, mask: np.ndarray) -> int:
    """Shortest tour first, then batch orders that add little to the tour.

    With an empty batch: the order with the shortest estimated tour, penalising congested
    aisles and favouring old orders (never waits). With a partial batch: add the order
    that adds the least time, if that is at most 60 % of its tour alone; else go.
    """
    return pick(obs, mask, go=1)


def pick(obs: np.ndarray, mask: np.ndarray, go: int) -> int:
    """:func:`heuristic` for the action layout with (``go=1``, v1) or without a go action."""
    first = 1 + go  # the action of slot 0
    if not mask[first:].any():
        return NOOP
    k = len(mask) - first
    table = np.asarray(obs[len(obs) - SLOT * k :], dtype=np.float64).reshape(k, SLOT)
    illegal = mask[first:] == 0
    if obs[5] == 0:
        score = table[:, 3] + 0.5 * table[:, 6] - 0.3 * table[:, 2]
        score[illegal] = np.inf
        return int(np.argmin(score)) + first
    extra = table[:, 4].copy()
    extra[illegal] = np.inf
    j = int(np.argmin(extra))
    return j + first if extra[j] <= 0.6 * table[j, 3] else (go or NOOP)
