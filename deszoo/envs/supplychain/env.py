"""Supply chain: every stock point of a multi-echelon chain orders once per period.

The beer game generalised (see :mod:`deszoo.envs.supplychain.model`): ``widths`` gives the
number of nodes per echelon, retailers first and factories last (``(1, 1, 1, 1)`` is the
classic retailer - wholesaler - distributor - factory chain); each node buys from one node of
the next echelon. Customers arrive at the retailers as a Poisson process. Orders take
``order_delay`` periods to reach the supplier, shipments ``ship_delay`` periods to arrive and
production ``production_delay`` periods. Unfilled demand is backlogged at every echelon.
Decisions use the bridge's fixed-interval mode: every period (``dt = 1``) all nodes decide at
once. Naive ordering rules amplify the variance of orders upstream (the bullwhip effect);
``env.bullwhip()`` reports the ratio per echelon.

Quantities in the observation are measured in *order units*: ``u = max_order * mean / (levels -
1)``, where ``mean`` is the node's mean demand per period, so action ``a`` orders about ``a``
units (``round(a * u)`` items). ``soft(x) = x / (16 + |x|)`` maps them into ``(-1, 1)``; it is
monotone and invertible (``x = 16 s / (1 - |s|)``).

=================  ======================================================================
Import             ``from deszoo.envs import supplychain_v0`` /
                   ``deszoo.make("supplychain_v0")``
Agents             ``retailer_j``, ``wholesaler_j``, ``distributor_j``, ``factory_j`` for four
                   echelons; ``retailer_j``, ``tier{l}_j``, ``factory_j`` otherwise
Action space       ``Discrete(order_levels)``: action ``a`` orders ``round(a * u)`` items;
                   ``0`` (order nothing) is the no-op
Action mask        ``a`` is allowed if the order keeps the inventory position (on hand + on
                   order - backlog) within ``(lead + 1 + position_cap)`` periods of mean
                   demand; ``0`` is always allowed
Observation space  ``Box(low, high, (13,), float32)``: entries 3, 11 and 12 in [-1, 1],
                   the others in [0, 1]
Observation        ``[soft(on hand), soft(backlog), soft(on order), soft(inventory
                   position), soft(last period's demand), soft(demand forecast),
                   soft(forecast error std), soft(last order), lead / (1 + lead), echelon /
                   (depth - 1), min(t / max_steps, 1), sin, cos of the season phase]``;
                   demand is customers (retailers) or orders received (upstream); the
                   forecast is exponential smoothing with factor 0.2
Reward             ``local``: minus the node's holding cost (``holding_cost`` per item and
                   period on hand) plus backlog cost (``backlog_cost`` per item and period
                   owed), accrued continuously over the step, divided by ``demand_rate``;
                   ``team``: every node gets the chain's total divided by the node count
Termination        none (the chain runs on)
Truncation         ``max_steps`` periods (default 100) or ``max_time``
Heuristic          ``heuristic(obs, mask)``: order-up-to (base stock) level
                   ``F (lead + 1) + z sigma sqrt(lead + 1)`` from the node's own forecast
                   ``F`` and error std ``sigma`` (``z = 0.5`` at retailers, 0 upstream),
                   capped by the mask
=================  ======================================================================

Arguments:
    widths (tuple): nodes per echelon, retailers first; must not grow upstream.
    demand_rate (float): customers per period at each retailer (Poisson).
    seasonality (float): amplitude ``a`` in ``[0, 1)`` of the demand factor
        ``1 + a sin(2 pi t / season)``.
    season (float): length of the seasonal cycle in periods.
    order_delay (int): periods for an order to reach the supplier (>= 0).
    ship_delay (int): periods a shipment travels (>= 1).
    production_delay (int): periods a factory's production takes (>= 1).
    initial_inventory (float): periods of mean demand on hand at the start.
    holding_cost (float): cost per item on hand per period.
    backlog_cost (float): cost per item backlogged per period.
    order_levels (int): number of actions (order sizes ``0 .. max_order`` periods of demand).
    max_order (float): largest order, in periods of the node's mean demand.
    position_cap (float): slack of the inventory-position limit, in periods of mean demand.
    reward (str): ``"local"`` or ``"team"``.

Presets: `small` (the classic 4-node beer game, 4 customers per period), `default` (widths
``(4, 2, 2, 1)``, 9 nodes, 8 customers per period per retailer), `large` (widths
``(32, 8, 4, 2)``, 46 nodes, 16 customers per period per retailer). All run 100 periods.

Version History:
    v0: initial release.
"""

from __future__ import annotations

import math

import numpy as np

from deszoo.core import NOOP, SimPyParallelEnv
from deszoo.core.config import check_fraction, check_ints, check_numbers, is_int
from deszoo.envs.supplychain.model import SupplyChainModel
from deszoo.errors import ConfigError

__all__ = ["SupplyChainEnv", "heuristic"]

SCALE = 16.0  # soft(x) = x / (SCALE + |x|), x in order units
N_OBS = 13
Z_RETAIL = 0.5  # safety factor of the heuristic at retailers (upstream: none)


class SupplyChainEnv(SimPyParallelEnv):
    """Multi-echelon supply chain with periodic orders; see the module docstring."""

    metadata = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "supplychain_v0",
        "render_fps": 2,
    }
    defaults = {
        "widths": (4, 2, 2, 1),
        "demand_rate": 8.0,
        "seasonality": 0.25,
        "season": 52.0,
        "order_delay": 1,
        "ship_delay": 2,
        "production_delay": 2,
        "initial_inventory": 3.0,
        "holding_cost": 0.5,
        "backlog_cost": 1.0,
        "order_levels": 9,
        "max_order": 2.0,
        "position_cap": 2.0,
        "reward": "local",
        "max_steps": 100,
    }
    presets = {
        "small": {"widths": (1, 1, 1, 1), "demand_rate": 4.0},
        "default": {},
        "large": {"widths": (32, 8, 4, 2), "demand_rate": 16.0},
    }

    def _setup(self):
        c = self.config
        name = self.metadata["name"]
        widths = c["widths"]
        if (
            not isinstance(widths, (tuple, list))
            or not widths
            or not all(is_int(w) and w >= 1 for w in widths)
        ):
            raise ConfigError(
                f"{name}: widths={widths!r} must be a non-empty tuple of positive ints"
            )
        if any(b > a for a, b in zip(widths, widths[1:], strict=False)):
            raise ConfigError(
                f"{name}: widths={tuple(widths)!r} must not grow upstream (retailers first), "
                "so that every node has at least one buyer"
            )
        check_numbers(c, name, ("demand_rate", "season", "max_order"))
        check_numbers(c, name, ("initial_inventory", "holding_cost", "backlog_cost",
                                "position_cap"), positive=False)
        check_fraction(c, name, "seasonality")
        check_ints(c, name, ("order_delay",), minimum=0)
        check_ints(c, name, ("ship_delay", "production_delay"))
        check_ints(c, name, ("order_levels",), minimum=2)
        if c["max_steps"] is None and c["max_time"] is None:
            raise ConfigError(
                f"{name}: the chain never terminates; set max_steps (periods) or max_time"
            )
        if c["reward"] not in ("local", "team"):
            raise ConfigError(f"{name}: reward={c['reward']!r}; valid: 'local', 'team'")
        depth = len(widths)
        if depth == 4:
            titles = ["retailer", "wholesaler", "distributor", "factory"]
        else:
            titles = ["retailer"] + [f"tier{lvl}" for lvl in range(1, depth - 1)] + ["factory"]
            titles = titles[:depth] if depth > 1 else ["retailer"]
        names = [f"{titles[lvl]}_{j}" for lvl, w in enumerate(widths) for j in range(w)]
        low = np.zeros(N_OBS)
        low[[3, 11, 12]] = -1.0
        return names, low, np.ones(N_OBS), c["order_levels"]

    def _build(self):
        c = self.config
        self.model = m = SupplyChainModel(
            self.sim, self.rng, tuple(c["widths"]), float(c["demand_rate"]),
            float(c["seasonality"]), float(c["season"]), c["order_delay"], c["ship_delay"],
            c["production_delay"], float(c["initial_inventory"]), float(c["holding_cost"]),
            float(c["backlog_cost"]),
        )  # fmt: skip
        m.start()
        n, levels = m.n_nodes, c["order_levels"]
        mean = np.asarray(m.mean)
        self._unit = c["max_order"] * mean / (levels - 1)  # order unit per node
        # items ordered by each action, per node
        self._qty = np.rint(self._unit[:, None] * np.arange(levels)[None, :]).astype(np.int64)
        self._qty_list = self._qty.tolist()
        lead = np.asarray(m.lead, dtype=np.float64)
        self._limit = ((lead + 1 + c["position_cap"]) * mean).tolist()
        self._mask = np.zeros(levels, dtype=np.int8)
        depth = len(c["widths"])
        static = np.zeros((n, N_OBS), dtype=np.float64)
        static[:, 8] = lead / (1 + lead)
        static[:, 9] = np.asarray(m.level) / max(1, depth - 1)
        self._static = static
        self._obs = np.zeros((n, N_OBS), dtype=np.float32)
        self._fresh = False
        self._closed = 0.0
        self.start_periodic(1.0, self._mask_fn, self._apply)

    # ---- periodic decisions ---------------------------------------------------------
    def _mask_fn(self, i: int) -> np.ndarray:
        room = self._limit[i] - self.model.inventory_position(i)
        mask = self._mask
        mask[:] = self._qty[i] <= room
        mask[NOOP] = 1
        return mask

    def _apply(self, i: int, action: int) -> None:
        self.model.place_order(i, self._qty_list[i][action])

    def _flush(self, until: float) -> None:
        m = self.model
        costs = np.asarray(m.take_costs(until)) / self.config["demand_rate"]
        if self.config["reward"] == "team":
            self.rew_buf -= np.float32(costs.sum() / len(costs))
        else:
            self.rew_buf -= costs.astype(np.float32)
        if until >= self._closed + 1.0:  # a period boundary: roll the demand statistics
            self._closed = math.floor(until)
            m.close_period()
        self._fresh = False

    # ---- observations ---------------------------------------------------------------
    def _refresh(self) -> None:
        """Every node's observation at once (vectorised over nodes)."""
        m = self.model
        u = self._unit
        on_hand = np.asarray(m.on_hand, dtype=np.float64)
        backlog = np.asarray(m.backlog, dtype=np.float64)
        on_order = np.asarray(m.on_order, dtype=np.float64)
        x = np.empty((m.n_nodes, 8))
        x[:, 0] = on_hand
        x[:, 1] = backlog
        x[:, 2] = on_order
        x[:, 3] = on_hand + on_order - backlog
        x[:, 4] = m.last_demand
        x[:, 5] = m.forecast
        x[:, 6] = np.sqrt(m.variance)
        x[:, 7] = m.last_order
        x /= u[:, None]
        obs = self._static.copy()
        obs[:, :8] = x / (SCALE + np.abs(x))
        now = self.sim.now
        steps = self.config["max_steps"]
        obs[:, 10] = min(1.0, now / steps) if steps else 0.0
        phase = 2 * math.pi * now / self.config["season"]
        obs[:, 11] = math.sin(phase)
        obs[:, 12] = math.cos(phase)
        self._obs[:] = obs
        self._fresh = True

    def _observe(self, i: int, out: np.ndarray) -> None:
        if not self._fresh:
            self._refresh()
        out[:] = self._obs[i]

    def bullwhip(self) -> list[float]:
        """Variance of each echelon's orders per period / variance of customer demand."""
        return self.model.bullwhip()

    def _render_text(self) -> str:
        m = self.model
        lines = [f"supplychain t={self.now:6.1f}  period {m.period}"]
        for i, agent in enumerate(self.possible_agents):
            lines.append(
                f"  {agent:>14}: on hand {m.on_hand[i]:5d}  backlog {m.backlog[i]:5d}  "
                f"on order {m.on_order[i]:5d}  last order {m.last_order[i]:4d}"
            )
        return "\n".join(lines)

    def _render_rgb(self) -> np.ndarray:
        from deszoo.envs.supplychain import render  # matplotlib is needed only for pictures

        return render.draw(self)



def _unsoft(s: float) -> float:
    s = max(-1 + 1e-7, min(1 - 1e-7, float(s)))
    return SCALE * s / (1 - abs(s))


def heuristic(obs: np.ndarray, mask: np.ndarray) -> int:
    """Order up to a base-stock level from the node's own forecast; the mask caps the order."""
    if not mask[1:].any():
        return NOOP
    position = _unsoft(obs[3])
    forecast = _unsoft(obs[5])
    sigma = _unsoft(obs[6])
    lead = float(obs[8]) / max(1e-7, 1 - float(obs[8]))
    cover = round(lead) + 1
    z = Z_RETAIL if obs[9] == 0 else 0.0  # echelon 0: the retailers
    target = forecast * cover + z * sigma * math.sqrt(cover)
    want = int(round(target - position))
    if want <= 0:
        return NOOP
    allowed = np.flatnonzero(mask)
    return int(min(want, allowed[-1], len(mask) - 1))
