"""Versioned public name of the warehouse scenario, version 0 (kept for reproducibility).

The same model as ``warehouse_v1`` (no time limit) with v0's actions,
``Discrete(order_slots + 1)``: the no-op waits with an empty batch and starts the tour with a
partial one; ``k`` adds slot ``k-1``. See ``deszoo/envs/warehouse/env.py`` for the scenario
and its version history.
"""

import numpy as np

from deszoo.core.aec import aec_constructors
from deszoo.core.params import BLACK_DEATH_V0
from deszoo.envs.warehouse.env import pick
from deszoo.envs.warehouse_v1 import WarehouseEnvV1


class WarehouseEnvV0(WarehouseEnvV1):
    """Robotic order picking, version 0: one no-op for "wait" and "start the tour"."""

    metadata = {**WarehouseEnvV1.metadata, "name": "warehouse_v0"}
    params = {**WarehouseEnvV1.params, "black_death": BLACK_DEATH_V0}
    GO = 0


def heuristic(obs: np.ndarray, mask: np.ndarray) -> int:
    """warehouse_v1's heuristic on v0's actions (the no-op starts a partial batch's tour)."""
    return pick(obs, mask, go=0)


parallel_env = WarehouseEnvV0
env, raw_env = aec_constructors(parallel_env)
__all__ = ["env", "heuristic", "parallel_env", "raw_env"]
