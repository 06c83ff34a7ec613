"""Load balancing: dispatchers route arriving requests to server pools.

A service system (call centre, server farm) with ``n_pools`` server pools, each a SimPy
``Resource`` with its own number of servers and a waiting room of ``queue_capacity`` places.
Each dispatcher (agent) receives its own Poisson stream of requests of ``n_types`` types (a
per-dispatcher type mix). Service times are exponential with a mean that depends on the type
and the pool (skills: ``exp(skill_spread * z)``, drawn per episode). A waiting request abandons
after an exponential patience time. A dispatcher is at a decision point whenever one of its
requests arrives and at least one pool can take it; a request that finds every pool full is lost
without a decision. Arrival rates are set from the target offered ``load``; a share
``background`` of it arrives straight at the pools (proportionally to their servers) and is
never routed. Arrivals stop at ``horizon``; the system then drains.

=================  ======================================================================
Import             ``from deszoo.envs import loadbalance_v0`` /
                   ``deszoo.make("loadbalance_v0")``
Agents             ``dispatcher_0`` .. ``dispatcher_{n_dispatchers-1}``
Action space       ``Discrete(n_pools + 1)``: ``0`` no-op, ``k`` sends the arriving request
                   to pool ``k-1``
Action mask        deciding: the pools that are not full (``0`` is not allowed); not
                   deciding: only ``0``
Observation space  ``Box(0, 1, (2 + n_types + 6 * n_pools,), float32)``
Observation        ``[deciding, min(t / horizon, 1), one-hot type of the request to route
                   (zeros when not deciding)]``, then per pool ``[not full, busy servers /
                   servers, waiting / queue_capacity, servers / max servers,
                   soft(expected wait), soft(mean service time of the request's type)]``
                   (the last is 0 when not deciding). ``soft(x) = x / (1 + x)`` with ``x``
                   in units of the mean service time (1.0), so every entry is in [0, 1].
State              ``Box(0, 1, (1 + (1 + n_types) * n_dispatchers + (5 + n_types) *
                   n_pools,), float32)``: ``[min(t / horizon, 1)]``, then per dispatcher
                   ``[deciding, one-hot type of the request to route]``, then per pool
                   ``[not full, busy servers / servers, waiting / queue_capacity, servers
                   / max servers, soft(expected wait), soft(mean service time) of each
                   type]``
Expected wait      0 with a free server, else ``(work waiting + work in service / c) / c``,
                   work being the sum of mean service times, ``c`` the pool's servers
Reward             minus the number of the dispatcher's requests waiting in queues,
                   integrated over the step's simulated interval (time unit: the mean
                   service time), minus ``loss_penalty`` per request of the dispatcher that
                   is blocked or abandons
Termination        arrivals have stopped (``horizon``) and every request has left
Truncation         ``max_steps`` env steps or ``max_time`` simulated time (both ``None``
                   by default)
Heuristic          ``heuristic(obs, mask)``: shortest expected delay (expected wait + own
                   mean service time) over the pools the mask allows
=================  ======================================================================

Presets: `small` (2 dispatchers, 3 pools, about 500 steps), `default` (4 dispatchers,
6 pools, about 1.3k steps), `large` (32 dispatchers, 64 pools, 97% of the load as background
traffic, so about 140 SimPy events per step and about 14x the work per step of `small`).

Version History:
    v0: initial release.
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from deszoo.core import NOOP, Integrator, SimPyParallelEnv
from deszoo.core.groups import discrete
from deszoo.core.params import BLACK_DEATH_V0, Param, fraction, integer, pair, real
from deszoo.envs.loadbalance.model import LoadBalanceModel

__all__ = ["LoadBalanceEnv", "heuristic"]

POOL = 6  # features per pool
WAIT, SERVICE = 4, 5  # offsets of the expected wait and service time within a pool block


class LoadBalanceEnv(SimPyParallelEnv):
    """Dispatchers routing requests to server pools; see the module docstring."""

    metadata = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "loadbalance_v0",
        "render_fps": 8,
    }
    params = {
        "n_dispatchers": Param(4, integer(1, 1024), "dispatchers, one agent each"),
        "n_pools": Param(6, integer(1, 1024), "server pools"),
        "n_types": Param(3, integer(1, 64), "request types"),
        "servers_range": Param((2, 6), pair(integer(1, 1024)),
                               "servers per pool, drawn uniformly from this integer range per "
                               "episode"),
        "queue_capacity": Param(8, integer(1, 1_000_000), "waiting places per pool"),
        "skill_spread": Param(0.5, real(0, 10), "spread of the log mean service times over "
                                            "(type, pool)"),
        "load": Param(0.9, real(0, 10, open_min=True),
                      "offered load (arrival rate x mean service time / total servers)"),
        "background": Param(0.0, fraction(),
                            "share of the load that arrives directly at the pools"),
        "patience": Param(3.0, real(0, 1e12, open_min=True),
                          "mean patience of a waiting request, in mean service times"),
        "loss_penalty": Param(2.0, real(0, 1e6), "reward penalty per blocked or abandoned request"),
        "horizon": Param(60.0, real(0, 1e6, open_min=True),
                         "simulated time during which requests arrive"),
        "black_death": BLACK_DEATH_V0,
    }
    presets = {
        "small": {
            "n_dispatchers": 2,
            "n_pools": 3,
            "n_types": 2,
            "servers_range": (1, 3),
            "horizon": 100.0,
        },
        "default": {},
        "large": {
            "n_dispatchers": 32,
            "n_pools": 64,
            "n_types": 4,
            "servers_range": (4, 16),
            "queue_capacity": 16,
            "background": 0.97,
            "horizon": 100.0,
        },
    }

    def _setup(self):
        p = self.p
        self._global = 2 + p.n_types
        size = self._global + POOL * p.n_pools
        names = [f"dispatcher_{d}" for d in range(p.n_dispatchers)]
        self._pool_of_action = [None, *range(p.n_pools)]  # action k: pool k - 1
        return discrete(names, np.zeros(size), np.ones(size), p.n_pools + 1)

    def _state_setup(self) -> spaces.Box:
        p = self.p
        size = 1 + (1 + p.n_types) * p.n_dispatchers + (5 + p.n_types) * p.n_pools
        return spaces.Box(0.0, 1.0, (size,), dtype=np.float32)

    def _build(self):
        self.model = LoadBalanceModel(
            self.sim, self.rng, self.p, route=self._route, on_wait=self._on_wait,
            on_lost=self._on_lost, on_all_done=self.end_episode,
        )
        n_d = self.p.n_dispatchers
        self._wait = Integrator(n_d)
        self._kind = [0] * n_d  # type of each dispatcher's request to route
        self._mask = np.zeros(self.n_actions, dtype=np.int8)
        # soft(mean service time) per type, laid out as the service column of the pool blocks
        times = self.model.service_time
        self._svc = (times / (1.0 + times)).astype(np.float32)
        self._max_servers = float(self.p.servers_range[1])
        self.model.start()

    # ---- model callbacks ----------------------------------------------------------------
    def _route(self, d: int, kind: int, open_pools: list[bool]):
        self._kind[d] = kind
        mask = self._mask
        mask[NOOP] = 0
        mask[1:] = open_pools
        return self.decide(d, mask, values=self._pool_of_action)

    def _on_wait(self, d: int, delta: int) -> None:
        self._wait.add(self.sim.now, d, delta)

    def _on_lost(self, d: int, kind: int) -> None:
        self.add_reward(d, -self.p.loss_penalty)

    def _flush(self, until: float) -> None:
        self.rew_buf -= self._wait.take(until).astype(np.float32)

    # ---- observations -------------------------------------------------------------------
    def _observe_all(self, obs: np.ndarray) -> None:
        g, p = self._global, self.p
        cap, maxc = p.queue_capacity, self._max_servers
        row = [0.0] * g  # the global part of a row not deciding: only the time is set
        row[1] = min(1.0, self.sim.now / p.horizon)
        # per pool, every step: full() inline, and no expected_wait() call with a free server
        # (the method calls cost 5% of a default step)
        for pool in self.model.pools:
            c, busy, waiting = pool.servers, len(pool.users), len(pool.queue)
            w = pool.expected_wait() if busy >= c else 0.0
            row += (
                0.0 if busy >= c and waiting >= cap else 1.0,
                busy / c,
                min(1.0, waiting / cap),
                c / maxc,
                w / (1.0 + w),
                0.0,
            )
        obs[:] = row
        for i in self.needs_buf.nonzero()[0].tolist():  # each deciding dispatcher's request
            kind = self._kind[i]
            row = obs[i]
            row[0] = 1.0
            row[2 + kind] = 1.0
            row[g + SERVICE :: POOL] = self._svc[kind]

    def _state_all(self, out: np.ndarray) -> None:
        p, model = self.p, self.model
        n_d, n_t = p.n_dispatchers, p.n_types
        out[0] = min(1.0, self.sim.now / p.horizon)
        disp = out[1 : 1 + (1 + n_t) * n_d].reshape(n_d, 1 + n_t)
        disp[:] = 0.0
        for d in np.flatnonzero(self.needs_buf):
            disp[d, 0] = 1.0
            disp[d, 1 + self._kind[d]] = 1.0
        pools = out[1 + (1 + n_t) * n_d :].reshape(p.n_pools, 5 + n_t)
        cap, maxc = p.queue_capacity, self._max_servers
        for k, pool in enumerate(model.pools):
            w = pool.expected_wait()
            pools[k, :5] = (not pool.full(), pool.busy / pool.servers,
                            min(1.0, pool.waiting / cap), pool.servers / maxc, w / (1.0 + w))
        pools[:, 5:] = self._svc.T

    def _render_text(self) -> str:
        m = self.model
        lost = sum(m.blocked) + sum(m.abandoned)
        lines = [
            f"loadbalance t={self.now:8.2f}  arrived {sum(m.arrivals)}  served "
            f"{sum(m.served)}  lost {lost}"
        ]
        for pool in m.pools:
            lines.append(
                f"  pool_{pool.index}: busy {pool.busy:3d}/{pool.servers:<3d} waiting "
                f"{pool.waiting:3d}/{pool.queue_cap}"
            )
        return "\n".join(lines)

    def _render_rgb(self) -> np.ndarray:
        from deszoo.envs.loadbalance import render  # matplotlib is needed only for pictures

        return render.draw(self)



def heuristic(obs: np.ndarray, mask: np.ndarray) -> int:
    """Shortest expected delay: the allowed pool with the least expected wait + service time."""
    if not mask[1:].any():
        return NOOP
    n_pools = len(mask) - 1
    table = np.asarray(obs[len(obs) - POOL * n_pools :], dtype=np.float64).reshape(n_pools, POOL)
    wait = np.minimum(table[:, WAIT], 1 - 1e-6)
    service = np.minimum(table[:, SERVICE], 1 - 1e-6)
    delay = wait / (1 - wait) + service / (1 - service)
    delay[np.asarray(mask[1:]) == 0] = np.inf
    return int(np.argmin(delay)) + 1
