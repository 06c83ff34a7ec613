"""Ride hailing: drivers who log on and off choose requests to accept or zones to go to.

A city of ``zones_x x zones_y`` zones with a day of ``horizon`` seconds of ride requests
(a mid-day peak; riders go from the outskirts downtown early and back out late; each
request cancels after its patience); see ``model.py``. Every driver has a shift drawn per
episode: about a third start at ``t = 0``, the others during the first half of the day, and
every shift ends by ``horizon``. Dispatch is batched: every ``dispatch_interval`` seconds
each idle, logged-on driver decides in the same step whether to accept one of the
``request_slots`` nearest open requests within ``pickup_radius`` zones, to reposition
(drive empty) to another zone, or to stay. Drivers that are driving are not at a
decision point; if no driver is idle at a tick the step runs on to the next tick.

Agents that come and go. All ``n_drivers`` drivers are live agents from ``reset``.
Before its shift starts a driver is never at a decision point: its mask is the no-op
only and its observation says it is off shift (``obs[0] = 0``) and when it starts. When
its shift has ended and it is idle (at once, or when its current trip or repositioning
ends) it logs off for good. By default (``black_death=True``) it stays in ``env.agents``
until the episode ends, observing zeros with the no-op mask, rewarded 0, and is
terminated with everyone when the last driver has logged off: every agent is listed on
every step, which is what TorchRL, SuperSuit's vector envs and SB3 expect. With
``black_death=False`` (``ridehail_v0``'s default) a driver that logs off is terminated
alone (``terminations[agent] = True`` in that step) and leaves ``env.agents``,
PettingZoo's native way; the bridge's arrays (``obs_buf``, ``mask_buf``, ``live``) then
report a zero observation and the no-op mask for it until the episode ends. The episode
terminates when the last driver has logged off.

=================  ======================================================================
Import             ``from deszoo.envs import ridehail_v1`` / ``deszoo.make("ridehail_v1")``
Agents             ``driver_0`` .. ``driver_{n_drivers-1}``; they log off one by one
                   (listed, observing zeros, until the end; see above)
Action space       ``Discrete(1 + request_slots + n_zones)``: ``0`` stay (no-op), ``k`` in
                   ``1..request_slots`` accept the request in slot ``k-1``, ``1 +
                   request_slots + z`` reposition to zone ``z`` (``z = x + zones_x * y``)
Action mask        deciding (idle at a tick): ``0``, the occupied request slots and every
                   zone but the driver's own; not deciding (off shift, driving): only
                   ``0``
Conflicts          if several drivers accept the same request in a step, the lowest
                   index gets it and the others stay idle until the next tick
Observation space  ``Box(0, 1, (9 + 4 * n_zones + 6 * request_slots,), float32)``
Observation        ``[on shift, idle, driving a rider (to pickup or destination),
                   repositioning, t / horizon, shift time left / horizon (0 off shift),
                   time until the shift starts / horizon, x / (zones_x - 1), y / (zones_y
                   - 1)]`` (the zone it is in, or drives to); per zone ``[open requests /
                   count_ref, idle drivers / count_ref, expected requests in the next 10
                   minutes / count_ref, mean driving time from the driver's zone /
                   time_ref]``; per request slot (idle deciding drivers only, nearest
                   pickup first) ``[present, pickup time / time_ref, trip time /
                   time_ref, fare / fare(time_ref), waited / (1.5 patience), expected
                   requests at the destination / count_ref]``. ``count_ref = max(2, 2
                   n_drivers / n_zones)``, ``time_ref = zone_time (zones_x + zones_y -
                   1.5)`` (the longest mean drive). Every feature is capped at 1. A driver
                   that has logged off observes zeros
State              ``Box(0, 1, (1 + 8 * n_drivers + 4 * n_zones,), float32)``: ``[min(t
                   / horizon, 1)]``, then per driver ``[before its shift, idle, driving a
                   rider, repositioning, logged off, shift time left / horizon, x /
                   (zones_x - 1), y / (zones_y - 1)]``, then per zone ``[open requests /
                   count_ref, idle drivers / count_ref, drivers on shift in or driving to
                   it / count_ref, expected requests in the next 10 minutes /
                   count_ref]`` (each capped at 1)
Reward             the fare of each ride at drop-off (``base_fare + fare_per_minute *
                   minutes driven with the rider``) minus ``cost_per_minute`` per minute
                   driven (to pickups, with riders and repositioning), accrued over the
                   step's simulated interval
Termination        the episode, when the last driver has logged off (with
                   ``black_death=False``: also each driver alone when it logs off)
Truncation         ``max_steps`` env steps (default 5000) or ``max_time`` simulated time
Heuristic          ``heuristic(obs, mask)``: accept the nearest request (the better fare on
                   a near tie); with none in reach reposition to a nearby zone with a
                   larger expected shortage of drivers, if clearly better than staying
=================  ======================================================================

Presets: `small` (3x3 zones, 8 drivers, 2 h), `default` (4x4 zones, 30 drivers, 3 h),
`large` (12x12 zones, 400 drivers, pickup radius 3, 3 h).

Vectorizing with SuperSuit: on the default (``black_death=True``) the classic chain
``supersuit.concat_vec_envs_v1(supersuit.pettingzoo_env_to_vec_env_v1(env), ...)`` works
as it is. Leave SuperSuit's own ``black_death_v3`` out: it never reports the end of an
episode, so the chain steps an ended env (``ResetNeededError``). With
``black_death=False`` SuperSuit's vector env refuses the env (its number of agents
varies); see ``docs/compatibility.md``.

Version History:
    v1: ``black_death=True`` by default: a driver who logs off stays listed, observing
    zeros, until the episode ends, so trainers that expect a fixed set of agents
    (TorchRL's ``PettingZooWrapper``, SuperSuit's vector envs, SB3) work on the defaults
    (v0's departures ended TorchRL's episodes at the first log-off and crashed SuperSuit's
    chain). Same model and trajectories as v0 with ``black_death=True``.
    v0: initial release (drivers leave ``env.agents`` when they log off).
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np
from gymnasium import spaces

from deszoo.core import NOOP, Integrator, SimPyParallelEnv
from deszoo.core.groups import discrete
from deszoo.core.params import COMMON, Least, Param, integer, real
from deszoo.envs.ridehail.model import BUSY, GONE, IDLE, MOVING, OFF, Request, RideHailModel
from deszoo.errors import ConfigError

__all__ = ["RideHailEnv", "heuristic"]

HEAD = 9
ZONE = 4
SLOT = 6
DRIVER = 8  # state features per driver
# The longest episode: every shift ends by the horizon, and a ride accepted just before then
# takes at most 2.5 zone_time (zones_x + zones_y) seconds (the pickup and the ride, each at
# most 1.25 zone_time (manhattan distance + 0.5)). While no driver is idle a step runs
# through the dispatch ticks, so there are at most 100,000 ticks in that time.
TICKS = Least(
    "(horizon + 2.5 zone_time (zones_x + zones_y)) / 100,000",
    ("horizon", "zone_time", "zones_x", "zones_y"),
    lambda v: (v["horizon"] + 2.5 * v["zone_time"] * (v["zones_x"] + v["zones_y"])) / 1e5,
    "at most 100,000 dispatch ticks in the longest episode: a step runs through them while "
    "no driver is idle",
)
LOOKAHEAD = 600.0  # seconds: horizon of the expected-demand features
_FAR = 2.0  # a pickup time (scaled) past any in reach: the request is out of reach
# Per driver state (a row each): observation columns 0-3, [on shift, idle, driving a rider,
# repositioning].
_FLAGS = np.zeros((5, 4), dtype=np.float32)
_FLAGS[[IDLE, BUSY, MOVING], 0] = 1.0
_FLAGS[IDLE, 1] = _FLAGS[BUSY, 2] = _FLAGS[MOVING, 3] = 1.0
_ORIGIN = attrgetter("origin")


class RideHailEnv(SimPyParallelEnv):
    """Ride-hailing drivers with shifts; see the module docstring."""

    metadata = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "ridehail_v1",
        "render_fps": 4,
    }
    params = {
        "zones_x": Param(4, integer(1, 32), "city width in zones (at least 2 zones in all)"),
        "zones_y": Param(4, integer(1, 32), "city height in zones"),
        "n_drivers": Param(30, integer(1, 4096), "drivers, one agent each"),
        "horizon": Param(10800.0, real(0, 1e6, open_min=True),
                         "seconds of requests in the day; every shift ends by then"),
        "demand": Param(3.0, real(0, 100), "requests per hour per driver, on average over the day"),
        "zone_time": Param(120.0, real(0, 1e5, open_min=True),
                           "mean seconds to drive one zone further"),
        "patience": Param(300.0, real(0, 1e6, open_min=True),
                          "mean seconds a request waits before it cancels"),
        "base_fare": Param(2.5, real(0, 1e6), "money per ride"),
        "fare_per_minute": Param(1.0, real(0, 1e6), "money per minute with a rider"),
        "cost_per_minute": Param(0.3, real(0, 1e6), "cost per minute driven"),
        "dispatch_interval": Param(30.0, real(0, 1e5, open_min=True, at_least=TICKS),
                                   "seconds between dispatch ticks (a step runs through them "
                                   "while no driver is idle: at most 100,000 in the longest "
                                   "episode)"),
        "request_slots": Param(4, integer(1, 64), "nearest open requests an idle driver sees"),
        "pickup_radius": Param(2, integer(0, 64),
                               "a driver sees requests at most this many zones away"),
        "max_steps": COMMON["max_steps"].with_default(5000),
    }
    presets = {
        "small": {"zones_x": 3, "zones_y": 3, "n_drivers": 8, "horizon": 7200.0},
        "default": {},
        "large": {"zones_x": 12, "zones_y": 12, "n_drivers": 400, "pickup_radius": 3},
    }

    def _setup(self):
        p = self.p
        if p.zones_x * p.zones_y < 2:
            raise ConfigError(f"{self.metadata['name']}: zones_x={p.zones_x} and zones_y="
                              f"{p.zones_y} make 1 zone; the city needs at least 2")
        Z, K = p.zones_x * p.zones_y, p.request_slots
        self._n_zones = Z
        self._count_ref = max(2.0, 2.0 * p.n_drivers / Z)
        self._time_ref = p.zone_time * (p.zones_x + p.zones_y - 1.5)
        # (0 when rides pay nothing, base_fare = fare_per_minute = 0: every fare observed is
        # then 0 / 1)
        self._fare_ref = p.base_fare + p.fare_per_minute * self._time_ref / 60.0 or 1.0
        self._zone0 = HEAD
        self._slot0 = HEAD + ZONE * Z
        dim = self._slot0 + SLOT * K
        names = [f"driver_{i}" for i in range(p.n_drivers)]
        return discrete(names, np.zeros(dim), np.ones(dim), 1 + K + Z)

    def _state_setup(self) -> spaces.Box:
        size = 1 + DRIVER * self.p.n_drivers + ZONE * self._n_zones
        return spaces.Box(0.0, 1.0, (size,), dtype=np.float32)

    def _build(self):
        p = self.p
        n = p.n_drivers
        self._driving = Integrator(n)
        # Per driver, the requests in its slots when it last decided (see _observe_slots).
        self._slots: list[list[Request]] = [[] for _ in range(n)]
        self.model = RideHailModel(
            self.sim, self.rng, p, on_fare=self.add_reward, on_driving=self._on_driving,
            on_logoff=self.remove_agent, on_all_gone=self.end_episode,
        )
        self.model.start()
        # Features that depend on the configuration (and the episode's shifts) only.
        model = self.model
        self._shifts = np.stack([model.shift_end, model.shift_start], axis=1)
        self._travel_n = np.minimum(1.0, model.travel / self._time_ref).astype(np.float32)
        self._shared = np.zeros((self._n_zones, ZONE), dtype=np.float32)
        self._counts = np.zeros((self._n_zones, 3))  # float64 columns 0-2 of _shared
        self._xy_n = np.stack([model.zone_xy[:, 0] / max(1, model.zx - 1),
                               model.zone_xy[:, 1] / max(1, model.zy - 1)], axis=1)
        # Slot features: the pickup time from each zone to each zone (_FAR: out of reach),
        # and the divisors of a request's trip time, fare and waiting time.
        in_reach = model.manhattan <= p.pickup_radius
        self._pickup = np.where(in_reach, np.minimum(1.0, model.travel / self._time_ref), _FAR)
        self._reach = self._pickup.tolist()  # the same, per zone as a list
        self._slot_scale = (float(self._time_ref), float(self._fare_ref), 1.5 * model.patience)
        # A deciding driver's mask before its request slots: stay, or go to any other zone.
        K = p.request_slots
        self._zone_masks = np.ones((self._n_zones, self.n_actions), dtype=np.int8)
        self._zone_masks[:, 1 : 1 + K] = 0
        self._zone_masks[:, 1 + K :][np.diag_indices(self._n_zones)] = 0
        # Every tick each idle driver decides; a decision is applied as soon as it is taken.
        # Its mask (all actions until then) is set by _observe_all with the slots observed.
        jobs = [self._jobs(i) for i in range(n)]
        self.every(float(p.dispatch_interval), self.model.assign, values=jobs.__getitem__,
                   agents=self._idle, together=False)

    # ---- decisions -------------------------------------------------------------------
    def _idle(self) -> list[int]:
        return [i for i, state in enumerate(self.model.state) if state == IDLE]

    def _jobs(self, i: int):
        """Driver ``i``'s action -> what the model gets: a request, a zone or None."""
        k = self.p.request_slots

        def job(a: int) -> Request | int | None:
            if a == NOOP:
                return None
            if a <= k:  # the request in slot a - 1 as observed
                return self._slots[i][a - 1]
            return a - 1 - k

        return job

    def _on_driving(self, i: int, driving: bool) -> None:
        self._driving.set(self.sim.now, i, 1.0 if driving else 0.0)

    def _flush(self, until: float) -> None:
        cost = self.p.cost_per_minute / 60.0
        self.rew_buf -= (self._driving.take(until) * cost).astype(np.float32)

    # ---- observations ----------------------------------------------------------------
    # Rows of a table are picked with table.take(indices, axis=0): the same as
    # table[indices], without the cost of numpy's general indexing (about 2 us a call,
    # several times that of take on arrays this small).
    def _observe_all(self, obs: np.ndarray) -> None:
        model, now = self.model, self.sim.now
        n = model.n_drivers
        state = np.fromiter(model.state, dtype=np.int64, count=n)
        zone = np.fromiter(model.zone, dtype=np.int64, count=n)
        open_reqs = list(model.open.values())
        origins = np.fromiter(map(_ORIGIN, open_reqs), dtype=np.int64, count=len(open_reqs))
        self._observe_drivers(obs, now, state, zone)
        expected = self._observe_zones(obs, now, zone, origins)  # (after the idle flags)
        # Request slots: zeros but for the deciding drivers, whose masks are refreshed to
        # match what they observe.
        obs[:, self._slot0 :] = 0.0
        pending = self.needs_buf.nonzero()[0]
        if len(pending):
            self._observe_slots(obs, now, pending, zone.take(pending), open_reqs, origins, expected)

    def _observe_drivers(self, obs, now, state, zone) -> None:
        """Columns 0-8 of every row: the driver's state, the time, its shift and zone."""
        horizon = self.model.horizon
        flags = _FLAGS.take(state, axis=0)
        obs[:, 0:4] = flags
        obs[:, 4] = min(1.0, now / horizon)
        # shift time left (on shift) and time until the shift starts (before it), / horizon:
        # the time until the start is 0 once it started, the time left is 0 once the shift
        # is over, so only an off-shift driver's time left needs clearing (flags[:, 0]).
        times = self._shifts - now
        times /= horizon
        np.maximum(times, 0.0, out=times)
        np.minimum(times, 1.0, out=times)
        times[:, 0] *= flags[:, 0]
        obs[:, 5:7] = times
        obs[:, 7:9] = self._xy_n.take(zone, axis=0)

    def _observe_zones(self, obs, now, zone, origins) -> np.ndarray:
        """The zone features (columns 9 to 9 + 4 n_zones); returns the expected requests per
        zone / count_ref (float64, capped at 1)."""
        model, Z = self.model, self._n_zones
        expected = model.mean_rate * model.rate_factor(now) * LOOKAHEAD * model.origin_weights(now)
        counts = self._counts  # open requests, idle drivers, expected requests per zone
        counts[:, 0] = np.bincount(origins, minlength=Z)
        counts[:, 1] = np.bincount(zone, weights=obs[:, 1], minlength=Z)  # the idle flags
        counts[:, 2] = expected
        counts /= self._count_ref
        np.minimum(counts, 1.0, out=counts)
        # Hot path (the largest block): the zone features every driver shares are written as
        # one row to all drivers, then each driver's driving times (numpy is much faster at
        # that than at four strided column writes).
        shared = self._shared  # float32 (Z, ZONE); column 3 stays 0
        shared[:, :3] = counts
        zones = obs[:, HEAD : self._slot0]
        zones[:] = shared.reshape(-1)
        zones.reshape(len(zone), Z, ZONE)[:, :, 3] = self._travel_n.take(zone, axis=0)
        return counts[:, 2]

    def _observe_slots(self, obs, now, pending, own, open_reqs, origins, expected) -> None:
        """The request slots and masks of the deciding drivers ``pending`` (in zones ``own``).

        Each sees its ``request_slots`` nearest open requests in reach, nearest pickup first
        and the older request first on a tie: requests are open in the order they were made,
        so a stable sort by pickup time is that order. ``_slots[i]`` keeps driver ``i``'s.
        """
        masks = self._zone_masks.take(own, axis=0)
        if open_reqs:
            K, slot0 = self.p.request_slots, self._slot0
            time_ref, fare_ref, wait_ref = self._slot_scale
            expected = expected.tolist()
            # P x R pickup times (_FAR: out of reach)
            pickup = self._pickup.take(own, axis=0).take(origins, axis=1)
            nearest = pickup.argsort(axis=1, kind="stable")[:, :K].tolist()
            for p, (i, z) in enumerate(zip(pending.tolist(), own.tolist(), strict=True)):
                reach, row, slots = self._reach[z], [], []
                for j in nearest[p]:
                    req = open_reqs[j]
                    pickup_time = reach[req.origin]
                    if pickup_time == _FAR:  # (so are the next ones)
                        break
                    row += (1.0, pickup_time, min(req.trip_time / time_ref, 1.0),
                            min(req.fare / fare_ref, 1.0), min((now - req.time) / wait_ref, 1.0),
                            expected[req.dest])
                    slots.append(req)
                if slots:  # (the other slots stay zero)
                    obs[i, slot0 : slot0 + len(row)] = row
                    masks[p, 1 : 1 + len(slots)] = 1
                self._slots[i] = slots
        self.mask_buf[pending] = masks

    def _state_all(self, out: np.ndarray) -> None:
        model, now = self.model, self.sim.now
        n, Z, horizon, cref = model.n_drivers, model.n_zones, model.horizon, self._count_ref
        state = np.fromiter(model.state, dtype=np.int64, count=n)
        zone = np.fromiter(model.zone, dtype=np.int64, count=n)
        on = (state == IDLE) | (state == BUSY) | (state == MOVING)
        out[0] = min(1.0, now / horizon)
        drivers = out[1 : 1 + DRIVER * n].reshape(n, DRIVER)
        for col, st in enumerate((OFF, IDLE, BUSY, MOVING, GONE)):
            drivers[:, col] = state == st
        left = np.minimum(np.maximum((model.shift_end - now) / horizon, 0.0), 1.0)
        drivers[:, 5] = np.where(on, left, 0.0)
        drivers[:, 6:8] = self._xy_n[zone]
        zones = out[1 + DRIVER * n :].reshape(Z, ZONE)
        origins = np.fromiter(map(_ORIGIN, model.open.values()), dtype=np.int64,
                              count=len(model.open))
        expected = model.mean_rate * model.rate_factor(now) * LOOKAHEAD * model.origin_weights(now)
        zones[:, 0] = np.bincount(origins, minlength=Z) / cref
        zones[:, 1] = np.bincount(zone[state == IDLE], minlength=Z) / cref
        zones[:, 2] = np.bincount(zone[on], minlength=Z) / cref
        zones[:, 3] = expected / cref
        np.minimum(zones, 1.0, out=zones)

    def _render_text(self) -> str:
        model = self.model
        states = np.bincount(np.asarray(model.state), minlength=5)
        lines = [
            f"ridehail t={self.now:8.1f}  drivers off {states[0]} idle {states[1]} busy "
            f"{states[2]} moving {states[3]} gone {states[4]}",
            f"  requests {model.n_requests}  open {len(model.open)}  served {model.served}  "
            f"cancelled {model.cancelled}",
        ]
        open_by_zone = np.bincount(
            [r.origin for r in model.open.values()], minlength=model.n_zones
        ).reshape(model.zy, model.zx)
        for row in open_by_zone:
            lines.append("  " + " ".join(f"{v:2d}" for v in row))
        return "\n".join(lines)

    def _render_rgb(self) -> np.ndarray:
        from deszoo.envs.ridehail import render  # matplotlib is needed only for pictures

        return render.draw(self)



def heuristic(obs: np.ndarray, mask: np.ndarray) -> int:
    """Nearest request first; otherwise move to a nearby zone short of drivers, if worth it.

    A zone's shortage is its open plus expected requests minus its idle drivers (all
    scaled by ``count_ref``). With no request in reach the driver repositions to the zone
    within a quarter of the longest drive that maximises shortage minus 3 x driving time
    (scaled), if that beats the shortage of its own zone by 0.25; else it stays. The
    layout sizes follow from the lengths: ``len(mask) = 1 + K + Z`` and
    ``len(obs) = 9 + 4 Z + 6 K``.
    """
    if not mask[1:].any():
        return NOOP
    n = len(mask)
    Z = (HEAD + SLOT * (n - 1) - len(obs)) // (SLOT - ZONE)
    K = n - 1 - Z
    slots = np.asarray(obs[HEAD + ZONE * Z :], dtype=np.float64).reshape(K, SLOT)
    legal = mask[1 : 1 + K] == 1
    if legal.any():
        score = slots[:, 1] - 0.1 * slots[:, 3]  # pickup time, then the better fare
        score[~legal] = np.inf
        return 1 + int(np.argmin(score))
    zones = np.asarray(obs[HEAD : HEAD + ZONE * Z], dtype=np.float64).reshape(Z, ZONE)
    shortage = zones[:, 0] + zones[:, 2] - zones[:, 1]
    gain = shortage - 3.0 * zones[:, 3]
    gain[(zones[:, 3] > 0.25) | (mask[1 + K :] == 0)] = -np.inf
    own = np.flatnonzero(mask[1 + K :] == 0)
    j = int(np.argmax(gain))
    if np.isfinite(gain[j]) and (len(own) == 0 or gain[j] > shortage[own[0]] + 0.25):
        return 1 + K + j
    return NOOP
