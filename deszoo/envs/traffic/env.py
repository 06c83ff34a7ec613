"""Traffic signal control: each intersection of a grid network chooses its signal phase.

Vehicles enter at the edge of a ``rows x cols`` grid as Poisson streams (each entry's rate
is ``demand`` times a random factor in ``1 +- demand_spread`` drawn per episode), drive
each link in its free-flow time, turn left, straight or right with ``turn_probs`` and
queue at the stop line in a left-turn lane or a through-and-right lane. Links store at
most ``link_capacity`` vehicles, so queues spill back upstream (see ``model.py``). Every
``decision_interval`` seconds each signal that has shown its current phase for at least
``min_green`` seconds (and is not clearing) decides: keep the phase or switch to another
one, which costs a ``clearance`` interval of all-red. Signals in their minimum green or
clearance are not at a decision point in that step.

=================  ======================================================================
Import             ``from deszoo.envs import traffic_v1`` / ``deszoo.make("traffic_v1")``
Agents             ``signal_{k}``, one per intersection, ``k = cols * row + col`` (row 0 is
                   the north edge): one kind, so trainers that group agents by the name
                   before the last ``_`` put every signal in one group
Action space       ``Discrete(5)``: ``0`` keep the current phase (no-op), ``k`` switch to
                   phase ``k-1``: ``0`` N-S through+right, ``1`` N-S protected left, ``2``
                   E-W through+right, ``3`` E-W protected left
Action mask        deciding: ``0`` and every phase but the current one; not deciding
                   (minimum green, clearance, or ``t >= max_time``): only ``0``
Decisions          synchronous: at ``t = 0, dt, 2 dt, ...`` (``dt = decision_interval``)
                   every eligible signal decides in the same step; if none is eligible
                   the step runs on to the next tick
Observation space  ``Box(0, 1, (30,), float32)``
Observation        ``[0:4]`` phase one-hot (during clearance: the phase switched to),
                   ``[4]`` clearing, ``[5]`` green time so far / 60 s, ``[6:14]`` queue
                   per lane / (``link_capacity`` / 2), ``[14:22]`` wait of the lane's
                   first vehicle / 120 s, ``[22:26]`` vehicles moving on each incoming
                   link / ``link_capacity``, ``[26:30]`` vehicles on each outgoing link /
                   ``link_capacity`` (0 where traffic exits). Lanes are ordered
                   ``2 * heading + kind`` (headings N, E, S, W = direction of travel;
                   kind 0 through+right, 1 left), links by heading. Every feature is
                   capped at 1
State              ``Box(0, 1, (1 + 30 * rows * cols,), float32)``: ``[min(t / max_time,
                   1)]`` (``steps / max_steps`` without ``max_time``), then per signal the
                   observation's ``[0:22]`` (phase, clearing, green time, queues, waits),
                   vehicles on each incoming link / ``link_capacity`` (4), and the backlog
                   at the grid's edge feeding each incoming link, ``b / (b +
                   link_capacity)`` (4; 0 inside the grid)
Reward             minus the vehicle-minutes queued at the signal's stop lines (and in the
                   backlog at the grid's edge that feeds it) during the step: the queue
                   length integrated over the step's simulated interval, divided by 60
Termination        none (demand is stationary)
Truncation         ``max_time`` simulated seconds (default 1800) or ``max_steps``
Heuristic          ``heuristic(obs, mask)``: max pressure with hysteresis (queues served
                   minus downstream occupancy; switch only for a clear gain)
=================  ======================================================================

Presets: `small` (2x2 grid, light demand, 900 s), `default` (3x3, 1800 s), `large` (10x10
grid, heavier demand, 1800 s: about 540 SimPy events per step).

Version History:
    v1: agents named ``signal_{k}`` (v0: ``signal_{row}_{col}``, which trainers that group
    agents by the name before the last ``_``, such as TorchRL, split into one group per
    grid row, so parameter sharing and centralised critics were per row). Same model,
    rows and trajectories as v0.
    v0: initial release.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from deszoo.core import NOOP, SimPyParallelEnv
from deszoo.core.groups import discrete
from deszoo.core.params import COMMON, Param, fraction, integer, probabilities, real
from deszoo.envs.traffic.model import N_PHASES, TrafficModel, phase_lanes

__all__ = ["TrafficEnv", "heuristic"]

OBS_DIM = 30
SIGNAL = 30  # state features per signal
GREEN_REF = 60.0  # seconds: green time feature scale
WAIT_REF = 120.0  # seconds: head-of-queue wait feature scale
# For each lane slot (2 * heading + kind): the heading its vehicles mostly leave with
# (straight for the through+right lane, left for the left lane). Used by the heuristic.
_LANE_OUT = [h if kind == 0 else (h + 3) % 4 for h in range(4) for kind in (0, 1)]
_PHASE_SLOTS = [phase_lanes(p) for p in range(N_PHASES)]
_ONE_HOT = np.eye(N_PHASES)  # _ONE_HOT[p]: the phase one-hot of the observation
_ZERO = np.zeros(1)


class TrafficEnv(SimPyParallelEnv):
    """Grid of signalised intersections; see the module docstring."""

    metadata = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "traffic_v1",
        "render_fps": 4,
    }
    params = {
        "rows": Param(3, integer(1, 32), "grid rows; one agent per intersection"),
        "cols": Param(3, integer(1, 32), "grid columns"),
        "demand": Param(0.09, real(0, 10), "mean arrival rate per entry link, vehicles per second"),
        "demand_spread": Param(0.5, fraction(),
                               "each entry's rate is scaled by a factor drawn uniformly from "
                               "[1 - spread, 1 + spread] per episode"),
        "turn_probs": Param((0.15, 0.7, 0.15), probabilities(3),
                            "probabilities of (left, straight, right) at every intersection"),
        "link_time": Param(15.0, real(0, 3600, open_min=True),
                           "free-flow travel time of a link, seconds (each vehicle +-10 %)"),
        "link_capacity": Param(40, integer(1, 1000), "vehicles a link stores, moving and queued"),
        "headway": Param(2.0, real(0, 60, open_min=True),
                         "saturation headway at the stop line, seconds per vehicle"),
        "decision_interval": Param(5.0, real(0.1, 3600),
                                   "seconds between decision ticks (at least 0.1: a step runs "
                                   "through the ticks of a min_green and a clearance, at most "
                                   "42,000 of them)"),
        "min_green": Param(10.0, real(0, 3600),
                           "seconds a phase stays green before the signal may decide again"),
        "clearance": Param(4.0, real(0, 600),
                           "yellow plus all-red seconds when the phase changes"),
        "max_time": COMMON["max_time"].with_default(1800.0),
    }
    ends_by_itself = False  # demand never stops: a max_time or max_steps always
    presets = {
        "small": {"rows": 2, "cols": 2, "demand": 0.06, "max_time": 900.0},
        "default": {},
        "large": {"rows": 10, "cols": 10, "demand": 0.12},
    }

    def _setup(self):
        p = self.p
        self._queue_ref = p.link_capacity / 2.0
        return discrete(self._agent_names(), np.zeros(OBS_DIM), np.ones(OBS_DIM), 1 + N_PHASES)

    def _agent_names(self) -> list[str]:
        return [f"signal_{k}" for k in range(self.p.rows * self.p.cols)]

    def _state_setup(self) -> spaces.Box:
        size = 1 + SIGNAL * self.p.rows * self.p.cols
        return spaces.Box(0.0, 1.0, (size,), dtype=np.float32)

    def _build(self):
        n = len(self.possible_agents)
        # vehicles queued at each signal and their integral over time (plain floats:
        # _on_queue runs whenever a vehicle joins or leaves a queue)
        self._queued, self._area, self._since = [0.0] * n, [0.0] * n, [0.0] * n
        self.model = TrafficModel(self.sim, self.rng, self.p, on_queue=self._on_queue)
        self.model.start()
        # For _observe_all: where each signal's lane features [6:22] are in its array of
        # lane figures (queue per lane, then wait per lane) and the scale of each row,
        # and where its link features [22:30] are in its array of link figures (moving
        # vehicles per link, then vehicles per link, then a zero)
        lanes = np.arange(8 * n).reshape(n, 8)
        self._lane_index = np.hstack((lanes, 8 * n + lanes))
        self._lane_ref = np.array([[self._queue_ref], [WAIT_REF]])
        out_link = np.array(self.model.out_link).reshape(n, 4)
        self._link_index = np.hstack((np.arange(4 * n).reshape(n, 4),
                                      np.where(out_link >= 0, 4 * n + out_link, 8 * n)))
        self._mask_rows = np.ones((N_PHASES, 1 + N_PHASES), dtype=np.int8)
        for ph in range(N_PHASES):
            self._mask_rows[ph, 1 + ph] = 0
        # Each tick, every signal out of its minimum green and clearance decides (until
        # max_time); a switch is applied as soon as it is taken.
        self.every(float(self.p.decision_interval), self._apply, mask=self._mask,
                   values=lambda i: self._phase_of_action, agents=self._eligible,
                   together=False)

    # ---- decisions -------------------------------------------------------------------
    _phase_of_action = [None, *range(N_PHASES)]  # action k: switch to phase k - 1

    def _eligible(self) -> list[int]:
        model, now = self.model, self.sim.now
        max_time = self.p.max_time
        if max_time is not None and now >= max_time:
            return []
        min_green = float(self.p.min_green) - 1e-9
        return [
            i for i in range(model.n_nodes)
            if not model.in_clearance[i] and now - model.green_since[i] >= min_green
        ]

    def _mask(self, i: int) -> np.ndarray:
        return self._mask_rows[self.model.phase[i]]

    def _apply(self, i: int, phase: int | None) -> None:
        if phase is not None:
            self.model.switch(i, phase)

    def _on_queue(self, node: int, delta: int) -> None:
        now = self.sim.now
        self._area[node] += self._queued[node] * (now - self._since[node])
        self._since[node] = now
        self._queued[node] += delta

    def _flush(self, until: float) -> None:
        area = [a + q * (until - t) for a, q, t in zip(self._area, self._queued, self._since,
                                                      strict=True)]
        n = len(area)
        self._area, self._since = [0.0] * n, [until] * n
        self.rew_buf -= (np.array(area) / 60.0).astype(np.float32)

    # ---- observations ----------------------------------------------------------------
    def _observe_all(self, obs: np.ndarray) -> None:
        model, now = self.model, self.sim.now
        obs[:, 0:4] = _ONE_HOT.take(model.phase, axis=0)
        clearing = np.array(model.in_clearance)
        obs[:, 4] = clearing
        green = np.minimum(1.0, (now - np.array(model.green_since)) / GREEN_REF)
        obs[:, 5] = np.where(clearing, 0.0, np.maximum(green, 0.0))
        # lanes: one (2, 8 n) array for all signals (queues, then waits), scaled and
        # capped in place; each signal's 16 features picked by _lane_index
        queues = model.queues
        lanes = np.array([list(map(len, queues)), [now - q[0][2] if q else 0.0 for q in queues]],
                         dtype=np.float64)
        lanes /= self._lane_ref
        np.minimum(lanes, 1.0, out=lanes)
        obs[:, 6:22] = lanes.ravel()[self._lane_index]
        # links: likewise, each signal's 8 features picked by _link_index
        count = np.array(model.count, dtype=np.float64)
        links = np.concatenate((count - model.queued_on, count, _ZERO))
        cap = float(self.p.link_capacity)
        obs[:, 22:30] = np.minimum(1.0, links[self._link_index] / cap)

    def _state_all(self, out: np.ndarray) -> None:
        model, p = self.model, self.p
        n = model.n_nodes
        if p.max_time is not None:
            out[0] = min(1.0, self.sim.now / p.max_time)
        else:
            out[0] = min(1.0, self.num_steps / p.max_steps)
        # Columns 0:22 are the observation's (_observe_all only reads the model here; the
        # env's obs_buf may be stale or zero for agents it no longer observes).
        table = out[1:].reshape(n, SIGNAL)
        self._observe_all(table)
        cap = float(p.link_capacity)
        count = np.array(model.count, dtype=np.float64)
        table[:, 22:26] = np.minimum(1.0, count / cap).reshape(n, 4)
        backlog = np.zeros(4 * n)
        for link, b in model.backlog.items():
            backlog[link] = b
        table[:, 26:30] = (backlog / (backlog + cap)).reshape(n, 4)

    def _render_text(self) -> str:
        model = self.model
        names = "NS ", "NSL", "EW ", "EWL"
        lines = [
            f"traffic t={self.now:7.1f}  in network {model.entered - model.exited}  "
            f"exited {model.exited}  switches {model.switches}"
        ]
        for r in range(model.rows):
            cells = []
            for q in range(model.cols):
                i = r * model.cols + q
                state = "clr" if model.in_clearance[i] else names[model.phase[i]]
                queued = sum(len(model.queues[8 * i + s]) for s in range(8))
                cells.append(f"{state}:{queued:3d}")
            lines.append("  " + "  ".join(cells))
        return "\n".join(lines)

    def _render_rgb(self) -> np.ndarray:
        from deszoo.envs.traffic import render  # matplotlib is needed only for pictures

        return render.draw(self)



def heuristic(obs: np.ndarray, mask: np.ndarray) -> int:
    """Max pressure with hysteresis.

    The pressure of a phase is the queue (plus half the head-of-queue wait) of the lanes
    it serves minus the occupancy of the links those lanes mostly discharge into. Keep
    the current phase unless another phase's pressure exceeds it by a margin.
    """
    if not mask[1:].any():
        return NOOP
    queue = obs[6:14] + 0.5 * obs[14:22]
    room = obs[26:30]
    best, best_p = -np.inf, 0
    current = int(np.argmax(obs[0:4]))
    pressure = [0.0] * N_PHASES
    for p in range(N_PHASES):
        a, b = _PHASE_SLOTS[p]
        pressure[p] = queue[a] + queue[b] - room[_LANE_OUT[a]] - room[_LANE_OUT[b]]
        if mask[1 + p] and pressure[p] > best:
            best, best_p = pressure[p], p
    if best > pressure[current] + 0.1:
        return 1 + best_p
    return NOOP
