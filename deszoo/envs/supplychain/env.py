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

Quantities in the observation are measured in *order units*: ``u = max_order * mean /
(order_levels - 1)``, where ``mean`` is the node's mean demand per period, so action ``a``
orders about ``a`` units (``round(a * u)`` items). With ``continuous=True`` the unit is the
same (``order_levels`` then only sets it), so both action types observe the same numbers.
``soft(x) = x / (16 + |x|)`` maps them into ``(-1, 1)``; it is monotone and invertible
(``x = 16 s / (1 - |s|)``).

=================  ======================================================================
Import             ``from deszoo.envs import supplychain_v0`` /
                   ``deszoo.make("supplychain_v0")``
Agents             ``retailer_j``, ``wholesaler_j``, ``distributor_j``, ``factory_j`` for four
                   echelons; ``retailer_j``, ``tier{l}_j``, ``factory_j`` otherwise
Action space       ``Discrete(order_levels)``: action ``a`` orders ``round(a * u)`` items;
                   ``0`` (order nothing) is the no-op. ``continuous=True``: ``Box(0,
                   max_order, (1,), float32)``: action ``a`` orders ``round(a * mean)`` items
                   (``a`` periods of mean demand); an action outside the box, or NaN,
                   raises ``InvalidActionError`` (never clipped)
Action mask        ``a`` is allowed if the order keeps the inventory position (on hand + on
                   order - backlog) within ``(lead + 1 + position_cap)`` periods of mean
                   demand; ``0`` is always allowed. ``continuous=True``: no mask (none in the
                   infos; a vector env's is all ones) and ``position_cap`` does not apply
                   (a limit that depends on the state could only be kept by clipping the
                   order silently); the bridge refuses ``mask_in_obs``
Observation space  ``Box(low, high, (13,), float32)``: entries 3, 11 and 12 in [-1, 1],
                   the others in [0, 1]
Observation        ``[soft(on hand), soft(backlog), soft(on order), soft(inventory
                   position), soft(last period's demand), soft(demand forecast),
                   soft(forecast error std), soft(last order), lead / (1 + lead), echelon /
                   (depth - 1), min(t / max_steps, 1), sin, cos of the season phase]``;
                   demand is customers (retailers) or orders received (upstream); the
                   forecast is exponential smoothing with factor 0.2
State              ``Box(low, high, (3 + 7 * n_nodes,), float32)``: ``[min(t / max_steps,
                   1), sin, cos of the season phase]``, then per node (in agent order)
                   ``[soft(on hand), soft(backlog), soft(on order), soft(inventory
                   position), soft(last period's demand), soft(demand forecast),
                   soft(last order)]``; the season entries and the inventory positions in
                   [-1, 1], the others in [0, 1]
Reward             ``local``: minus the node's holding cost (``holding_cost`` per item and
                   period on hand) plus backlog cost (``backlog_cost`` per item and period
                   owed), accrued continuously over the step, divided by ``demand_rate``;
                   ``team``: every node gets the chain's total divided by the node count
Termination        none (the chain runs on)
Truncation         ``max_steps`` periods (default 100) or ``max_time``
Heuristic          ``heuristic(obs, mask)``: order-up-to (base stock) level
                   ``F (lead + 1) + z sigma sqrt(lead + 1)`` from the node's own forecast
                   ``F`` and error std ``sigma`` (``z = 0.5`` at retailers, 0 upstream),
                   capped by the mask; ``Discrete`` actions only
=================  ======================================================================

Presets: `small` (the classic 4-node beer game, 4 customers per period), `default` (widths
``(4, 2, 2, 1)``, 9 nodes, 8 customers per period per retailer), `large` (widths
``(32, 8, 4, 2)``, 46 nodes, 16 customers per period per retailer). All run 100 periods.

Version History:
    v0: initial release.
"""

from __future__ import annotations

import math

import numpy as np
from gymnasium import spaces

from deszoo.core import NOOP, SimPyParallelEnv
from deszoo.core.groups import Group, discrete
from deszoo.core.params import (
    BLACK_DEATH_V0,
    COMMON,
    Param,
    choice,
    flag,
    fraction,
    int_tuple,
    integer,
    real,
)
from deszoo.envs.supplychain.model import SupplyChainModel
from deszoo.errors import ConfigError

__all__ = ["SupplyChainEnv", "heuristic"]

SCALE = 16.0  # soft(x) = x / (SCALE + |x|), x in order units
NODE = 7  # state features per node
N_OBS = 13
Z_RETAIL = 0.5  # safety factor of the heuristic at retailers (upstream: none)


class SupplyChainEnv(SimPyParallelEnv):
    """Multi-echelon supply chain with periodic orders; see the module docstring."""

    metadata = {
        "render_modes": ["human", "ansi", "rgb_array"],
        "name": "supplychain_v0",
        "render_fps": 2,
    }
    params = {
        "widths": Param((4, 2, 2, 1), int_tuple(1, 256, 16),
                        "nodes per echelon, retailers first; must not grow upstream"),
        "demand_rate": Param(8.0, real(0.001, 1000),
                             "customers per period at each retailer (Poisson; at least 0.001: "
                             "quantities are observed, and costs rewarded, per mean demand)"),
        "seasonality": Param(0.25, fraction(),
                             "amplitude a of the demand factor 1 + a sin(2 pi t / season)"),
        "season": Param(52.0, real(1, 1e6),
                        "length of the seasonal cycle in periods (at least one: demand is "
                        "drawn once a period)"),
        "order_delay": Param(1, integer(0, 100), "periods for an order to reach the supplier"),
        "ship_delay": Param(2, integer(1, 100), "periods a shipment travels"),
        "production_delay": Param(2, integer(1, 100), "periods a factory's production takes"),
        "initial_inventory": Param(3.0, real(0, 1000),
                                   "periods of mean demand on hand at the start"),
        "holding_cost": Param(0.5, real(0, 1e6), "cost per item on hand per period"),
        "backlog_cost": Param(1.0, real(0, 1e6), "cost per item backlogged per period"),
        "order_levels": Param(9, integer(2, 1001),
                              "Discrete actions (order sizes 0 .. max_order periods of demand); "
                              "also sets the observation's order unit"),
        "max_order": Param(2.0, real(0.001, 100),
                           "largest order, in periods of the node's mean demand (at least "
                           "0.001: it sets the observation's order unit)"),
        "position_cap": Param(2.0, real(0, 1e6),
                              "slack of the inventory-position limit of the Discrete mask, in "
                              "periods of mean demand (not applied with continuous=True)"),
        "continuous": Param(False, flag(),
                            "Box(0, max_order, (1,)) actions (the order in periods of the "
                            "node's mean demand) instead of Discrete(order_levels)"),
        "reward": Param("local", choice("local", "team"), "the reward (see above)"),
        "max_steps": COMMON["max_steps"].with_default(100),
        "black_death": BLACK_DEATH_V0,
    }
    ends_by_itself = False  # demand never stops: a max_time or max_steps always
    presets = {
        "small": {"widths": (1, 1, 1, 1), "demand_rate": 4.0},
        "default": {},
        "large": {"widths": (32, 8, 4, 2), "demand_rate": 16.0},
    }

    def _setup(self):
        p, name = self.p, self.metadata["name"]
        widths = p.widths
        if any(b > a for a, b in zip(widths, widths[1:], strict=False)):
            raise ConfigError(
                f"{name}: widths={tuple(widths)!r} must not grow upstream (retailers first), "
                "so that every node has at least one buyer"
            )
        depth = len(widths)
        if depth == 4:
            titles = ["retailer", "wholesaler", "distributor", "factory"]
        else:
            titles = ["retailer"] + [f"tier{lvl}" for lvl in range(1, depth - 1)] + ["factory"]
            titles = titles[:depth] if depth > 1 else ["retailer"]
        names = [f"{titles[lvl]}_{j}" for lvl, w in enumerate(widths) for j in range(w)]
        low = np.zeros(N_OBS)
        low[[3, 11, 12]] = -1.0
        if p.continuous:
            box = spaces.Box(low.astype(np.float32), np.ones(N_OBS, dtype=np.float32))
            return Group(names, box, spaces.Box(0.0, p.max_order, (1,), dtype=np.float32))
        return discrete(names, low, np.ones(N_OBS), p.order_levels)

    def _state_setup(self) -> spaces.Box:
        low = np.zeros(3 + NODE * sum(self.p.widths), dtype=np.float32)
        low[[1, 2]] = -1.0
        low[3 + 3 :: NODE] = -1.0
        return spaces.Box(low, np.ones_like(low), dtype=np.float32)

    def _build(self):
        p = self.p
        self.model = m = SupplyChainModel(self.sim, self.rng, p)
        m.start()
        n, levels = m.n_nodes, p.order_levels
        mean = np.asarray(m.mean)
        lead = np.asarray(m.lead, dtype=np.float64)
        self._unit = p.max_order * mean / (levels - 1)  # order unit per node
        # ... once per observed quantity: dividing by it needs no broadcasting (quicker on
        # arrays this small)
        self._units = np.tile(self._unit, (8, 1))
        if p.continuous:  # action a (periods of mean demand) -> round(a * mean) items
            self._orders = [_order_of(float(x)) for x in mean]
            self.every(1.0, m.place_order, values=self._orders.__getitem__)
        else:
            # items ordered by each action, per node
            qty = np.rint(self._unit[:, None] * np.arange(levels)[None, :]).astype(np.int64)
            self._orders = qty.tolist()
            self._limit = (lead + 1 + p.position_cap) * mean  # largest inventory position
            # action a is allowed when its order fits under the limit: the room needed, per
            # node and action (-inf for the no-op, always allowed)
            self._need = qty.astype(np.float64)
            self._need[:, NOOP] = -np.inf
            # The masks are written by _observe_all, from the positions it observes.
            self.every(1.0, m.place_order, values=self._orders.__getitem__)
        static = np.zeros((n, N_OBS), dtype=np.float64)
        static[:, 8] = lead / (1 + lead)
        static[:, 9] = np.asarray(m.level) / max(1, len(p.widths) - 1)
        self._static = static
        self._clock = np.zeros(3)  # the observation's last three entries (see _observe_all)
        self._rolled = 0.0  # the last period boundary at which the statistics rolled

    # ---- periodic decisions ---------------------------------------------------------
    def _flush(self, until: float) -> None:
        m, p = self.model, self.p
        rate = p.demand_rate
        costs = [c / rate for c in m.take_costs(until)]
        if p.reward == "team":
            self.rew_buf -= np.float32(np.sum(costs) / len(costs))
        else:
            self.rew_buf -= np.array(costs, dtype=np.float32)
        # A period boundary: roll the demand statistics once all of the boundary's events
        # have run, before the nodes observe and order.
        if until >= self._rolled + 1.0:
            self._rolled = math.floor(until)
            m.close_period()

    # ---- observations ---------------------------------------------------------------
    def _observe_all(self, obs: np.ndarray) -> None:
        """Every node's observation at once (vectorised over nodes)."""
        m, p = self.model, self.p
        # the eight quantities, one row each (columns: nodes), in order units; row 6 (the
        # forecast error std) is derived in place
        x = np.array([m.on_hand, m.backlog, m.on_order, m.inventory_positions(), m.last_demand,
                      m.forecast, m.variance, m.last_order], dtype=np.float64)
        if not p.continuous and self.needs_buf[0]:  # (the nodes decide together, or none)
            self._write_masks(x[3])
        np.sqrt(x[6], out=x[6])
        x /= self._units
        obs[:] = self._static
        obs[:, :8] = (x / (SCALE + np.abs(x))).T
        now, steps, clock = self.sim.now, p.max_steps, self._clock
        phase = 2 * math.pi * now / p.season
        clock[0] = min(1.0, now / steps) if steps else 0.0
        clock[1], clock[2] = math.sin(phase), math.cos(phase)
        obs[:, 10:13] = clock

    def _write_masks(self, position: np.ndarray) -> None:
        """Every node's mask: the orders that keep its inventory position within its limit
        (a prefix of the actions, as order sizes grow with the action), and the no-op."""
        room = self._limit - position
        np.less_equal(self._need, room[:, None], out=self.mask_buf)

    def _state_all(self, out: np.ndarray) -> None:
        m, now, steps = self.model, self.sim.now, self.p.max_steps
        x = np.array([m.on_hand, m.backlog, m.on_order, m.on_order, m.last_demand, m.forecast,
                      m.last_order], dtype=np.float64)
        x[3] = x[0] + x[2] - x[1]
        x /= self._unit
        phase = 2 * math.pi * now / self.p.season
        out[:3] = (min(1.0, now / steps) if steps else 0.0, math.sin(phase), math.cos(phase))
        out[3:] = (x / (SCALE + np.abs(x))).T.reshape(-1)

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



def _order_of(mean: float):
    """Continuous actions: the items a node ordering ``a`` periods of ``mean`` demand orders."""

    def order(a: np.ndarray) -> int:
        return round(float(a[0]) * mean)

    return order


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
